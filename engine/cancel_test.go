package engine_test

import (
	"context"
	"encoding/json"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
	sdkmetric "go.opentelemetry.io/otel/sdk/metric"

	"github.com/acemq/acemq-flow/broker"
	"github.com/acemq/acemq-flow/dsl"
	"github.com/acemq/acemq-flow/engine"
	"github.com/acemq/acemq-flow/engine/journal"
	"github.com/acemq/acemq-flow/internal/brokertest"
)

// blockingFlow is charge (compensable) -> ship, which tells started it
// began and runs until its context ends (giving the cause on causes) ->
// notify, with the flow's extra parts. The retry policy tries ship again
// at once.
func blockingFlow(name string, ef *effects, started chan<- string, causes chan<- error, extra ...dsl.Part) *dsl.FlowDef {
	return dsl.Flow(name, append([]dsl.Part{
		dsl.Step("charge", func(ctx context.Context, o Order) (Order, error) {
			m, _ := broker.Handling(ctx)
			ef.add(m.RunID, "charge")
			return o, nil
		}).Compensate(func(ctx context.Context, _ Order) error {
			m, _ := broker.Handling(ctx)
			ef.add(m.RunID, "undo-charge")
			return nil
		}),
		dsl.Step("ship", func(ctx context.Context, o Order) (Order, error) {
			m, _ := broker.Handling(ctx)
			ef.add(m.RunID, "ship-started")
			started <- m.RunID
			<-ctx.Done()
			causes <- context.Cause(ctx)
			return o, ctx.Err()
		}).Retry(broker.Constant(5, 0)),
		dsl.Step("notify", func(ctx context.Context, o Order) (Order, error) {
			m, _ := broker.Handling(ctx)
			ef.add(m.RunID, "notify")
			return o, nil
		})}, extra...)...)
}

// hasOutcome says whether the run's timeline has an event whose
// kind:step:outcome begins with prefix.
func hasOutcome(fx *fixture, run, prefix string) bool {
	return slices.ContainsFunc(fx.outcomes(run), func(o string) bool { return strings.HasPrefix(o, prefix) })
}

// TestCancelRunWithAStepInFlight: cancelling a run whose step is running
// cancels that step's context (ErrRunCancelled its cause); the step is
// not started again, no later step starts, what the run completed is
// compensated once, and the run ends cancelled, its timeline saying who
// asked and why. A run that is over, or unknown, is refused.
func TestCancelRunWithAStepInFlight(t *testing.T) {
	brokertest.Each(t, func(t *testing.T, h *brokertest.Harness) {
		fx := newFixture(t, h, engine.Config{})
		ef, started, causes := newEffects(), make(chan string, 4), make(chan error, 4)
		fx.register(blockingFlow(fx.name, ef, started, causes))
		fx.work()
		run := fx.start(Order{ID: "o-1"})
		select {
		case <-started:
		case <-time.After(10 * time.Second):
			t.Fatalf("ship did not start; timeline %v", fx.outcomes(run))
		}
		ctx := brokertest.Ctx(t)
		c, err := fx.eng.CancelRun(ctx, run, engine.CancelRequest{Reason: "the customer asked", Actor: "ops"})
		require.NoError(t, err)
		require.Equal(t, fx.name, c.Flow)
		select {
		case cause := <-causes:
			require.ErrorIs(t, cause, engine.ErrRunCancelled)
		case <-time.After(10 * time.Second):
			t.Fatal("the step in flight was not stopped")
		}
		r := fx.waitStatus(run, journal.Cancelled, 10*time.Second)
		require.Equal(t, "cancelled by ops: the customer asked", r.Error)
		require.Eventually(t, func() bool { return ef.get(run, "undo-charge") == 1 }, 10*time.Second, 20*time.Millisecond,
			"charge is compensated; timeline %v", fx.outcomes(run))
		outcomes := fx.outcomes(run)
		require.True(t, strings.HasPrefix(outcomes[len(outcomes)-1], "cancel:") && strings.HasSuffix(outcomes[len(outcomes)-1], ":cancelled by ops: the customer asked"),
			"the timeline ends with who cancelled it and why: %v", outcomes)
		require.True(t, hasOutcome(fx, run, "cancel:ship:not run: the run was cancelled"), "%v", outcomes)
		brokertest.Nothing(t, started, 500*time.Millisecond)
		require.Equal(t, 1, ef.get(run, "ship-started"), "ship is not started again")
		require.Zero(t, ef.get(run, "notify"))
		require.Equal(t, journal.Cancelled, fx.waitStatus(run, journal.Cancelled, time.Second).Status, "it stays cancelled once compensated")

		_, err = fx.eng.CancelRun(ctx, run, engine.CancelRequest{})
		require.ErrorIs(t, err, engine.ErrRunEnded)
		_, err = fx.eng.CancelRun(ctx, "no-such-run", engine.CancelRequest{})
		require.ErrorIs(t, err, journal.ErrRunNotFound)
	})
}

