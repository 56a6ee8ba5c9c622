package cli

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net"
	"strings"
	"time"

	"github.com/spf13/cobra"

	"github.com/acemq/acemq-flow/broker"
	"github.com/acemq/acemq-flow/dsl"
	"github.com/acemq/acemq-flow/engine"
	"github.com/acemq/acemq-flow/engine/dashboard"
	"github.com/acemq/acemq-flow/workflows"
)

// devShipIn is how far ahead dev's waiting example order ships: long
// enough to be seen waiting in the dashboard, short enough to be seen
// shipping.
const devShipIn = 2 * time.Minute

// devCourierBack is how long dev's courier keeps one order's depot closed:
// long enough for its ship step to be given up (about ten seconds), short
// enough that a person replays it a moment later and sees it complete.
const devCourierBack = 30 * time.Second

func (a *app) devCommand() *cobra.Command {
	var addr, metricsAddr string
	cmd := &cobra.Command{
		Use:   "dev",
		Short: "Try everything with nothing installed: a broker, a worker, example runs and the dashboard in one process",
		Long: "Run, in this one process and with nothing installed, the embedded broker (" + EmbeddedURL + "), a run\n" +
			"journal in memory, a worker for the flows of this binary and the dashboard (--addr), and\n" +
			"start a few example runs of each flow, so that the dashboard has something to show: for\n" +
			"place-order, orders that complete, are retried, wait, and fail; for approve-refund, a refund\n" +
			"that waits for its approval. The dashboard replays and compensates failed runs, signals and\n" +
			"cancels runs, but does not start runs. The broker and the journal live in this\n" +
			"process: other processes (start, runs, worker) cannot reach them, and they are\n" +
			"forgotten when it stops (SIGINT or SIGTERM). --database-url is not used.",
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) (err error) {
			if !a.logLevelSet {
				// Its example runs fail on purpose: the dashboard shows
				// them, not WARN lines about each.
				a.logLevel = slog.LevelError
			}
			if len(a.flows) == 0 {
				return fmt.Errorf("dev: %w", ErrNoFlows)
			}
			if a.databaseURL != "" {
				fmt.Fprintln(cmd.ErrOrStderr(), "dev keeps its run journal in memory: --database-url / ACEMQ_DATABASE_URL is not used")
			}
			ln, err := listen(cmd, "--addr", addr)
			if err != nil {
				return err
			}
			defer ln.Close() // if never served: Serve closes it
			obs, err := a.newObserver(cmd, metricsAddr)
			if err != nil {
				return err
			}
			defer obs.close(cmd.Context(), &err)
			s, err := a.openDevSession(cmd)
			if err != nil {
				return err
			}
			defer s.close(cmd.Context(), &err)
			h, err := dashboard.New(dashboard.Config{Engine: s.eng, Logger: a.logger(cmd)})
			if err != nil {
				return err
			}
			defer closeDashboard(cmd.Context(), h, &err)
			ctx := cmd.Context()
			return obs.run(ctx, s, func(started func(*engine.Worker)) error {
				serveCtx, stop := context.WithCancel(ctx)
				served := make(chan error, 1)
				go func() { served <- serveDashboard(serveCtx, ln, h) }()
				err := work(ctx, s, nil, func(w *engine.Worker) {
					if started != nil {
						started(w)
					}
					runs := startExamples(ctx, s.eng, devExamples(a.flows), s.conn.Logger())
					devIntro{program: a.name, dashboard: ln.Addr(), obs: obs, flows: a.flows, runs: runs}.write(cmd.ErrOrStderr())
				})
				stop()
				return errors.Join(err, <-served)
			})
		},
	}
	addDashboardAddrFlag(cmd, &addr)
	cmd.Flags().StringVar(&metricsAddr, "metrics-addr", "",
		"also serve the worker's /metrics, /healthz and /readyz on this address, e.g. 127.0.0.1:9464, for "+a.name+" top (default: not served)")
	return cmd
}

// openDevSession is dev's engine: on the embedded broker, with the
// journal in memory and the app's flows registered.
func (a *app) openDevSession(cmd *cobra.Command) (_ *session, err error) {
	s := &session{}
	defer func() {
		if err != nil {
			s.close(cmd.Context(), &err)
		}
	}()
	if s.conn, err = a.openWith(cmd, EmbeddedURL, broker.Config{}); err != nil {
		return nil, err
	}
	if s.eng, err = engine.New(engine.Config{Conn: s.conn, Build: Version}); err != nil {
		return nil, err
	}
	if err := s.eng.Register(a.flows...); err != nil {
		return nil, fmt.Errorf("register flows: %w", err)
	}
	return s, nil
}

// example is a run dev starts, and what it shows.
type example struct {
	flow    string
	payload any
	// shows says what becomes of the run, for people.
	shows string
}

// startedExample is an example that was started, or why it was not.
type startedExample struct {
	example
	runID string
	err   error
}

