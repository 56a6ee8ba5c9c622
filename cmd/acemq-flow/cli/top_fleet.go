package cli

import (
	"context"
	"fmt"
	"math"
	"strings"
	"time"

	"github.com/spf13/cobra"

	"github.com/acemq/acemq-flow/broker"
	"github.com/acemq/acemq-flow/engine"
	"github.com/acemq/acemq-flow/engine/enginepg"
	"github.com/acemq/acemq-flow/engine/fleet"
)

// topFleet is where top reads the fleet (package engine/fleet) from: the
// workers' reports in the database's journal, the queues' depths from the
// broker, the binary's flows. Nil when top has neither a broker nor a
// database: it then shows what the metrics endpoints say only.
type topFleet struct {
	src   fleet.Source
	close func()
}

// openTopFleet opens what --url and --database-url name, either or both;
// it opens nothing, and returns nil, when neither is set. It declares
// nothing on the broker.
func (a *app) openTopFleet(cmd *cobra.Command, bf brokerFlags) (_ *topFleet, err error) {
	if bf.url == "" && a.databaseURL == "" {
		return nil, nil
	}
	f := &topFleet{}
	var closers []func()
	f.close = func() {
		for i := len(closers) - 1; i >= 0; i-- {
			closers[i]()
		}
	}
	defer func() {
		if err != nil {
			f.close()
		}
	}()
	stores, err := a.openStores(cmd, enginepg.Config{Migrations: enginepg.SkipMigrations})
	if err != nil {
		return nil, err
	}
	if stores != nil {
		closers = append(closers, stores.Close)
		f.src.Journal = stores.Journal()
	}
	if bf.url == "" {
		return f, nil
	}
	conn, err := a.openWith(cmd, bf.url, broker.Config{Ladder: bf.ladder})
	if err != nil {
		return nil, err
	}
	closers = append(closers, func() {
		var cerr error
		closeConn(cmd.Context(), conn, &cerr)
		if cerr != nil {
			fmt.Fprintln(cmd.ErrOrStderr(), cerr)
		}
	})
	f.src.Conn = conn
	if len(a.flows) > 0 {
		// The engine only compiles the flows, for their steps' queues.
		eng, err := engine.New(engine.Config{Conn: conn})
		if err != nil {
			return nil, err
		}
		closers = append(closers, func() { _ = eng.Close(context.WithoutCancel(cmd.Context())) })
		if err := eng.Register(a.flows...); err != nil {
			return nil, fmt.Errorf("register flows: %w", err)
		}
		f.src.Flows = eng.Flows()
	}
	return f, nil
}

// read reads the fleet now, or says why it could not.
func (f *topFleet) read(ctx context.Context) (*fleet.View, error) {
	if f == nil {
		return nil, nil
	}
	v, err := fleet.Read(ctx, f.src)
	if err != nil {
		return nil, err
	}
	return &v, nil
}

// mergeFleet adds the fleet's figures to top's rows: each step's queue
// depth, and its dead letters as the broker counts them now; what the
// workers hold in flight where no metrics endpoint answered (the metrics'
// figure is the live one). A step only the fleet knows gets a row; a
// flow's row sums its steps'.
func mergeFleet(rows []row, v *fleet.View, metricsUp bool) []row {
	if v == nil {
		return rows
	}
	at := map[stepKey]int{}
	for i, r := range rows {
		at[stepKey{r.flow, r.step}] = i
	}
	get := func(k stepKey) *row {
		i, ok := at[k]
		if !ok {
			i = len(rows)
			at[k] = i
			rows = append(rows, row{flow: k.flow, step: k.step, rate: math.NaN(), failRate: math.NaN(), p50: math.NaN(), p99: math.NaN(), queue: math.NaN()})
		}
		return &rows[i]
	}
	for _, s := range v.Steps {
		get(stepKey{flow: s.Flow})
		r := get(stepKey{s.Flow, s.Step})
		if s.Queue.Exists {
			r.queue = float64(s.Queue.Messages)
		}
		if s.DeadLetter.Exists {
			r.dlq = float64(s.DeadLetter.Messages)
		}
		if !metricsUp && v.Reports {
			r.inFlight = float64(s.InFlight)
		}
	}
	// The flows' rows again: the sums of their steps' as they are now.
	type sum struct {
		dlq, inFlight, queue float64
		queued               bool
	}
	sums := map[string]*sum{}
	for _, r := range rows {
		if r.step == "" {
			continue
		}
		s := sums[r.flow]
		if s == nil {
			s = &sum{}
			sums[r.flow] = s
		}
		s.dlq += r.dlq
		s.inFlight += r.inFlight
		if !math.IsNaN(r.queue) {
			s.queue, s.queued = s.queue+r.queue, true
		}
	}
	for i := range rows {
		if s, ok := sums[rows[i].flow]; ok && rows[i].step == "" {
			rows[i].dlq, rows[i].inFlight, rows[i].queue = s.dlq, s.inFlight, math.NaN()
			if s.queued {
				rows[i].queue = s.queue
			}
		}
	}
	return rows
}

// fleetLines are top's lines about the fleet: one saying how many
// workers are up, draining and lost, and the ladder's backlog and
// lateness; then one per worker, at most max of them, the lost last.
func fleetLines(v *fleet.View, err error, max int) (summary string, workers []string) {
	switch {
	case err != nil:
		return "fleet not read: " + err.Error(), nil
	case v == nil:
		return "", nil
	}
	var parts []string
	if v.Reports {
		parts = append(parts, fmt.Sprintf("workers %d up, %d draining, %d lost", v.Count(fleet.StateUp), v.Count(fleet.StateDraining), v.Count(fleet.StateLost)))
	} else {
		parts = append(parts, "workers: no database (--database-url), no reports")
	}
	for _, l := range v.Ladders {
		s := fmt.Sprintf("ladder %s: backlog %d, due %d", l.Name, l.Backlog, l.Due)
		if l.Delivered > 0 {
			s += ", late p99 " + shortDuration(time.Duration(l.LateP99))
		}
		parts = append(parts, s)
	}
	for _, p := range v.Problems {
		parts = append(parts, p)
	}
	summary = strings.Join(parts, " · ")
	if len(v.Workers) == 0 || max < 2 {
		return summary, nil
	}
	workers = append(workers, fmt.Sprintf("%-22s %-12s %-8s %9s  %-9s  %s", "WORKER", "HOST", "STATE", "IN FLIGHT", "SEEN", "READY"))
	shown := v.Workers
	if len(shown) > max-1 {
		shown = shown[:max-2]
	}
	for _, w := range shown {
		ready := "yes"
		if !w.Ready {
			ready = "no: " + strings.Join(w.NotReady, "; ")
		}
		seen := shortDuration(v.At.Sub(w.LastSeen).Round(100*time.Millisecond)) + " ago"
		workers = append(workers, fmt.Sprintf("%-22s %-12s %-8s %9d  %-9s  %s", truncate(w.ID, 22), truncate(w.Host, 12), w.State,
			w.InFlight, seen, ready))
	}
	if len(shown) < len(v.Workers) {
		workers = append(workers, fmt.Sprintf("… and %d more workers (-o json lists them all)", len(v.Workers)-len(shown)))
	}
	return summary, workers
}
