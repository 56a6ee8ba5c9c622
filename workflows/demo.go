package workflows

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net/url"
	"slices"
	"strings"
	"sync"
	"time"

	"github.com/acemq/acemq-flow/broker"
	"github.com/acemq/acemq-flow/broker/transport"
	"github.com/acemq/acemq-flow/engine"
	"github.com/acemq/acemq-flow/engine/journal"
)

// Defaults of DemoConfig.
const (
	// DefaultDemoFlow is the name the demo runs place-order under, so that
	// it never touches the queues of a worker running place-order itself.
	DefaultDemoFlow = "acemq-demo.place-order"
	// DefaultDemoLadder is the demo's own scheduler ladder.
	DefaultDemoLadder = "acemq-demo.schedule"
	// DefaultDemoTimeout bounds a demo; it takes about four seconds.
	DefaultDemoTimeout = 15 * time.Second
)

// demoCleanupTimeout bounds the deletion of what the demo declared, which
// happens even when the demo's own time is up.
const demoCleanupTimeout = 10 * time.Second

// demoShipDelay is how far ahead the waiting run's ship_at is.
const demoShipDelay = 3 * time.Second

// DemoConfig configures the demo of place-order (what `make run` and
// `acemq-flow demo` show). The zero value is the defaults.
type DemoConfig struct {
	// URL is the broker: amqp://user:password@host:5672/vhost for
	// RabbitMQ, "" or memory:// for the embedded in-process broker.
	URL string
	// Ladder is the scheduler ladder the demo runs on ("" =
	// DefaultDemoLadder). It must be the demo's own: the demo deletes it
	// when it ends, with the timer of the run it held for replay. It
	// refuses a ladder that exists already, unless it is
	// DefaultDemoLadder (left by an earlier demo).
	Ladder string
	// Flow is the name place-order runs under ("" = DefaultDemoFlow): its
	// exchange and the prefix of its queues, which the demo deletes
	// before it starts and when it ends.
	Flow string
	// Timeout bounds the demo (0 = DefaultDemoTimeout).
	Timeout time.Duration
	// Logger receives the library's logs (nil = the broker's default).
	Logger *slog.Logger
}

// Validate refuses a config the demo cannot run with.
func (c DemoConfig) Validate() error {
	if c.Timeout < 0 {
		return fmt.Errorf("demo: timeout %s, want a positive duration (or 0 for the default)", c.Timeout)
	}
	if c.Ladder == broker.DefaultLadder {
		return fmt.Errorf("demo: ladder %q is every worker's; the demo deletes the ladder it runs on, so give it one of its own (default %s)",
			c.Ladder, DefaultDemoLadder)
	}
	return nil
}

func (c DemoConfig) withDefaults() DemoConfig {
	if c.Ladder == "" {
		c.Ladder = DefaultDemoLadder
	}
	if c.Flow == "" {
		c.Flow = DefaultDemoFlow
	}
	if c.Timeout == 0 {
		c.Timeout = DefaultDemoTimeout
	}
	return c
}

// demoRun is one of the demo's orders and what becomes of it.
type demoRun struct {
	title string
	order Order
	// compensate: the run fails and is held for replay, and the demo
	// compensates it by hand.
	compensate bool
	want       journal.Status
}

func demoRuns(now time.Time) []demoRun {
	shipAt := now.Add(demoShipDelay).Truncate(time.Second)
	return []demoRun{{
		title: "an order that goes straight through",
		order: Order{ID: "o-1001", Customer: "Ada", Item: "coffee beans", Quantity: 2, AmountCents: 2400,
			Card: CardApproved, Address: "12 Harbour Street, Bristol"},
		want: journal.Completed,
	}, {
		title: "an e-book, nothing to reserve or ship; the payment gateway times out once and charge is retried",
		order: Order{ID: "o-1002", Customer: "Grace", Item: "e-book", Quantity: 1, AmountCents: 1200,
			Card: CardTimesOutOnce, Digital: true},
		want: journal.Completed,
	}, {
		title: "the courier does not deliver to Atlantis, after the card was charged",
		order: Order{ID: "o-1003", Customer: "Linus", Item: "desk lamp", Quantity: 1, AmountCents: 3900,
			Card: CardApproved, Address: "1 Coral Way, Atlantis"},
		compensate: true,
		want:       journal.Compensated,
	}, {
		title: fmt.Sprintf("an order to ship at %s, a few seconds after it is placed", clock(shipAt)),
		order: Order{ID: "o-1004", Customer: "Barbara", Item: "teapot", Quantity: 1, AmountCents: 1800,
			Card: CardApproved, Address: "7 Mill Lane, Leeds", ShipAt: shipAt},
		want: journal.Completed,
	}}
}

