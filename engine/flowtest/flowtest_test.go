package flowtest_test

import (
	"context"
	"errors"
	"fmt"
	"runtime"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
	"go.uber.org/goleak"

	"github.com/acemq/acemq-flow/broker"
	"github.com/acemq/acemq-flow/dsl"
	"github.com/acemq/acemq-flow/engine"
	"github.com/acemq/acemq-flow/engine/flowtest"
	"github.com/acemq/acemq-flow/engine/journal"
)

// TestMain fails the package if an Env leaves a goroutine behind: it
// stops everything it started when its test ends.
func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

// Parcel is the payload of the test flows.
type Parcel struct {
	ID string `json:"id"`
}

// calls records what the test flows' steps did, at the Env's time.
type calls struct {
	now func() time.Time

	mu  sync.Mutex
	log []string
	at  map[string][]time.Time
}

func newCalls(env func() time.Time) *calls { return &calls{now: env, at: map[string][]time.Time{}} }

func (c *calls) add(what string) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.log = append(c.log, what)
	c.at[what] = append(c.at[what], c.now())
}

func (c *calls) list() []string {
	c.mu.Lock()
	defer c.mu.Unlock()
	return append([]string(nil), c.log...)
}

func (c *calls) times(what string) []time.Time {
	c.mu.Lock()
	defer c.mu.Unlock()
	return append([]time.Time(nil), c.at[what]...)
}

// step is a step that records its call and passes its payload on.
func (c *calls) step(name string) func(context.Context, Parcel) (Parcel, error) {
	return func(_ context.Context, p Parcel) (Parcel, error) {
		c.add(name)
		return p, nil
	}
}

// TestDelay: a run with a 30-minute delay completes in milliseconds of
// real time, its second step starting 30 minutes (and under a second) after
// the first on the clock, and its timeline says when it was due.
func TestDelay(t *testing.T) {
	t.Parallel()
	began := time.Now()
	var c *calls
	flow := dsl.Flow("delay",
		dsl.Step("pack", func(ctx context.Context, p Parcel) (Parcel, error) { return c.step("pack")(ctx, p) }),
		dsl.Delay(30*time.Minute),
		dsl.Step("ship", func(ctx context.Context, p Parcel) (Parcel, error) { return c.step("ship")(ctx, p) }),
	)
	env := flowtest.New(t, flow)
	c = newCalls(env.Now)
	start := env.Now()
	run := env.Start(Parcel{ID: "p-1"})

	r := env.Run(run)
	require.Equal(t, journal.Waiting, r.Status, "it waits, and the clock has not moved")
	require.Equal(t, "ship", r.Step)
	require.Equal(t, start.Add(30*time.Minute), *r.DueAt)
	require.Equal(t, start, env.Now())

	r = env.RunUntil(run, journal.Completed)
	took := time.Since(began)
	t.Logf("30 minutes on the clock in %s of real time", took)
	require.Less(t, took, time.Minute, "the delay is skipped, not waited for")

	require.Equal(t, []string{"start::started", "step:pack:completed", "delay:ship:waiting", "step:ship:completed"}, env.Outcomes(run))
	tl := env.Timeline(run)
	require.Equal(t, start, tl[2].StartedAt, "the delay began when pack completed")
	require.Equal(t, start.Add(30*time.Minute), *tl[2].DueAt)
	shipped := c.times("ship")[0]
	require.False(t, shipped.Before(*tl[2].DueAt), "never early: %s", shipped)
	require.Less(t, shipped.Sub(*tl[2].DueAt), broker.ShortestRung, "at most the ladder's second late")
	require.Equal(t, shipped, tl[3].StartedAt, "the journal records the clock's time")
	require.Equal(t, []string{"pack", "ship"}, c.list())
	require.NotNil(t, r.EndedAt)
}