// TestCancelRunWaitingForASignal: a run waiting for its signal, which has
// no message in flight, is woken and compensated; a signal then is
// refused.
func TestCancelRunWaitingForASignal(t *testing.T) {
	brokertest.Each(t, func(t *testing.T, h *brokertest.Harness) {
		fx, ef, paid, run := waitingApproval(t, h, time.Hour)
		ctx := brokertest.Ctx(t)
		_, err := fx.eng.CancelRun(ctx, run, engine.CancelRequest{Reason: "no longer wanted", Actor: "ada"})
		require.NoError(t, err)
		require.Eventually(t, func() bool { return ef.get(run, "undo-request") == 1 }, 10*time.Second, 20*time.Millisecond,
			"request is compensated; timeline %v", fx.outcomes(run))
		require.Equal(t, journal.Cancelled, fx.waitStatus(run, journal.Cancelled, 10*time.Second).Status)
		_, err = fx.eng.Signal(ctx, run, "approval", Approval{By: "late"})
		require.ErrorIs(t, err, engine.ErrRunEnded)
		brokertest.Nothing(t, paid, 300*time.Millisecond)
	})
}

// TestCancelRunOnBranches: cancelling a run whose Parallel's branches are
// running stops them at their next step; what they and the run completed
// is compensated, the join never fires, and the run ends cancelled.
func TestCancelRunOnBranches(t *testing.T) {
	brokertest.Each(t, func(t *testing.T, h *brokertest.Harness) {
		fx := newFixture(t, h, engine.Config{})
		ef, gate, reached := newEffects(), make(chan struct{}), make(chan string, 2)
		step := func(name string, wait bool) *dsl.StepDef[Order, Order] {
			return dsl.Step(name, func(ctx context.Context, o Order) (Order, error) {
				m, _ := broker.Handling(ctx)
				if wait {
					reached <- name
					<-gate
				}
				ef.add(m.RunID, name)
				return o, nil
			}).Compensate(func(ctx context.Context, _ Order) error {
				m, _ := broker.Handling(ctx)
				ef.add(m.RunID, "undo-"+name)
				return nil
			})
		}
		fx.register(dsl.Flow(fx.name,
			step("charge", false),
			dsl.Parallel("fulfil",
				dsl.Branch(step("pick", true), step("pack", false)),
				dsl.Branch(step("book", true), step("label", false)),
			).Join(func(ctx context.Context, o Order, _, _ Order) (Order, error) {
				m, _ := broker.Handling(ctx)
				ef.add(m.RunID, "join")
				return o, nil
			})))
		fx.work()
		run := fx.start(Order{ID: "o-1"})
		for range 2 {
			select {
			case <-reached:
			case <-time.After(10 * time.Second):
				t.Fatalf("the branches did not start; timeline %v", fx.outcomes(run))
			}
		}
		_, err := fx.eng.CancelRun(brokertest.Ctx(t), run, engine.CancelRequest{Reason: "stop"})
		require.NoError(t, err)
		close(gate)
		require.Eventually(t, func() bool {
			return ef.get(run, "undo-charge") == 1 && ef.get(run, "undo-pick") == 1 && ef.get(run, "undo-book") == 1
		}, 15*time.Second, 20*time.Millisecond, "everything completed is undone; timeline %v", fx.outcomes(run))
		require.Zero(t, ef.get(run, "pack"), "no step after the cancellation starts")
		require.Zero(t, ef.get(run, "label"))
		require.Zero(t, ef.get(run, "join"))
		require.Equal(t, journal.Cancelled, fx.waitStatus(run, journal.Cancelled, 10*time.Second).Status)
	})
}