// undoes says what each compensation of place-order does, for a person.
var undoes = map[string]string{"charge": "the payment refunded", "reserve-stock": "the stock released", "book-courier": "the booking cancelled"}

// Run runs four orders through place-order (named Flow, on the stand-in
// services) with an in-memory journal, and writes each run's timeline, as
// the journal recorded it, to out: one completes; one is retried through
// the scheduler ladder and completes; one is given up after its card was
// charged, is held for replay, and is compensated by hand as an operator
// would (acemq-flow compensate), its refund in the timeline; one waits on
// the ladder until its ship_at and completes. It returns an error if a run
// ends otherwise, or the demo outlasts its timeout. It deletes the flow's
// queues and exchange, and its ladder, before it returns.
func (c DemoConfig) Run(ctx context.Context, out io.Writer) (err error) {
	if err := c.Validate(); err != nil {
		return err
	}
	if out == nil {
		return errors.New("demo: nil output writer")
	}
	c = c.withDefaults()
	ctx, cancel := context.WithTimeout(ctx, c.Timeout)
	defer cancel()

	brokerURL, err := demoURL(c.URL)
	if err != nil {
		return err
	}
	bcfg := broker.Config{Ladder: c.Ladder, Logger: c.Logger}
	conn, err := bcfg.Open(ctx, brokerURL)
	if err != nil {
		return fmt.Errorf("demo: connect: %w", err)
	}
	ours := false
	defer func() {
		cctx, ccancel := context.WithTimeout(context.WithoutCancel(ctx), demoCleanupTimeout)
		defer ccancel()
		err = errors.Join(err, conn.Close(cctx))
		if ours {
			// Only now: the connection's control consumer read the ladder.
			err = errors.Join(err, deleteLadder(cctx, bcfg, brokerURL))
		}
	}()
	if err := ownLadder(ctx, conn, c.Ladder); err != nil {
		return err
	}
	ours = true

	j, err := newWatchedJournal()
	if err != nil {
		return err
	}
	eng, err := engine.New(engine.Config{Conn: conn, Journal: j})
	if err != nil {
		return fmt.Errorf("demo: %w", err)
	}
	defer func() {
		cctx, ccancel := context.WithTimeout(context.WithoutCancel(ctx), demoCleanupTimeout)
		defer ccancel()
		err = errors.Join(err, eng.Close(cctx))
	}()
	if err := eng.Register(NewPlaceOrder(c.Flow, NewStandIns().Services())); err != nil {
		return fmt.Errorf("demo: %w", err)
	}
	info, err := eng.Flow(c.Flow)
	if err != nil {
		return fmt.Errorf("demo: %w", err)
	}
	if err := deleteFlow(ctx, conn, info); err != nil {
		return fmt.Errorf("demo: remove what an earlier demo left: %w", err)
	}
	defer func() {
		cctx, ccancel := context.WithTimeout(context.WithoutCancel(ctx), demoCleanupTimeout)
		defer ccancel()
		err = errors.Join(err, deleteFlow(cctx, conn, info))
	}()
	w, err := eng.StartWorker(ctx)
	if err != nil {
		return fmt.Errorf("demo: %w", err)
	}
	defer func() {
		cctx, ccancel := context.WithTimeout(context.WithoutCancel(ctx), demoCleanupTimeout)
		defer ccancel()
		err = errors.Join(err, w.Close(cctx))
	}()

	d := &demo{eng: eng, j: j, info: info, out: &printer{w: out}}
	where := "the embedded in-process broker"
	if !strings.HasPrefix(brokerURL, "memory:") {
		where = fmt.Sprintf("%s, scheduler ladder %s", conn.Name(), c.Ladder)
	}
	d.printf("acemq-flow demo: four orders through the place-order flow, on %s\n", where)
	d.printf("flow %s: %s\n", c.Flow, d.outline())
	d.printf("each run's timeline is read back from the run journal; times are since the run started\n")
	runs := demoRuns(time.Now())
	ids := make([]string, len(runs))
	for i, r := range runs {
		res, err := eng.Start(ctx, c.Flow, r.order)
		if err != nil {
			return fmt.Errorf("demo: start run %d: %w", i+1, err)
		}
		ids[i] = res.RunID
	}
	var summary []string
	for i, r := range runs {
		st, err := d.follow(ctx, i+1, r, ids[i])
		if err != nil {
			return err
		}
		summary = append(summary, fmt.Sprintf("run %d %s", i+1, st))
	}
	d.printf("\nsummary: %s\n", strings.Join(summary, ", "))
	d.printf("the demo deletes its queues, exchange %s and ladder %s as it ends\n", c.Flow, c.Ladder)
	return d.out.Err()
}

