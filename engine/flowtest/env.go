package flowtest

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"runtime"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/acemq/acemq-flow/broker"
	"github.com/acemq/acemq-flow/broker/loopback"
	"github.com/acemq/acemq-flow/dsl"
	"github.com/acemq/acemq-flow/engine"
	"github.com/acemq/acemq-flow/engine/journal"
	"github.com/acemq/acemq-flow/internal/fakeclock"
)

// DefaultTimeout bounds, in real time, each call of an Env that waits.
const DefaultTimeout = 10 * time.Second

// Config configures an Env. The zero value is the defaults.
type Config struct {
	// Start is the clock's time when the Env starts (zero = the system's
	// time now, to the millisecond).
	Start time.Time
	// Broker configures the Env's connection. Its Clock must be nil: the
	// Env's own clock goes there.
	Broker broker.Config
	// Engine configures the Env's engine. Its Conn must be nil: the Env's
	// connection goes there. Without a CronGuard the Env's worker fires
	// the flows' cron triggers (CronAlone), on the Env's clock.
	Engine engine.Config
	// Logger receives the logs of the broker and the engine (nil =
	// warnings and errors, to the test's log).
	Logger *slog.Logger
	// Timeout bounds, in real time, each call that waits: for the system
	// to settle, for a run to reach a status (0 = DefaultTimeout).
	Timeout time.Duration
}

// Env is an engine and a worker for some flows on an in-process broker of
// their own (the loopback) with a clock the test moves: see the package
// documentation. Its methods fail the test (t.Fatalf) rather than return
// errors, and must be called from the test's goroutine. Everything it
// started is stopped when the test ends (t.Cleanup).
type Env struct {
	t       testing.TB
	cfg     Config
	clock   *fakeclock.Clock
	broker  *loopback.Broker
	conn    *broker.Conn
	eng     *engine.Engine
	flows   []string
	timeout time.Duration
}

// New is Config{}.New: an Env for flows with the defaults.
func New(t testing.TB, flows ...*dsl.FlowDef) *Env {
	t.Helper()
	return Config{}.New(t, flows...)
}

// New starts an engine and a worker for flows (at least one) on a fresh
// in-process broker whose clock stands still until the test moves it. It
// fails the test on a flow that does not build or register, on a Config
// with a Conn or a Clock of its own, and when the worker does not start.
func (c Config) New(t testing.TB, flows ...*dsl.FlowDef) *Env {
	t.Helper()
	switch {
	case len(flows) == 0:
		t.Fatalf("flowtest: no flows")
	case c.Broker.Clock != nil:
		t.Fatalf("flowtest: Config.Broker.Clock is set: the Env's clock goes there")
	case c.Engine.Conn != nil:
		t.Fatalf("flowtest: Config.Engine.Conn is set: the Env's connection goes there")
	}
	if c.Start.IsZero() {
		c.Start = time.Now().Truncate(time.Millisecond)
	}
	if c.Timeout <= 0 {
		c.Timeout = DefaultTimeout
	}
	if c.Logger == nil {
		c.Logger = slog.New(slog.NewTextHandler(testLog{t}, &slog.HandlerOptions{Level: slog.LevelWarn}))
	}
	if c.Broker.Logger == nil {
		c.Broker.Logger = c.Logger
	}
	if c.Engine.Logger == nil {
		c.Engine.Logger = c.Logger
	}
	if c.Engine.CronGuard == nil {
		c.Engine.CronAlone = true
	}
	// Round(0) drops the monotonic reading: the clock's times are
	// compared with times read back from headers, which have none.
	e := &Env{t: t, cfg: c, clock: fakeclock.New(c.Start.Round(0)), timeout: c.Timeout}
	e.broker = loopback.NewWithClock(e.clock)
	t.Cleanup(e.broker.Close)
	cc := c.Broker
	cc.Clock = e.clock
	conn, err := cc.Wrap(e.broker.Connect())
	if err != nil {
		t.Fatalf("flowtest: connect: %v", err)
	}
	e.conn = conn
	t.Cleanup(func() { e.close("close the connection", conn.Close) })
	ec := c.Engine
	ec.Conn = conn
	eng, err := engine.New(ec)
	if err != nil {
		t.Fatalf("flowtest: engine: %v", err)
	}
	e.eng = eng
	t.Cleanup(func() { e.close("close the engine", eng.Close) })
	for _, f := range flows {
		if f == nil {
			t.Fatalf("flowtest: a nil flow")
		}
		if err := f.Err(); err != nil {
			t.Fatalf("flowtest: flow %q: %v", f.Name(), err)
		}
		e.flows = append(e.flows, f.Name())
	}
	if err := eng.Register(flows...); err != nil {
		t.Fatalf("flowtest: register: %v", err)
	}
	ctx, cancel := e.context()
	defer cancel()
	w, err := eng.StartWorker(ctx)
	if err != nil {
		t.Fatalf("flowtest: start the worker: %v", err)
	}
	t.Cleanup(func() { e.close("close the worker", w.Close) })
	return e
}