// TestCancelRunFromAnotherEngine: on PostgreSQL, a run cancelled by
// another engine (as `acemq-flow cancel` does) is stopped in the worker
// that runs it: its step in flight sees its context cancelled, and what
// the run completed is compensated. A run with a child run cancels the
// child too.
func TestCancelRunFromAnotherEngine(t *testing.T) {
	brokertest.OnRabbit(t, func(t *testing.T, h *brokertest.Harness) {
		cfg := onPostgres(t)
		ef, started, causes := newEffects(), make(chan string, 8), make(chan error, 8)
		a := newFixture(t, h, cfg)
		childName := a.name + "-child"
		child := blockingFlow(childName, ef, started, causes)
		parent := func() *dsl.FlowDef {
			return dsl.Flow(a.name,
				dsl.Step("charge", func(ctx context.Context, o Order) (Order, error) {
					m, _ := broker.Handling(ctx)
					ef.add(m.RunID, "parent-charge")
					return o, nil
				}).Compensate(func(ctx context.Context, _ Order) error {
					m, _ := broker.Handling(ctx)
					ef.add(m.RunID, "undo-parent-charge")
					return nil
				}),
				dsl.Child[Order, Order]("ship", blockingFlow(childName, ef, started, causes)))
		}
		a.register(parent())
		cx := &fixture{t: t, h: h, conn: a.conn, eng: a.eng, name: childName}
		cx.register(child)
		b := newFixture(t, h, cfg)
		b.name = a.name
		require.NoError(t, b.eng.Register(child, parent()))
		a.work()
		run := a.start(Order{ID: "o-1"})
		var childRun string
		select {
		case childRun = <-started:
		case <-time.After(15 * time.Second):
			t.Fatalf("the child's ship did not start; timeline %v", a.outcomes(run))
		}
		require.Equal(t, run+".ship", childRun)
		// The child may not be in the journal yet (its start is written
		// in a batch): cancelled with it, or by its worker on its next step.
		c, err := b.eng.CancelRun(brokertest.Ctx(t), run, engine.CancelRequest{Reason: "fraud", Actor: "risk"})
		require.NoError(t, err)
		require.Subset(t, []string{childRun}, c.Children)
		select {
		case cause := <-causes:
			require.ErrorIs(t, cause, engine.ErrRunCancelled)
		case <-time.After(10 * time.Second):
			t.Fatal("the child's step in flight was not stopped")
		}
		require.Eventually(t, func() bool { return ef.get(childRun, "undo-charge") == 1 }, 15*time.Second, 20*time.Millisecond,
			"the child's charge is undone; timeline %v", a.outcomes(childRun))
		require.Equal(t, journal.Cancelled, a.waitStatus(childRun, journal.Cancelled, 10*time.Second).Status)
		require.Equal(t, journal.Cancelled, a.waitStatus(run, journal.Cancelled, 10*time.Second).Status)
		require.Eventually(t, func() bool { return ef.get(run, "undo-parent-charge") == 1 }, 15*time.Second, 20*time.Millisecond,
			"the parent's charge is undone; timeline %v", a.outcomes(run))
		require.Zero(t, ef.get(childRun, "notify"))
	})
}