// demoURL is the broker URL the demo connects to: a bare memory:// becomes
// an embedded broker of a name of its own, so that the cleanup's own
// connection reaches it.
func demoURL(raw string) (string, error) {
	if raw == "" {
		raw = "memory://"
	}
	u, err := url.Parse(raw)
	if err != nil {
		return "", fmt.Errorf("demo: %w: %s", broker.ErrInvalidURL, raw)
	}
	if u.Scheme == "memory" && u.Host == "" && u.Path == "" {
		return "memory://acemq-demo-" + broker.NewID(), nil
	}
	return raw, nil
}

// ownLadder refuses a ladder that exists already, unless it is the demo's
// default one: it may be another process's, and the demo deletes its
// ladder when it ends.
func ownLadder(ctx context.Context, conn *broker.Conn, ladder string) error {
	_, err := conn.Transport().Inspect(ctx, ladder+broker.DueSuffix)
	switch {
	case transport.IsCode(err, transport.NotFound):
		return nil
	case err != nil:
		return fmt.Errorf("demo: look at ladder %s: %w", ladder, err)
	case ladder == DefaultDemoLadder:
		return nil
	}
	return fmt.Errorf("demo: ladder %s exists already and may be another process's; the demo deletes the ladder it runs on, so give it one of its own (default %s)",
		ladder, DefaultDemoLadder)
}

// deleteFlow deletes the flow's queues (with their .dlq and .parked) and
// its exchange.
func deleteFlow(ctx context.Context, conn *broker.Conn, info engine.FlowInfo) error {
	queues := []string{info.CompensateQueue}
	for _, s := range info.Steps {
		queues = append(queues, s.Queue)
		if s.Compensation != "" {
			queues = append(queues, s.Compensation)
		}
	}
	var errs []error
	for _, q := range queues {
		for _, name := range []string{q, q + broker.DeadLetterSuffix, q + broker.ParkedSuffix} {
			if _, err := conn.Transport().DeleteQueue(ctx, name); err != nil {
				errs = append(errs, fmt.Errorf("delete queue %s: %w", name, err))
			}
		}
	}
	if err := conn.Transport().DeleteExchange(ctx, info.Exchange); err != nil {
		errs = append(errs, fmt.Errorf("delete exchange %s: %w", info.Exchange, err))
	}
	return errors.Join(errs...)
}

// deleteLadder deletes the demo's ladder, with the timer of the run it
// held for replay, through a connection of its own.
func deleteLadder(ctx context.Context, cfg broker.Config, brokerURL string) error {
	conn, err := cfg.Open(ctx, brokerURL)
	if err != nil {
		return fmt.Errorf("demo: delete ladder %s: %w", cfg.Ladder, err)
	}
	var errs []error
	topo := broker.LadderTopology(cfg.Ladder)
	for _, q := range topo.Queues {
		if _, err := conn.Transport().DeleteQueue(ctx, q.Name); err != nil {
			errs = append(errs, fmt.Errorf("delete queue %s: %w", q.Name, err))
		}
	}
	for _, e := range topo.Exchanges {
		if err := conn.Transport().DeleteExchange(ctx, e.Name); err != nil {
			errs = append(errs, fmt.Errorf("delete exchange %s: %w", e.Name, err))
		}
	}
	errs = append(errs, conn.Close(ctx))
	if err := errors.Join(errs...); err != nil {
		return fmt.Errorf("demo: delete ladder %s: %w", cfg.Ladder, err)
	}
	return nil
}