// close runs one step of the Env's cleanup, bounded by 20 s.
func (e *Env) close(what string, f func(context.Context) error) {
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	if err := f(ctx); err != nil {
		e.t.Errorf("flowtest: %s: %v", what, err)
	}
}

// context is the test's context, bounded by the Env's timeout.
func (e *Env) context() (context.Context, context.CancelFunc) {
	return context.WithTimeout(e.t.Context(), e.timeout)
}

// Engine is the Env's engine, for what the Env has no method for.
func (e *Env) Engine() *engine.Engine { return e.eng }

// Conn is the Env's connection: on the Env's broker and clock.
func (e *Env) Conn() *broker.Conn { return e.conn }

// Now is the time on the Env's clock: what a step of the test's flow
// should read instead of time.Now (give a service of the flow env.Now).
func (e *Env) Now() time.Time { return e.clock.Now() }

// Start starts a run of the first flow the Env was given, with payload and
// opts as engine.Start takes them, and returns its run id once the broker
// has it. The run goes on at once as far as it can without the clock
// moving; Run, Timeline and the other readers let it get there first
// (Settle).
func (e *Env) Start(payload any, opts ...engine.StartOption) string {
	e.t.Helper()
	return e.StartFlow(e.flows[0], payload, opts...)
}

// StartFlow is Start for the flow called flow.
func (e *Env) StartFlow(flow string, payload any, opts ...engine.StartOption) string {
	e.t.Helper()
	ctx, cancel := e.context()
	defer cancel()
	res, err := e.eng.Start(ctx, flow, payload, opts...)
	if err != nil {
		e.t.Fatalf("flowtest: start %q: %v", flow, err)
	}
	return res.RunID
}

// Settle waits, without moving the clock (but firing the timers already
// due), until nothing moves: no delivery is in flight on the broker or in
// a consumer of the Env's connection, and the journal has every event
// recorded so far. It fails the test when that does not happen within the
// Env's timeout.
func (e *Env) Settle() {
	e.t.Helper()
	deadline := time.Now().Add(e.timeout)
	e.settle(deadline)
}

// Advance moves the clock d forward. Every timer due on the way fires in
// the order it is due, the clock standing at its time, and the system
// settles before the next (Settle): a delay, a retry or a hold due within
// d happens at its time, with everything it sets off. It fails the test
// on a negative d, and when the system does not settle within the Env's
// timeout between two timers.
func (e *Env) Advance(d time.Duration) {
	e.t.Helper()
	if d < 0 {
		e.t.Fatalf("flowtest: advance %s: the clock does not go back", d)
	}
	deadline := time.Now().Add(e.timeout)
	to := e.clock.Now().Add(d)
	for {
		e.settle(deadline)
		if !e.clock.Fire(to) {
			break
		}
	}
	e.clock.Set(to)
	e.settle(deadline)
}

