package engine_test

import (
	"context"
	"errors"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/acemq/acemq-flow/broker"
	"github.com/acemq/acemq-flow/dsl"
	"github.com/acemq/acemq-flow/engine"
	"github.com/acemq/acemq-flow/engine/journal"
	"github.com/acemq/acemq-flow/internal/brokertest"
)

// inputs records the payload each step got, per run and step, in order.
type inputs struct {
	mu  sync.Mutex
	got map[string][]Order
}

func newInputs() *inputs { return &inputs{got: map[string][]Order{}} }

func (in *inputs) step(ef *effects, name string, fail *atomic.Bool) func(context.Context, Order) (Order, error) {
	return func(ctx context.Context, o Order) (Order, error) {
		m, _ := broker.Handling(ctx)
		in.mu.Lock()
		in.got[m.RunID+"/"+name] = append(in.got[m.RunID+"/"+name], o)
		in.mu.Unlock()
		if fail != nil && fail.Load() {
			ef.add(m.RunID, name+"-failed")
			return o, broker.Fatal(errors.New(name + " is down"))
		}
		ef.add(m.RunID, name)
		o.Trail = append(o.Trail, name)
		return o, nil
	}
}

func (in *inputs) of(run, step string) []Order {
	in.mu.Lock()
	defer in.mu.Unlock()
	return append([]Order(nil), in.got[run+"/"+step]...)
}

// TestReplayFromCompletedRunOnTheCurrentVersion: a completed run replayed
// from its second step runs the second step and every one after it
// again, the second on the very input it had, under fresh idempotency
// keys, on the route the flow's current version has from there (a step
// inserted since runs); the first is not run again. The journal shows the
// run running again, then completed, replayed once, on the new version.
func TestReplayFromCompletedRunOnTheCurrentVersion(t *testing.T) {
	brokertest.Each(t, func(t *testing.T, h *brokertest.Harness) {
		v1 := newFixture(t, h, engine.Config{})
		ef, in := newEffects(), newInputs()
		v1.register(dsl.Flow(v1.name,
			dsl.Step("validate", in.step(ef, "validate", nil)),
			dsl.Step("charge", in.step(ef, "charge", nil)),
			dsl.Step("ship", in.step(ef, "ship", nil))))
		w1 := v1.work()
		run := v1.start(Order{ID: "o-1", Amount: 5})
		first := v1.waitStatus(run, journal.Completed, 10*time.Second)
		ctx := brokertest.Ctx(t)
		require.NoError(t, w1.Close(ctx))

		// Version 2 inserts a step after charge; its engine shares the
		// journal.
		v2 := newFixture(t, h, engine.Config{Journal: v1.journal})
		v2.name, v2.journal = v1.name, v1.journal
		v2.register(dsl.Flow(v2.name,
			dsl.Step("validate", in.step(ef, "validate", nil)),
			dsl.Step("charge", in.step(ef, "charge", nil)),
			dsl.Step("audit", in.step(ef, "audit", nil)),
			dsl.Step("ship", in.step(ef, "ship", nil))))
		v2.work()
		info, err := v2.eng.Flow(v2.name)
		require.NoError(t, err)
		require.NotEqual(t, first.Version, info.Version)

		res, err := v2.eng.ReplayFrom(ctx, run, engine.ReplayFromRequest{Step: "charge", Reason: "the charge went to the wrong account"})
		require.NoError(t, err)
		require.Equal(t, run, res.RunID)
		require.Equal(t, journal.Completed, res.Was)
		require.Equal(t, "charge", res.Step)
		require.Equal(t, v2.name+".charge", res.Queue)
		require.Equal(t, []string{"charge", "audit", "ship"}, res.Route)
		require.Equal(t, info.Version, res.Version)
		require.Equal(t, 1, res.Replays)
		require.Zero(t, res.InputReplay)
		require.Positive(t, res.InputSize)
		require.Empty(t, res.Carried)

		r := v2.waitStatus(run, journal.Completed, 10*time.Second)
		require.Equal(t, 1, r.Replays)
		require.Equal(t, info.Version, r.Version, "the run goes on on the current version")
		require.Equal(t, 1, ef.get(run, "validate"), "steps before the one replayed from are not run again")
		require.Equal(t, 2, ef.get(run, "charge"))
		require.Equal(t, 1, ef.get(run, "audit"), "the current route from the step")
		require.Equal(t, 2, ef.get(run, "ship"))
		got := in.of(run, "charge")
		require.Len(t, got, 2)
		require.Equal(t, got[0], got[1], "the step runs on the input it had")
		require.Equal(t, []string{"validate"}, got[1].Trail)
		require.Equal(t, []string{"validate", "charge", "audit"}, in.of(run, "ship")[1].Trail)
		v2.waitOutcomes(run, []string{"start::started", "step:validate:completed", "step:charge:completed", "step:ship:completed",
			"replay:charge:replayed from charge: the charge went to the wrong account",
			"step:charge:completed", "step:audit:completed", "step:ship:completed"})

		// Replayed again from its first step: a run replayed is replayed
		// again as readily, on the latest inputs.
		res, err = v2.eng.ReplayFrom(ctx, run, engine.ReplayFromRequest{Step: "validate"})
		require.NoError(t, err)
		require.Equal(t, 2, res.Replays)
		require.Equal(t, []string{"validate", "charge", "audit", "ship"}, res.Route)
		v2.waitStatus(run, journal.Completed, 10*time.Second)
		require.Equal(t, 2, ef.get(run, "validate"))
		require.Equal(t, 3, ef.get(run, "charge"))
		require.Equal(t, 2, ef.get(run, "audit"))
		require.Equal(t, 3, ef.get(run, "ship"))
	})
}