// demo is one demo's state, while it prints.
type demo struct {
	eng  *engine.Engine
	j    *watchedJournal
	info engine.FlowInfo
	out  *printer
}

func (d *demo) printf(format string, args ...any) { d.out.printf(format, args...) }

// outline is the flow's steps on one line.
func (d *demo) outline() string {
	var parts []string
	for _, s := range d.info.Steps {
		if s.OnFork != "" {
			continue
		}
		if s.DelayUntil != "" {
			parts = append(parts, "(wait until "+s.DelayUntil+")")
		}
		p := s.Name
		if s.Fork != nil {
			var branches []string
			for _, b := range s.Fork.Branches {
				branches = append(branches, strings.Join(b, " → "))
			}
			p += " [" + strings.Join(branches, " ∥ ") + "]"
		}
		if s.When != "" {
			p += " (when " + s.When + ")"
		}
		parts = append(parts, p)
	}
	return strings.Join(parts, " → ")
}

// follow waits for a run to end, printing its timeline; a run to
// compensate is compensated once it has failed. It says how the run ended.
func (d *demo) follow(ctx context.Context, n int, r demoRun, runID string) (journal.Status, error) {
	o := r.order
	d.printf("\nrun %d: %s\n", n, r.title)
	what := fmt.Sprintf("%d x %s", o.Quantity, o.Item)
	if !o.Digital {
		what += " to " + o.Address
	}
	d.printf("  order %s: %s, %s, card %s; run id %s\n", o.ID, o.Customer, what, engine.Mask(o.Card), runID)
	run, err := d.j.wait(ctx, runID, d.ended)
	if err != nil {
		return "", fmt.Errorf("demo: run %d (%s) did not end: %w", n, runID, err)
	}
	shown := map[string]bool{}
	err = d.timeline(ctx, runID, shown)
	if err != nil {
		return "", err
	}
	if r.compensate && run.Status == journal.Failed {
		held := ""
		if run.DueAt != nil {
			held = fmt.Sprintf(", held for a replay until %s, then compensated", clock(*run.DueAt))
		}
		d.printf("  the run is failed%s; an operator replays it or compensates it now, as the demo does:\n", held)
		d.printf("    $ acemq-flow compensate %s\n", runID)
		moved, err := d.eng.Compensate(ctx, runID)
		if err != nil {
			return "", fmt.Errorf("demo: compensate run %d: %w", n, err)
		}
		d.printf("    its message moved from %s to %s, where a worker starts the compensations\n", moved.From, moved.To)
		run, err = d.j.wait(ctx, runID, func(r journal.Run, tl []journal.Event) bool {
			return r.Status != journal.Failed && d.ended(r, tl) && slices.ContainsFunc(tl, func(e journal.Event) bool {
				return e.Kind == journal.KindCompensation && e.Step == ""
			}) && d.undone(tl)
		})
		if err != nil {
			return "", fmt.Errorf("demo: run %d (%s) was not compensated: %w", n, runID, err)
		}
		if err := d.timeline(ctx, runID, shown); err != nil {
			return "", err
		}
	}
	took := ""
	if run.EndedAt != nil {
		took = fmt.Sprintf(" after %s", seconds(run.EndedAt.Sub(run.StartedAt)))
	}
	d.printf("  → %s%s\n", run.Status, took)
	if run.Status != r.want {
		return run.Status, fmt.Errorf("demo: run %d (%s) ended %s, want %s: %s", n, runID, run.Status, r.want, run.Error)
	}
	return run.Status, nil
}