// RunUntil skips time until the run is in one of want: it settles the
// system, looks at the run, and while the run is elsewhere moves the
// clock to the next timer due (as Advance does), however far ahead that
// is, the way Temporal's test environment skips time. It returns the run.
// It fails the test, with the run's timeline, when the run is elsewhere
// and nothing is left to happen (the system settled and no timer is
// armed), and when the Env's timeout passes first.
func (e *Env) RunUntil(runID string, want ...journal.Status) journal.Run {
	e.t.Helper()
	if len(want) == 0 {
		e.t.Fatalf("flowtest: run %s until no status", runID)
	}
	deadline := time.Now().Add(e.timeout)
	from := e.clock.Now()
	for {
		e.settle(deadline)
		r, err := e.run(runID)
		if err == nil && slices.Contains(want, r.Status) {
			return r
		}
		if time.Now().After(deadline) {
			e.t.Fatalf("flowtest: run %s is %s, not %v, %s of real time (and %s on the clock) later%s",
				runID, statusOf(r, err), want, e.timeout, e.clock.Now().Sub(from), e.describe(runID))
		}
		if !e.clock.Fire(farFuture) {
			e.t.Fatalf("flowtest: run %s is %s, not %v, and nothing is left to happen: nothing in flight, no timer armed (%s on the clock)%s",
				runID, statusOf(r, err), want, e.clock.Now().Sub(from), e.describe(runID))
		}
	}
}

// farFuture is later than any timer a test arms.
var farFuture = time.Date(9999, 1, 1, 0, 0, 0, 0, time.UTC)

// statusOf says where a run stands for a failure message.
func statusOf(r journal.Run, err error) string {
	if err != nil {
		return err.Error()
	}
	if r.Error != "" {
		return fmt.Sprintf("%s at %s (%s)", r.Status, r.Step, r.Error)
	}
	return fmt.Sprintf("%s at %s", r.Status, r.Step)
}

// describe is the run's timeline, for a failure message.
func (e *Env) describe(runID string) string {
	ctx, cancel := e.context()
	defer cancel()
	tl, err := e.eng.Journal().Timeline(ctx, runID)
	if err != nil || len(tl) == 0 {
		return ""
	}
	var b strings.Builder
	b.WriteString("; its timeline:")
	for _, ev := range tl {
		fmt.Fprintf(&b, "\n\t%s  %s", ev.EndedAt.Format(time.TimeOnly+".000"), outcome(ev))
		if ev.DueAt != nil {
			fmt.Fprintf(&b, " (due %s)", ev.DueAt.Format(time.TimeOnly+".000"))
		}
		if ev.Error != "" {
			fmt.Fprintf(&b, ": %s", ev.Error)
		}
	}
	return b.String()
}

// Run settles the system and returns the run as the journal has it. It
// fails the test when the journal does not know the run.
func (e *Env) Run(runID string) journal.Run {
	e.t.Helper()
	e.Settle()
	r, err := e.run(runID)
	if err != nil {
		e.t.Fatalf("flowtest: run %s: %v", runID, err)
	}
	return r
}

func (e *Env) run(runID string) (journal.Run, error) {
	ctx, cancel := e.context()
	defer cancel()
	return e.eng.Journal().Run(ctx, runID)
}

// Timeline settles the system and returns the run's timeline, in order:
// every start, step attempt, skip, delay, compensation, replay and
// cancellation, each with the clock's times.
func (e *Env) Timeline(runID string) []journal.Event {
	e.t.Helper()
	e.Settle()
	ctx, cancel := e.context()
	defer cancel()
	tl, err := e.eng.Journal().Timeline(ctx, runID)
	if err != nil {
		e.t.Fatalf("flowtest: timeline of run %s: %v", runID, err)
	}
	return tl
}

// Outcomes is the run's timeline as "kind:step:outcome" lines, such as
// "step:charge:retried" or "delay:ship:waiting": what a test compares
// with the timeline it expects.
func (e *Env) Outcomes(runID string) []string {
	e.t.Helper()
	tl := e.Timeline(runID)
	out := make([]string, len(tl))
	for i, ev := range tl {
		out[i] = outcome(ev)
	}
	return out
}

func outcome(ev journal.Event) string {
	return fmt.Sprintf("%s:%s:%s", ev.Kind, ev.Step, ev.Outcome)
}