// TestReplayFromFailedRunAtAnEarlierStep: a failed run replayed from a
// step before the one that gave up runs from there and completes; its
// given-up message is taken out of the dead-letter queue, so that a plain
// replay later finds nothing to replay twice.
func TestReplayFromFailedRunAtAnEarlierStep(t *testing.T) {
	brokertest.Each(t, func(t *testing.T, h *brokertest.Harness) {
		fx := newFixture(t, h, engine.Config{})
		ef, in := newEffects(), newInputs()
		var down atomic.Bool
		down.Store(true)
		fx.register(dsl.Flow(fx.name,
			dsl.Step("validate", in.step(ef, "validate", nil)),
			dsl.Step("charge", in.step(ef, "charge", nil)),
			dsl.Step("ship", in.step(ef, "ship", &down))))
		fx.work()
		ctx := brokertest.Ctx(t)
		run := fx.start(Order{ID: "o-2"})
		r := fx.waitStatus(run, journal.Failed, 10*time.Second)
		dlq := fx.name + ".ship" + broker.DeadLetterSuffix
		require.Equal(t, dlq, r.DeadLetter)
		h.WaitDepth(dlq, 1, 10*time.Second)

		down.Store(false)
		res, err := fx.eng.ReplayFrom(ctx, run, engine.ReplayFromRequest{Step: "charge"})
		require.NoError(t, err)
		require.Equal(t, journal.Failed, res.Was)
		require.Equal(t, 1, res.Discarded, "its given-up message was taken out of the dead-letter queue")
		require.Zero(t, h.Depth(dlq))
		fx.waitStatus(run, journal.Completed, 10*time.Second)
		require.Equal(t, 1, ef.get(run, "validate"))
		require.Equal(t, 2, ef.get(run, "charge"))
		require.Equal(t, 1, ef.get(run, "ship-failed"))
		require.Equal(t, 1, ef.get(run, "ship"))

		_, err = fx.eng.Replay(ctx, run)
		require.ErrorIs(t, err, engine.ErrNotReplayable, "nothing is left to replay a second time")
		require.Zero(t, h.Depth(fx.name+".charge"))
	})
}