// TestDeadline: a run of a flow with a Deadline that has not ended by it
// is stopped as a cancel is: its step in flight sees its context
// cancelled, what it completed is compensated, and it ends cancelled, its
// timeline saying "deadline". A run that ends in time is left alone.
func TestDeadline(t *testing.T) {
	brokertest.Each(t, func(t *testing.T, h *brokertest.Harness) {
		require.ErrorContains(t, dsl.Flow("short", dsl.Step("a", appendStep(newEffects(), "a")), dsl.Deadline(time.Millisecond)).Err(), "want at least 1s")
		fx := newFixture(t, h, engine.Config{})
		ef, started, causes := newEffects(), make(chan string, 4), make(chan error, 4)
		fx.register(blockingFlow(fx.name, ef, started, causes, dsl.Deadline(time.Second)))
		fx.work()
		run := fx.start(Order{ID: "slow"})
		r := stoppedByDeadline(fx, causes, run)
		require.Contains(t, r.Error, "cancelled by deadline: its deadline, 1s after its start, passed")
		require.Eventually(t, func() bool { return ef.get(run, "undo-charge") == 1 }, 10*time.Second, 20*time.Millisecond,
			"charge is compensated; timeline %v", fx.outcomes(run))
		require.Zero(t, ef.get(run, "notify"))

		reader := sdkmetric.NewManualReader()
		quick := newFixtureOn(t, h, broker.Config{MeterProvider: sdkmetric.NewMeterProvider(sdkmetric.WithReader(reader))}, engine.Config{})
		quick.register(dsl.Flow(quick.name, dsl.Step("only", func(_ context.Context, o Order) (Order, error) { return o, nil }), dsl.Deadline(time.Second)))
		quick.work()
		done := quick.start(Order{ID: "quick"})
		quick.waitStatus(done, journal.Completed, 10*time.Second)
		info, err := quick.eng.Flow(quick.name)
		require.NoError(t, err)
		require.Eventually(t, func() bool { return consumed(t, reader, info.CompensateQueue) == 1 }, 10*time.Second, 20*time.Millisecond,
			"its deadline's timer comes")
		require.NoError(t, quick.eng.Flush(brokertest.Ctx(t)))
		require.Equal(t, journal.Completed, quick.waitStatus(done, journal.Completed, time.Second).Status, "and changes nothing")
	})
}

// stoppedByDeadline waits until run's step in flight is stopped (its
// context's cause on causes) and the run is cancelled, and returns it.
func stoppedByDeadline(fx *fixture, causes <-chan error, run string) journal.Run {
	fx.t.Helper()
	select {
	case cause := <-causes:
		require.ErrorIs(fx.t, cause, engine.ErrRunCancelled)
	case <-time.After(20 * time.Second):
		fx.t.Fatalf("the deadline did not stop the run; timeline %v", fx.outcomes(run))
	}
	return fx.waitStatus(run, journal.Cancelled, 10*time.Second)
}

// Timed is the payload of the DeadlineAt test: when its run must be done.
type Timed struct {
	ID     string    `json:"id"`
	DoneBy time.Time `json:"done_by"`
}

// TestDeadlineAt: a deadline taken from the run's input stops a run that
// has not ended by then, as Deadline does; one that cannot be read from
// the input is refused at the start; a flow may not have both.
func TestDeadlineAt(t *testing.T) {
	brokertest.Each(t, func(t *testing.T, h *brokertest.Harness) {
		fx := newFixture(t, h, engine.Config{})
		started, causes := make(chan string, 2), make(chan error, 2)
		fx.register(dsl.Flow(fx.name,
			dsl.Step("wait", func(ctx context.Context, p Timed) (Timed, error) {
				started <- p.ID
				<-ctx.Done()
				causes <- context.Cause(ctx)
				return p, ctx.Err()
			}).Retry(broker.Constant(5, 0)),
			dsl.DeadlineAt("payload.done_by")))
		fx.work()
		run := fx.start(Timed{ID: "t-1", DoneBy: time.Now().Add(1500 * time.Millisecond)})
		r := stoppedByDeadline(fx, causes, run)
		require.Contains(t, r.Error, "cancelled by deadline: its deadline passed")

		_, err := fx.eng.Start(brokertest.Ctx(t), fx.name, json.RawMessage(`{"id":"t-2","done_by":"not a time"}`))
		require.ErrorIs(t, err, engine.ErrInvalidPayload)
		require.ErrorContains(t, dsl.Flow("both", dsl.Step("a", appendStep(newEffects(), "a")), dsl.Deadline(time.Minute), dsl.DeadlineAt("now()")).Err(),
			"both Deadline and DeadlineAt")
	})
}