// TestAdvance: Advance moves the clock by exactly what it is given, and
// runs what is due on the way; a delay not yet due stays waiting.
func TestAdvance(t *testing.T) {
	t.Parallel()
	env := flowtest.New(t, dsl.Flow("advance",
		dsl.Step("a", func(_ context.Context, p Parcel) (Parcel, error) { return p, nil }),
		dsl.Delay(10*time.Minute),
		dsl.Step("b", func(_ context.Context, p Parcel) (Parcel, error) { return p, nil }),
	))
	start := env.Now()
	run := env.Start(Parcel{ID: "p-1"})
	env.Advance(9 * time.Minute)
	require.Equal(t, start.Add(9*time.Minute), env.Now())
	require.Equal(t, journal.Waiting, env.Run(run).Status)
	env.Advance(2 * time.Minute)
	require.Equal(t, start.Add(11*time.Minute), env.Now())
	require.Equal(t, journal.Completed, env.Run(run).Status)
}

// TestHold: a run given up after a compensable step is held for replay an
// hour, compensated only once the hour has passed, its compensation in
// the timeline at the hold's end.
func TestHold(t *testing.T) {
	t.Parallel()
	var c *calls
	flow := dsl.Flow("hold",
		dsl.Step("charge", func(ctx context.Context, p Parcel) (Parcel, error) { return c.step("charge")(ctx, p) }).
			Compensate(func(context.Context, Parcel) error { c.add("refund"); return nil }),
		dsl.Step("ship", func(context.Context, Parcel) (Parcel, error) {
			c.add("ship!")
			return Parcel{}, broker.Fatal(errors.New("the courier refused the parcel"))
		}),
		dsl.HoldForReplay(time.Hour),
	)
	env := flowtest.New(t, flow)
	c = newCalls(env.Now)
	start := env.Now()
	run := env.Start(Parcel{ID: "p-1"})

	r := env.RunUntil(run, journal.Failed)
	require.Equal(t, "ship", r.Step)
	require.Contains(t, r.Error, "the courier refused the parcel")
	require.Equal(t, start.Add(time.Hour), *r.DueAt, "held for an hour from when it was given up")
	require.Equal(t, start, env.Now(), "failing took no time on the clock")

	env.Advance(59 * time.Minute)
	require.Equal(t, journal.Failed, env.Run(run).Status, "still held")
	require.Equal(t, []string{"charge", "ship!"}, c.list())

	r = env.RunUntil(run, journal.Compensated)
	require.Equal(t, []string{"charge", "ship!", "refund"}, c.list())
	refunded := c.times("refund")[0]
	require.False(t, refunded.Before(start.Add(time.Hour)), "not before the hold ends: %s", refunded)
	require.Less(t, refunded.Sub(start.Add(time.Hour)), broker.ShortestRung)
	require.Equal(t, []string{"start::started", "step:charge:completed", "step:ship:failed", "compensation:charge:compensated"},
		env.Outcomes(run))
	require.Equal(t, refunded, env.Timeline(run)[3].StartedAt)
}

// TestReplayWithinTheHold: a held run replayed before its hold ends
// completes, and the hold's end compensates nothing.
func TestReplayWithinTheHold(t *testing.T) {
	t.Parallel()
	var c *calls
	var mu sync.Mutex
	down := true
	flow := dsl.Flow("replay",
		dsl.Step("charge", func(ctx context.Context, p Parcel) (Parcel, error) { return c.step("charge")(ctx, p) }).
			Compensate(func(context.Context, Parcel) error { c.add("refund"); return nil }),
		dsl.Step("ship", func(ctx context.Context, p Parcel) (Parcel, error) {
			mu.Lock()
			defer mu.Unlock()
			if down {
				return p, broker.Fatal(errors.New("the depot is closed"))
			}
			return c.step("ship")(ctx, p)
		}),
		dsl.HoldForReplay(time.Hour),
	)
	env := flowtest.New(t, flow)
	c = newCalls(env.Now)
	run := env.Start(Parcel{ID: "p-1"})
	env.RunUntil(run, journal.Failed)
	env.Advance(30 * time.Minute)
	mu.Lock()
	down = false
	mu.Unlock()
	moved := env.Replay(run)
	require.Equal(t, "replay.ship", moved.To)
	env.RunUntil(run, journal.Completed)
	env.Advance(2 * time.Hour)
	require.Equal(t, journal.Completed, env.Run(run).Status, "the hold's end finds the run replayed")
	require.Equal(t, []string{"charge", "ship"}, c.list(), "nothing refunded")
	// The journal orders the replay's events after the run's first try,
	// the hold's end with them.
	require.Equal(t, []string{"start::started", "step:charge:completed", "step:ship:failed",
		"compensation:charge:not needed: the run was replayed or compensated meanwhile", "replay:ship:replayed", "step:ship:completed"},
		env.Outcomes(run))
}