// ended reports whether a run has stopped and its timeline is all in the
// journal. The journal may hear what ended a run before other events the
// engine recorded with it or just before it (the steps a completed run
// skipped, the step before its last), so a completed run's timeline must
// account for every step.
func (d *demo) ended(r journal.Run, tl []journal.Event) bool {
	if !r.Status.Stopped() {
		return false
	}
	if r.Status == journal.Failed {
		return d.branchesSettled(tl)
	}
	if r.Status != journal.Completed {
		return true
	}
	skipped := func(step string) bool {
		return slices.ContainsFunc(tl, func(e journal.Event) bool { return e.Step == step && e.Kind == journal.KindSkip })
	}
	for _, s := range d.info.Steps {
		// Each delivery's events are written before it is acknowledged,
		// not before the steps after it run: a branch's last step, or the
		// fork that sent the branches, may still be writing when the run
		// completes. Every step's record is waited for.
		if s.OnFork != "" && skipped(s.OnFork) {
			continue
		}
		if !slices.ContainsFunc(tl, func(e journal.Event) bool {
			return e.Step == s.Name && (e.Kind == journal.KindSkip || e.Kind == journal.KindStep && e.Outcome == "completed")
		}) {
			return false
		}
		if s.Fork != nil && !skipped(s.Name) && !slices.ContainsFunc(tl, func(e journal.Event) bool {
			return e.Step == s.Name && strings.HasPrefix(e.Outcome, "forked: ")
		}) {
			return false
		}
	}
	return true
}

// undone reports whether the timeline has a compensation for every
// compensable step it completed: a compensation records as it hands the
// run to the next, so the last can be in before the one before it.
func (d *demo) undone(tl []journal.Event) bool {
	done, undone := 0, 0
	for _, e := range tl {
		switch {
		case e.Kind == journal.KindStep && e.Outcome == "completed" && d.step(e.Step).Compensation != "":
			done++
		case e.Kind == journal.KindCompensation && e.Step != "" && e.Outcome == "compensated":
			undone++
		}
	}
	return undone >= done
}

// branchesSettled reports whether every branch of every fork the run
// reached has come back or failed, so that a failed run's timeline reads
// the same every time.
func (d *demo) branchesSettled(tl []journal.Event) bool {
	for _, s := range d.info.Steps {
		if s.Fork == nil || !slices.ContainsFunc(tl, func(e journal.Event) bool { return e.Step == s.Name }) {
			continue
		}
		settled := 0
		for _, e := range tl {
			switch {
			case e.Step == s.Name && strings.HasSuffix(e.Outcome, " arrived"):
				settled++
			case e.Kind == journal.KindStep && e.Outcome == "failed" && d.step(e.Step).OnFork == s.Name:
				settled++
			}
		}
		if settled < len(s.Fork.Branches) {
			return false
		}
	}
	return true
}

// timeline prints the events of the run's timeline not in shown yet, and
// adds them to it. (Branches record side by side, so an event can land
// before one already printed.)
func (d *demo) timeline(ctx context.Context, runID string, shown map[string]bool) error {
	tl, err := d.j.Timeline(ctx, runID)
	if err != nil {
		return fmt.Errorf("demo: timeline of %s: %w", runID, err)
	}
	if len(tl) == 0 {
		return nil
	}
	start := tl[0].StartedAt
	for _, e := range tl {
		if shown[e.Key] {
			continue
		}
		shown[e.Key] = true
		label, text := d.describe(e)
		d.printf("    %7s  %-10s %s\n", "+"+seconds(e.EndedAt.Sub(start)), label, text)
	}
	return nil
}