// TestReplayFromCompensation: nothing is compensated before a replay from
// a step. A completed run replayed from a step carries on the
// compensations it owed for the steps before it: a failure after the
// replay undoes them with the rest. A compensated run owes none (they
// ran): a failure after its replay undoes only what ran again.
func TestReplayFromCompensation(t *testing.T) {
	brokertest.Each(t, func(t *testing.T, h *brokertest.Harness) {
		fx := newFixture(t, h, engine.Config{})
		ef, in := newEffects(), newInputs()
		undo := func(name string) func(context.Context, Order) error {
			return func(ctx context.Context, o Order) error {
				m, _ := broker.Handling(ctx)
				ef.add(m.RunID, "undo-"+name)
				return nil
			}
		}
		var down atomic.Bool
		fx.register(dsl.Flow(fx.name,
			dsl.Step("reserve", in.step(ef, "reserve", nil)).Compensate(undo("reserve")),
			dsl.Step("charge", in.step(ef, "charge", nil)).Compensate(undo("charge")),
			dsl.Step("ship", in.step(ef, "ship", &down))))
		fx.work()
		ctx := brokertest.Ctx(t)

		// Completed, then replayed from charge with ship down: charge's
		// compensation and reserve's (carried on) both run.
		done := fx.start(Order{ID: "o-3"})
		fx.waitStatus(done, journal.Completed, 10*time.Second)
		down.Store(true)
		res, err := fx.eng.ReplayFrom(ctx, done, engine.ReplayFromRequest{Step: "charge"})
		require.NoError(t, err)
		require.Equal(t, []string{"reserve"}, res.Carried)
		fx.waitStatus(done, journal.Compensated, 15*time.Second)
		require.Equal(t, 1, ef.get(done, "reserve"), "reserve is not run again")
		require.Equal(t, 2, ef.get(done, "charge"))
		require.Equal(t, 1, ef.get(done, "undo-charge"))
		require.Equal(t, 1, ef.get(done, "undo-reserve"), "the compensation owed for reserve was carried on")

		// Compensated, then replayed from charge with ship still down:
		// only charge is undone again; reserve's compensation ran once.
		res, err = fx.eng.ReplayFrom(ctx, done, engine.ReplayFromRequest{Step: "charge"})
		require.NoError(t, err)
		require.Equal(t, journal.Compensated, res.Was)
		require.Empty(t, res.Carried, "a compensated run owes nothing")
		r := fx.waitStatus(done, journal.Compensated, 15*time.Second)
		require.Equal(t, 2, r.Replays)
		require.Eventually(t, func() bool { return ef.get(done, "undo-charge") == 2 }, 10*time.Second, 20*time.Millisecond)
		require.Equal(t, 3, ef.get(done, "charge"))
		require.Equal(t, 1, ef.get(done, "undo-reserve"), "not undone twice")
	})
}