// devExamples are the runs dev starts: for the shipped place-order, an
// order down each of its paths (workflows' stand-in services choose by
// card, item and address); for any other flow, its dsl.Example payload.
// A flow without an example gets none.
func devExamples(flows []*dsl.FlowDef) []example {
	var out []example
	for _, f := range flows {
		switch f {
		case workflows.PlaceOrder:
			out = append(out, placeOrderExamples(time.Now())...)
			continue
		case workflows.ApproveRefund:
			p, _ := f.Example()
			out = append(out, example{flow: f.Name(), payload: p,
				shows: "waits for its approval: open it in the dashboard and send the signal, or cancel it"})
			continue
		}
		if p, ok := f.Example(); ok {
			out = append(out, example{flow: f.Name(), payload: p, shows: "its example payload"})
		}
	}
	return out
}

// placeOrderExamples are orders down each path of place-order.
func placeOrderExamples(now time.Time) []example {
	order := func(id string, change func(*workflows.Order)) workflows.Order {
		o := workflows.ExampleOrder()
		o.ID = id
		change(&o)
		return o
	}
	const name = workflows.PlaceOrderName
	return []example{
		{name, order("dev-1", func(*workflows.Order) {}), "completes"},
		{name, order("dev-2", func(o *workflows.Order) { o.Card = workflows.CardTimesOutOnce }),
			"the gateway times out once: charge is retried through the ladder, then completes"},
		{name, order("dev-3", func(o *workflows.Order) { o.Digital, o.Address = true, "" }),
			"a digital order: reserve and ship are skipped"},
		{name, order("dev-4", func(o *workflows.Order) { o.ShipAt = now.Add(devShipIn) }),
			fmt.Sprintf("waits on the ladder for its ship_at, %.0f minutes from now, then ships", devShipIn.Minutes())},
		{name, order("dev-5", func(o *workflows.Order) { o.Card = workflows.CardDeclined }),
			"the card is declined: failed at charge, with nothing to undo"},
		{name, order("dev-6", func(o *workflows.Order) { o.Address = "1 Main Street, " + workflows.NoDeliveryTo }),
			"the courier refuses the address: failed at reserve, held for a replay (which fails again), " +
				"then refunded; or compensate it now"},
		{name, order("dev-7", func(o *workflows.Order) { o.CourierBackAt = now.Add(devCourierBack) }),
			fmt.Sprintf("the courier's depot is closed until %s: ship fails, the run is held for a replay; "+
				"after that time, open it in the dashboard and press Replay: it completes", now.Add(devCourierBack).Format(time.TimeOnly))},
	}
}

// startExamples starts each example, logging the ones that could not be
// started (dev goes on without them).
func startExamples(ctx context.Context, eng *engine.Engine, examples []example, log *slog.Logger) []startedExample {
	out := make([]startedExample, len(examples))
	for i, ex := range examples {
		out[i].example = ex
		res, err := eng.Start(ctx, ex.flow, ex.payload)
		out[i].runID, out[i].err = res.RunID, err
		if err != nil {
			log.Error("could not start an example run", slog.String("flow", ex.flow), slog.Any("error", err))
		}
	}
	return out
}

// devIntro is what dev says on stderr once it runs: where to look, what
// it started, and what it cannot do.
type devIntro struct {
	// program is the binary's name, for the commands it suggests.
	program string
	// dashboard is where the dashboard listens.
	dashboard net.Addr
	obs       *observer
	flows     []*dsl.FlowDef
	runs      []startedExample
}

func (d devIntro) write(w io.Writer) {
	names := make([]string, len(d.flows))
	for i, f := range d.flows {
		names[i] = f.Name()
	}
	var b strings.Builder
	fmt.Fprintf(&b, "%s dev: the embedded broker, a run journal in memory, a worker for %s\nand the dashboard, all in this process\n\n",
		d.program, strings.Join(names, ", "))
	fmt.Fprintf(&b, "  dashboard  %s\n", browseURL(d.dashboard))
	if w := exposedWarning(d.dashboard); w != "" {
		fmt.Fprintf(&b, "  %s (dev has no token: keep it on 127.0.0.1)\n", w)
	}
	if d.obs != nil {
		u := browseURL(d.obs.ln.Addr())
		fmt.Fprintf(&b, "  metrics    %smetrics   (watch it live: %s top --from %s)\n", u, d.program, strings.TrimSuffix(u, "/"))
	}
	started := 0
	for _, r := range d.runs {
		if r.err == nil {
			started++
		}
	}
	fmt.Fprintf(&b, "\nstarted %s for the dashboard to show (run ids begin with these):\n", count(started, "example run"))
	t := newTable(&b)
	for _, r := range d.runs {
		if r.err == nil {
			t.row("  "+r.flow, r.runID[:min(len(r.runID), 8)], r.shows)
		}
	}
	t.flush()
	fmt.Fprintf(&b, "\nThe dashboard replays and compensates failed runs, signals and cancels runs; it does not start runs.\nThe broker and the journal "+
		"live in this process: other %[1]s commands (start, runs, replay) cannot reach them. To run flows\n"+
		"for real, give `%[1]s worker`, `start` and `dashboard` a RabbitMQ (ACEMQ_URL) and a PostgreSQL\n"+
		"(ACEMQ_DATABASE_URL). %[2]s=ship before `%[1]s dev` takes the courier down.\n"+
		"Ctrl-C stops it; everything is forgotten.\n", d.program, workflows.OutageEnv)
	io.WriteString(w, b.String())
}