// describe says what an event of the timeline was, for a person: a label
// (the step) and what happened.
func (d *demo) describe(e journal.Event) (string, string) {
	errText := strings.TrimPrefix(e.Error, fmt.Sprintf("step %q: ", e.Step))
	attempt := ""
	if e.Attempt > 1 {
		attempt = fmt.Sprintf(" on attempt %d", e.Attempt)
	}
	switch e.Kind {
	case journal.KindStart:
		return "start", "the run starts"
	case journal.KindSkip:
		return e.Step, "skipped: " + d.step(e.Step).When + " is false"
	case journal.KindDelay:
		until := "later"
		if e.DueAt != nil {
			until = clock(*e.DueAt)
		}
		return e.Step, fmt.Sprintf("waits on the scheduler ladder until %s (%s)", until, d.step(e.Step).DelayUntil)
	case journal.KindHandOff:
		return e.Step, "handed to the service that serves it"
	case journal.KindReplay:
		return e.Step, "replayed"
	case journal.KindCompensation:
		switch {
		case e.Step == "":
			return "compensate", strings.TrimPrefix(e.Outcome, "compensation ")
		case e.Outcome == "compensated":
			return e.Step, "compensated" + attempt + ": " + undoes[e.Step]
		case e.Outcome == "retried":
			return e.Step, fmt.Sprintf("compensation failed (attempt %d), retried: %s", e.Attempt, errText)
		}
		return e.Step, e.Outcome
	case journal.KindStep:
		switch e.Outcome {
		case "completed":
			return e.Step, "completed" + attempt
		case "retried":
			in := ""
			if e.DueAt != nil {
				in = " in " + e.DueAt.Sub(e.EndedAt).Round(100*time.Millisecond).String()
			}
			return e.Step, fmt.Sprintf("attempt %d failed, retried%s: %s", e.Attempt, in, errText)
		case "failed":
			return e.Step, fmt.Sprintf("attempt %d failed, given up: %s", e.Attempt, errText)
		case "parked":
			return e.Step, fmt.Sprintf("attempt %d: the message could not be read, parked: %s", e.Attempt, errText)
		}
		if s := d.step(e.Step); s.Fork != nil {
			// The fork's own events: forked, a branch back.
			return e.Step, e.Outcome
		}
	}
	return e.Step, string(e.Kind) + " " + e.Outcome
}

// step is the flow's step called name.
func (d *demo) step(name string) engine.StepInfo {
	for _, s := range d.info.Steps {
		if s.Name == name {
			return s
		}
	}
	return engine.StepInfo{Name: name}
}

func clock(t time.Time) string { return t.Local().Format("15:04:05") }

func seconds(d time.Duration) string { return fmt.Sprintf("%.1fs", d.Seconds()) }

// watchedJournal is an in-memory journal that says when something was
// recorded, so that the demo waits for a run without polling.
type watchedJournal struct {
	*journal.Memory

	mu      sync.Mutex
	changed chan struct{}
}

func newWatchedJournal() (*watchedJournal, error) {
	m, err := journal.NewMemory(0)
	if err != nil {
		return nil, err
	}
	return &watchedJournal{Memory: m, changed: make(chan struct{})}, nil
}

// Record records events and wakes whoever waits.
func (w *watchedJournal) Record(ctx context.Context, events []journal.Event) error {
	err := w.Memory.Record(ctx, events)
	w.mu.Lock()
	close(w.changed)
	w.changed = make(chan struct{})
	w.mu.Unlock()
	return err
}

// wait waits until the run and its timeline are as done says, bounded by
// ctx.
func (w *watchedJournal) wait(ctx context.Context, runID string, done func(journal.Run, []journal.Event) bool) (journal.Run, error) {
	for {
		w.mu.Lock()
		changed := w.changed
		w.mu.Unlock()
		r, err := w.Run(ctx, runID)
		if err == nil {
			var tl []journal.Event
			if tl, err = w.Timeline(ctx, runID); err == nil && done(r, tl) {
				return r, nil
			}
		}
		if err != nil && !errors.Is(err, journal.ErrRunNotFound) {
			return r, err
		}
		select {
		case <-changed:
		case <-ctx.Done():
			return r, fmt.Errorf("%w (status %q, error %q)", ctx.Err(), r.Status, r.Error)
		}
	}
}

// printer writes the demo's output and keeps the first write error.
type printer struct {
	w   io.Writer
	err error
}

func (p *printer) printf(format string, args ...any) {
	if p.err != nil {
		return
	}
	_, p.err = fmt.Fprintf(p.w, format, args...)
}

// Err is the first write error, if any.
func (p *printer) Err() error { return p.err }