// Replay settles the system and replays a failed run (engine.Replay): its
// message goes back to the step that gave it up.
func (e *Env) Replay(runID string) engine.Moved {
	e.t.Helper()
	return act(e, "replay", runID, e.eng.Replay)
}

// Compensate settles the system and compensates a failed run now
// (engine.Compensate).
func (e *Env) Compensate(runID string) engine.Moved {
	e.t.Helper()
	return act(e, "compensate", runID, e.eng.Compensate)
}

// Cancel settles the system and cancels what the run waits for
// (engine.Cancel).
func (e *Env) Cancel(runID string) engine.Scheduled {
	e.t.Helper()
	return act(e, "cancel", runID, e.eng.Cancel)
}

// Signal settles the system and sends the run the signal name with
// payload (engine.Signal).
func (e *Env) Signal(runID, name string, payload any) engine.SignalSent {
	e.t.Helper()
	return act(e, "signal", runID, func(ctx context.Context, id string) (engine.SignalSent, error) {
		return e.eng.Signal(ctx, id, name, payload)
	})
}

// CancelRun settles the system and cancels the run (engine.CancelRun):
// it is stopped and compensated.
func (e *Env) CancelRun(runID, reason string) engine.CancelledRun {
	e.t.Helper()
	return act(e, "cancel", runID, func(ctx context.Context, id string) (engine.CancelledRun, error) {
		return e.eng.CancelRun(ctx, id, engine.CancelRequest{Reason: reason, Actor: "flowtest"})
	})
}

// act settles the system and does what to the run as an operator would,
// failing the test when the engine refuses.
func act[T any](e *Env, what, runID string, do func(context.Context, string) (T, error)) T {
	e.t.Helper()
	e.Settle()
	ctx, cancel := e.context()
	defer cancel()
	v, err := do(ctx, runID)
	if err != nil {
		e.t.Fatalf("flowtest: %s run %s: %v", what, runID, err)
	}
	return v
}

// settle fires the timers already due and waits until the system is
// quiet, then until the journal has what was recorded; it fails the test
// at deadline.
func (e *Env) settle(deadline time.Time) {
	e.t.Helper()
	now := e.clock.Now()
	for {
		e.quiet(deadline)
		if !e.clock.Fire(now) {
			break
		}
	}
	ctx, cancel := context.WithDeadline(e.t.Context(), deadline)
	defer cancel()
	if err := e.eng.Flush(ctx); err != nil && !errors.Is(err, journal.ErrWriterClosed) {
		e.t.Fatalf("flowtest: the journal did not take what was recorded within %s: %v", e.timeout, err)
	}
}

// quiet waits until nothing is in flight, looking again at once at first,
// then every few microseconds up to a millisecond: a step takes
// microseconds, and the broker cannot say when it has nothing left to do.
func (e *Env) quiet(deadline time.Time) {
	e.t.Helper()
	pause := time.Duration(0)
	for !e.idle() {
		if time.Now().After(deadline) {
			st := e.broker.Stats()
			e.t.Fatalf("flowtest: the system did not settle within %s: %d deliveries unsettled, %d in a consumer's hands",
				e.timeout, st.Unsettled, e.conn.InFlight())
		}
		if pause == 0 {
			runtime.Gosched()
			pause = time.Microsecond
			continue
		}
		time.Sleep(pause)
		pause = min(2*pause, time.Millisecond)
	}
}

// idle reports whether nothing is in flight: no delivery unsettled on the
// broker, none in a consumer's hands (a settle hook may still publish
// after its delivery's ack), and no delivery made between the first look
// and the last, which a hook that finished in between would have caused.
func (e *Env) idle() bool {
	before := e.broker.Stats()
	if before.Unsettled > 0 || e.conn.InFlight() > 0 {
		return false
	}
	after := e.broker.Stats()
	return after.Unsettled == 0 && after.Delivered == before.Delivered
}

// testLog writes log lines to the test's log.
type testLog struct{ t testing.TB }

func (l testLog) Write(p []byte) (int, error) {
	l.t.Log(strings.TrimSuffix(string(p), "\n"))
	return len(p), nil
}