// TestReplayFromRefusals: a run still moving, a step the flow does not
// have, a step on a branch, a step the run never reached and a step whose
// input was too large to keep are refused, each saying why, and nothing
// is sent.
func TestReplayFromRefusals(t *testing.T) {
	brokertest.Each(t, func(t *testing.T, h *brokertest.Harness) {
		fx := newFixture(t, h, engine.Config{})
		ef, in := newEffects(), newInputs()
		var down atomic.Bool
		fx.register(dsl.Flow(fx.name,
			dsl.Step("validate", func(ctx context.Context, o Order) (Order, error) {
				// What comes after is small again.
				m, _ := broker.Handling(ctx)
				ef.add(m.RunID, "validate")
				return Order{ID: o.ID}, nil
			}),
			dsl.Parallel("fulfil",
				dsl.Branch(dsl.Step("pick", appendStep(ef, "pick"))),
				dsl.Branch(dsl.Step("book", appendStep(ef, "book"))),
			).Join(func(_ context.Context, o Order, _ Order, _ Order) (Order, error) { return o, nil }),
			dsl.Step("ship", in.step(ef, "ship", &down)),
			dsl.Delay(time.Hour),
			dsl.Step("notify", in.step(ef, "notify", nil))))
		fx.work()
		ctx := brokertest.Ctx(t)

		waiting := fx.start(Order{ID: "o-wait"})
		fx.waitStatus(waiting, journal.Waiting, 10*time.Second)
		_, err := fx.eng.ReplayFrom(ctx, waiting, engine.ReplayFromRequest{Step: "validate"})
		require.ErrorIs(t, err, engine.ErrNotReplayable)
		require.ErrorContains(t, err, waiting)
		require.ErrorContains(t, err, "is waiting")

		down.Store(true)
		failed := fx.start(Order{ID: "o-big", Trail: []string{strings.Repeat("x", journal.MaxStepInput)}})
		fx.waitStatus(failed, journal.Failed, 10*time.Second)

		_, err = fx.eng.ReplayFrom(ctx, failed, engine.ReplayFromRequest{Step: "pack"})
		require.ErrorIs(t, err, engine.ErrUnknownStep)
		require.ErrorContains(t, err, `"pack"`)
		require.ErrorContains(t, err, "its steps fulfil, ship", "the steps it can be replayed from; validate's input was too large")

		_, err = fx.eng.ReplayFrom(ctx, failed, engine.ReplayFromRequest{Step: "pick"})
		require.ErrorIs(t, err, engine.ErrBranchStep)
		require.ErrorContains(t, err, `replay the run from "fulfil"`)

		_, err = fx.eng.ReplayFrom(ctx, failed, engine.ReplayFromRequest{Step: "notify"})
		require.ErrorIs(t, err, engine.ErrStepNotReached)

		_, err = fx.eng.ReplayFrom(ctx, failed, engine.ReplayFromRequest{Step: "validate"})
		require.ErrorIs(t, err, engine.ErrInputNotKept)
		require.ErrorContains(t, err, "65536")

		_, err = fx.eng.ReplayFrom(ctx, "no-such-run", engine.ReplayFromRequest{Step: "validate"})
		require.ErrorIs(t, err, journal.ErrRunNotFound)

		r, err := fx.eng.Journal().Run(ctx, failed)
		require.NoError(t, err)
		require.Equal(t, journal.Failed, r.Status, "nothing refused changed the run")
		require.Zero(t, r.Replays)
		require.Equal(t, 1, ef.get(failed, "validate"))

		steps, err := fx.eng.ReplaySteps(ctx, failed)
		require.NoError(t, err)
		var names []string
		for _, s := range steps {
			names = append(names, s.Step)
			require.Equal(t, s.Step != "validate", s.Kept, s.Step)
		}
		require.Equal(t, []string{"validate", "fulfil", "ship"}, names)

		// From the fork: its branches and the join run again.
		down.Store(false)
		res, err := fx.eng.ReplayFrom(ctx, failed, engine.ReplayFromRequest{Step: "fulfil"})
		require.NoError(t, err)
		require.Equal(t, []string{"fulfil", "ship", "notify"}, res.Route)
		fx.waitStatus(failed, journal.Waiting, 10*time.Second)
		require.Equal(t, 2, ef.get(failed, "pick"))
		require.Equal(t, 2, ef.get(failed, "book"))
		require.Equal(t, 1, ef.get(failed, "ship"))
	})
}

// TestReplayFromKeepsTheDeadline: a run replayed from a step is under its
// flow's Deadline again, from the replay: one that does not end in time is
// cancelled, as a started run would be.
func TestReplayFromKeepsTheDeadline(t *testing.T) {
	brokertest.Each(t, func(t *testing.T, h *brokertest.Harness) {
		fx := newFixture(t, h, engine.Config{})
		ef := newEffects()
		var stuck atomic.Bool
		fx.register(dsl.Flow(fx.name,
			dsl.Step("a", appendStep(ef, "a")),
			dsl.Step("b", func(ctx context.Context, o Order) (Order, error) {
				if stuck.Load() {
					return o, errors.New("not yet")
				}
				return appendStep(ef, "b")(ctx, o)
			}).Retry(broker.Constant(1000, 0)),
			dsl.Deadline(time.Second)))
		fx.work()
		run := fx.start(Order{ID: "1"})
		fx.waitStatus(run, journal.Completed, 10*time.Second)
		stuck.Store(true)
		_, err := fx.eng.ReplayFrom(brokertest.Ctx(t), run, engine.ReplayFromRequest{Step: "b"})
		require.NoError(t, err)
		r := fx.waitStatus(run, journal.Cancelled, 10*time.Second)
		require.Contains(t, r.Error, "deadline")
		require.Equal(t, 1, ef.get(run, "b"), "b ran once, before the replay")
	})
}