// TestRetryLadder: a step retried with delays of minutes (1, 2, 4 and 8)
// completes on its fifth attempt, each attempt at its delay on the clock,
// and the timeline says when each retry was due.
func TestRetryLadder(t *testing.T) {
	t.Parallel()
	var c *calls
	flow := dsl.Flow("retry",
		dsl.Step("charge", func(ctx context.Context, p Parcel) (Parcel, error) {
			c.add("charge")
			if len(c.times("charge")) < 5 {
				return p, errors.New("the gateway timed out")
			}
			return p, nil
		}).Retry(broker.Exponential(5, time.Minute).WithMax(time.Hour)),
	)
	env := flowtest.New(t, flow)
	c = newCalls(env.Now)
	start := env.Now()
	run := env.Start(Parcel{ID: "p-1"})
	env.RunUntil(run, journal.Completed)

	at := c.times("charge")
	require.Len(t, at, 5)
	offset := time.Duration(0)
	for i, delay := range []time.Duration{time.Minute, 2 * time.Minute, 4 * time.Minute, 8 * time.Minute} {
		offset += delay
		gap := at[i+1].Sub(at[i])
		require.GreaterOrEqual(t, gap, delay, "attempt %d", i+2)
		require.Less(t, gap, delay+broker.ShortestRung, "attempt %d", i+2)
	}
	require.GreaterOrEqual(t, env.Now().Sub(start), offset)
	require.Equal(t, []string{"start::started", "step:charge:retried", "step:charge:retried", "step:charge:retried",
		"step:charge:retried", "step:charge:completed"}, env.Outcomes(run))
	tl := env.Timeline(run)
	for i := 1; i <= 4; i++ {
		require.Equal(t, i, tl[i].Attempt)
		require.Contains(t, tl[i].Error, "the gateway timed out")
		require.Equal(t, tl[i].EndedAt.Add(time.Minute<<(i-1)), *tl[i].DueAt, "retry %d", i)
	}
	require.Equal(t, 5, tl[5].Attempt)
}

// TestDelayedStartAndCancel: a run started an hour from now waits; once
// cancelled, its message is dropped when it comes due and its step never
// runs.
func TestDelayedStartAndCancel(t *testing.T) {
	t.Parallel()
	var c *calls
	env := flowtest.New(t, dsl.Flow("later",
		dsl.Step("remind", func(ctx context.Context, p Parcel) (Parcel, error) { return c.step("remind")(ctx, p) }),
	))
	c = newCalls(env.Now)
	start := env.Now()
	kept := env.Start(Parcel{ID: "kept"}, engine.In(time.Hour))
	cancelled := env.Start(Parcel{ID: "cancelled"}, engine.In(time.Hour))
	r := env.Run(cancelled)
	require.Equal(t, journal.Waiting, r.Status)
	require.Equal(t, start.Add(time.Hour), *r.DueAt)

	env.Advance(59*time.Minute + 58*time.Second)
	s := env.Cancel(cancelled)
	require.Equal(t, engine.ScheduledStart, s.Kind)
	require.Equal(t, journal.Cancelled, env.Run(cancelled).Status)

	env.RunUntil(kept, journal.Completed)
	env.Advance(time.Hour)
	require.Equal(t, journal.Cancelled, env.Run(cancelled).Status)
	require.Len(t, c.times("remind"), 1, "only the run not cancelled reminded")
	require.Equal(t, []string{"start::started", "delay:remind:waiting", "cancel:remind:cancelled (start due " +
		start.Add(time.Hour).Format(time.RFC3339) + ")", "cancel:remind:dropped: the run was cancelled while it waited"}, env.Outcomes(cancelled))
}

