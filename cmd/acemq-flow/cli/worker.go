package cli

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"slices"
	"time"

	"github.com/spf13/cobra"

	"github.com/acemq/acemq-flow/broker"
	"github.com/acemq/acemq-flow/engine"
	"github.com/acemq/acemq-flow/persistence"
)

// ErrNoFlows: the binary was built without flows, so there is nothing to
// work, start or replay.
var ErrNoFlows = errors.New("this binary has no flows: build a main of your own that calls cli.Main(flows...)")

// consumerCheckInterval is how often a worker looks for a consumer that
// ended on its own (its queue deleted under it): such a worker exits with
// an error so that whatever supervises it starts a healthy one.
const consumerCheckInterval = 5 * time.Second

func (a *app) workerCommand() *cobra.Command {
	var (
		bf           brokerFlags
		flows        []string
		closeTimeout time.Duration
		retention    time.Duration
		cronAlone    bool
		metricsAddr  string
		claimTimeout time.Duration
		heartbeat    time.Duration
	)
	cmd := &cobra.Command{
		Use:   "worker",
		Short: "Work the flows' steps and compensations until SIGINT or SIGTERM, then drain",
		Long: "Declare the flows' exchanges and queues, then work every step and compensation of them\n" +
			"(or of the flows named with --flows) until SIGINT or SIGTERM. Then stop taking messages,\n" +
			"let the steps in flight finish within --close-timeout, flush the run journal and exit.\n" +
			"Several workers may work the same flows; give them one database (--database-url) so\n" +
			"that they share the run journal and the idempotency store.",
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) (err error) {
			if !a.logLevelSet {
				a.logLevel = slog.LevelInfo
			}
			if len(a.flows) == 0 {
				return fmt.Errorf("worker: %w", ErrNoFlows)
			}
			if retention < 0 {
				return fmt.Errorf("--journal-retention %s: want 0 (keep every run) or more", retention)
			}
			if heartbeat < 0 {
				return fmt.Errorf("--heartbeat %s: want 0 (the default, %s) or more", heartbeat, engine.DefaultHeartbeat)
			}
			if claimTimeout < 0 {
				return fmt.Errorf("--claim-timeout %s: want 0 (the default, %s) or more", claimTimeout, persistence.DefaultClaimTimeout)
			}
			obs, err := a.newObserver(cmd, metricsAddr)
			if err != nil {
				return err
			}
			defer obs.close(cmd.Context(), &err)
			s, err := a.openSession(cmd, sessionConfig{broker: bf, closeTimeout: closeTimeout,
				noDatabase: noDatabaseWorker, journalRetention: retention, cronAlone: cronAlone,
				claimTimeout: claimTimeout, heartbeat: heartbeat, worker: true})
			if err != nil {
				return err
			}
			defer s.close(cmd.Context(), &err)
			return obs.run(cmd.Context(), s, func(started func(*engine.Worker)) error {
				return a.transactionsNeedADatabase(work(cmd.Context(), s, flows, started), s, flows)
			})
		},
	}
	bf.add(cmd)
	cmd.Flags().StringSliceVar(&flows, "flows", nil, "flows to work, comma-separated (default: every flow of the binary)")
	cmd.Flags().DurationVar(&closeTimeout, "close-timeout", broker.DefaultCloseTimeout, "how long the steps in flight get to finish after SIGINT or SIGTERM")
	cmd.Flags().BoolVar(&cronAlone, "cron", false,
		"without a database: fire the flows' cron triggers from this worker alone (a second worker asking is refused; with a database every worker fires them and each tick starts one run)")
	cmd.Flags().DurationVar(&retention, "journal-retention", 0,
		"with a database: delete, in small batches every 10 minutes, runs that ended longer ago than this (e.g. 720h; 0 keeps every run)")
	cmd.Flags().DurationVar(&claimTimeout, "claim-timeout", 0,
		"with a database: how long a step's claim on its idempotency key lasts, so that another worker runs the step again after a worker died in it; keep it above the longest step (default 5m)")
	cmd.Flags().DurationVar(&heartbeat, "heartbeat", 0,
		"how often the worker reports itself (its flows, readiness and steps in flight) to the run journal, for the fleet view; "+
			"it is shown lost after three reports missed (default 10s)")
	cmd.Flags().StringVar(&metricsAddr, "metrics-addr", "",
		"serve /metrics (Prometheus), /healthz and /readyz on this address, e.g. 127.0.0.1:9464 (default: not served)")
	return cmd
}

// transactionsNeedADatabase says what a worker without a database refused
// by engine.ErrNoTransactions lacks: a Transactional step commits in one
// PostgreSQL transaction with its record, and --database-url is what
// gives it one (the engine's own message tells a library user which store
// to give it). worked are the flows asked for (none: every flow). Any
// other error is returned as it is.
func (a *app) transactionsNeedADatabase(err error, s *session, worked []string) error {
	if s.db != nil || !errors.Is(err, engine.ErrNoTransactions) {
		return err
	}
	for _, f := range a.flows {
		if len(worked) > 0 && !slices.Contains(worked, f.Name()) {
			continue
		}
		for _, st := range f.Steps() {
			if st.Transactional {
				return fmt.Errorf("worker: flow %q step %q is Transactional: its effects commit in one PostgreSQL transaction "+
					"with the record that it ran, and without a database there is none: set %s (%w)", f.Name(), st.Name, databaseFlag, engine.ErrNoTransactions)
			}
		}
	}
	return err
}

// work runs a worker for flows until ctx ends, then drains it. It is
// engine.Run, with started (if not nil) called with the worker once it
// works, what it works logged then (a supervisor or a test reads "worker
// started" as ready), and a consumer that ended on its own made the
// worker's failure.
func work(ctx context.Context, s *session, flows []string, started func(*engine.Worker)) error {
	log := s.conn.Logger()
	w, err := s.eng.StartWorker(ctx, flows...)
	if err != nil {
		return fmt.Errorf("worker: %w", err)
	}
	if started != nil {
		started(w)
	}
	log.Info("worker started", slog.Any("flows", w.Flows()), slog.Any("queues", workedQueues(s.eng, w.Flows())),
		slog.Bool("shared_journal", s.shared()))
	tick := time.NewTicker(consumerCheckInterval)
	defer tick.Stop()
	var ended error
	for ended == nil {
		select {
		case <-ctx.Done():
			log.Info("draining", slog.String("reason", "signal"))
			return closeWorker(ctx, w, nil)
		case <-tick.C:
			ended = w.Err()
		}
	}
	log.Error("a consumer ended; stopping the worker", slog.Any("error", ended))
	return closeWorker(ctx, w, fmt.Errorf("worker: %w", ended))
}

// closeWorker drains w within the engine's close timeout, even after ctx
// was cancelled, and joins its failure to cause.
func closeWorker(ctx context.Context, w *engine.Worker, cause error) error {
	if err := w.Close(context.WithoutCancel(ctx)); err != nil {
		return errors.Join(cause, fmt.Errorf("worker: drain: %w", err))
	}
	return cause
}

// workedQueues lists the queues a worker of flows consumes: each step's
// (but External ones), each compensation's, and each flow's
// compensate-now queue.
func workedQueues(eng *engine.Engine, flows []string) []string {
	var out []string
	for _, name := range flows {
		fi, err := eng.Flow(name)
		if err != nil {
			continue
		}
		for _, st := range fi.Steps {
			if !st.External {
				out = append(out, st.Queue)
			}
			if st.Compensation != "" {
				out = append(out, st.Compensation)
			}
		}
		out = append(out, fi.CompensateQueue)
	}
	return out
}