// TestCron: a daily trigger starts a run at each tick the clock passes.
func TestCron(t *testing.T) {
	t.Parallel()
	day := time.Date(2026, 3, 2, 8, 0, 0, 0, time.UTC)
	env := flowtest.Config{Start: day}.New(t, dsl.Flow("daily",
		dsl.Step("report", func(_ context.Context, p Parcel) (Parcel, error) { return p, nil }),
		dsl.Cron("0 0 9 * * *", func(_ context.Context, tick time.Time) (Parcel, error) {
			return Parcel{ID: tick.Format(time.DateOnly)}, nil
		}),
	))
	runs := func() []journal.Run {
		env.Settle()
		rs, err := env.Engine().Journal().Runs(t.Context(), journal.Query{Flow: "daily"})
		require.NoError(t, err)
		return rs
	}
	env.Advance(59 * time.Minute)
	require.Empty(t, runs())
	env.Advance(time.Minute)
	require.Len(t, runs(), 1, "the 9 o'clock tick")
	env.Advance(48 * time.Hour)
	rs := runs()
	require.Len(t, rs, 3)
	for i, want := range []string{"2026-03-04", "2026-03-03", "2026-03-02"} {
		require.Equal(t, journal.Completed, rs[i].Status)
		require.JSONEq(t, fmt.Sprintf(`{"id":%q}`, want), string(rs[i].Input))
		require.Equal(t, day.Add(time.Hour).AddDate(0, 0, 2-i), rs[i].StartedAt)
	}
}

// TestStartFlow: an Env works every flow it was given.
func TestStartFlow(t *testing.T) {
	t.Parallel()
	pass := func(_ context.Context, p Parcel) (Parcel, error) { return p, nil }
	env := flowtest.New(t, dsl.Flow("first", dsl.Step("a", pass)), dsl.Flow("second", dsl.Delay(time.Hour), dsl.Step("b", pass)))
	run := env.StartFlow("second", Parcel{ID: "p-1"})
	require.Equal(t, "second", env.RunUntil(run, journal.Completed).Flow)
}

// fatal is a testing.TB whose Fatalf ends the goroutine calling it, with
// the message kept: what the Env says when it fails a test.
type fatal struct {
	testing.TB

	mu  sync.Mutex
	msg string
}

func (f *fatal) Fatalf(format string, args ...any) {
	f.mu.Lock()
	f.msg = fmt.Sprintf(format, args...)
	f.mu.Unlock()
	runtime.Goexit()
}

// fails runs call on a goroutine of its own and returns what it failed
// the test with ("" when it did not).
func (f *fatal) fails(call func()) string {
	done := make(chan struct{})
	go func() {
		defer close(done)
		call()
	}()
	<-done
	f.mu.Lock()
	defer f.mu.Unlock()
	return f.msg
}

// TestRunUntilNothingLeft: waiting for a status a run will never reach
// fails at once, when nothing is left to happen, saying where the run is
// and showing its timeline.
func TestRunUntilNothingLeft(t *testing.T) {
	t.Parallel()
	ft := &fatal{TB: t}
	env := flowtest.New(ft, dsl.Flow("doomed",
		dsl.Step("a", func(context.Context, Parcel) (Parcel, error) {
			return Parcel{}, broker.Fatal(errors.New("no such parcel"))
		}),
	))
	run := env.Start(Parcel{ID: "p-1"})
	msg := ft.fails(func() { env.RunUntil(run, journal.Completed) })
	require.Contains(t, msg, `is failed at a (step "a": fatal: no such parcel), not [completed], and nothing is left to happen`)
	require.Contains(t, msg, "its timeline:")
	require.Contains(t, msg, `step:a:failed: step "a": fatal: no such parcel`)
}

// TestRefusals: what an Env refuses.
func TestRefusals(t *testing.T) {
	t.Parallel()
	flow := dsl.Flow("refused", dsl.Step("a", func(_ context.Context, p Parcel) (Parcel, error) { return p, nil }))
	ft := &fatal{TB: t}
	require.Contains(t, ft.fails(func() { flowtest.Config{Broker: broker.Config{Clock: broker.SystemClock{}}}.New(ft, flow) }),
		"Config.Broker.Clock is set")
	ft = &fatal{TB: t}
	require.Contains(t, ft.fails(func() { flowtest.New(ft) }), "no flows")
	ft = &fatal{TB: t}
	env := flowtest.New(ft, flow)
	require.Contains(t, ft.fails(func() { env.Advance(-time.Second) }), "the clock does not go back")
	require.Contains(t, ft.fails(func() { env.Start(42) }), "takes flowtest_test.Parcel, not int")
}
