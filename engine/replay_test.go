package engine_test

import (
	"context"
	"errors"
	"sync/atomic"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/acemq/acemq-flow/broker"
	"github.com/acemq/acemq-flow/broker/transport"
	"github.com/acemq/acemq-flow/dsl"
	"github.com/acemq/acemq-flow/engine"
	"github.com/acemq/acemq-flow/engine/journal"
	"github.com/acemq/acemq-flow/internal/brokertest"
)

// outage is a stand-in service that fails while it is down.
type outage struct{ down atomic.Bool }

func (o *outage) step(ef *effects, name string) func(context.Context, Order) (Order, error) {
	return func(ctx context.Context, ord Order) (Order, error) {
		m, _ := broker.Handling(ctx)
		if o.down.Load() {
			ef.add(m.RunID, name+"-failed")
			return ord, errors.New(name + " is down")
		}
		ef.add(m.RunID, name)
		return ord, nil
	}
}

// TestReplayByRunID: a failed run is replayed by its id from the step that
// gave it up, and completes; the timeline shows the replay. A run that is
// not failed, or unknown and nowhere to be found, is refused.
func TestReplayByRunID(t *testing.T) {
	brokertest.Each(t, func(t *testing.T, h *brokertest.Harness) {
		fx := newFixture(t, h, engine.Config{})
		ef := newEffects()
		var courier outage
		courier.down.Store(true)
		fx.register(dsl.Flow(fx.name,
			dsl.Step("charge", appendStep(ef, "charge")),
			dsl.Step("ship", courier.step(ef, "ship")).Retry(broker.Constant(2, 0))))
		fx.work()
		ctx := brokertest.Ctx(t)
		run := fx.start(Order{ID: "o-8"})
		r := fx.waitStatus(run, journal.Failed, 10*time.Second)
		require.Equal(t, fx.name+".ship.dlq", r.DeadLetter)
		require.Contains(t, r.Error, "ship is down")
		require.Equal(t, "ship", r.Step)

		_, err := fx.eng.Replay(ctx, "no-such-run")
		require.ErrorIs(t, err, engine.ErrMessageNotFound)
		require.ErrorContains(t, err, "no-such-run")

		courier.down.Store(false)
		moved, err := fx.eng.Replay(ctx, run)
		require.NoError(t, err)
		require.Equal(t, engine.Moved{RunID: run, Flow: fx.name, From: fx.name + ".ship.dlq", To: fx.name + ".ship", Messages: 1}, moved)
		r = fx.waitStatus(run, journal.Completed, 10*time.Second)
		require.Equal(t, 1, r.Replays)
		require.Empty(t, r.Error)
		require.Equal(t, 1, ef.get(run, "charge"), "the steps before the failed one are not run again")
		require.Equal(t, 1, ef.get(run, "ship"))
		fx.waitOutcomes(run, []string{"start::started", "step:charge:completed", "step:ship:retried", "step:ship:failed",
			"replay:ship:replayed", "step:ship:completed"})

		_, err = fx.eng.Replay(ctx, run)
		require.ErrorIs(t, err, engine.ErrNotReplayable)
		require.ErrorContains(t, err, "is completed")
	})
}

// TestReplayWaitsForAMessageOnItsWay: the journal records a run failed
// before its message's move to the dead-letter queue is confirmed; a
// replay right after the failure finds the message once it arrives,
// rather than saying it is nowhere.
func TestReplayWaitsForAMessageOnItsWay(t *testing.T) {
	brokertest.Each(t, func(t *testing.T, h *brokertest.Harness) {
		fx := newFixture(t, h, engine.Config{})
		ef := newEffects()
		var courier outage
		courier.down.Store(true)
		fx.register(dsl.Flow(fx.name,
			dsl.Step("ship", courier.step(ef, "ship")).Retry(broker.NoRetry())))
		fx.work()
		ctx := brokertest.Ctx(t)
		run := fx.start(Order{ID: "o-late"})
		fx.waitStatus(run, journal.Failed, 10*time.Second)
		// Take the message out of the dead-letter queue and put it back
		// 300 ms after the replay began looking for it.
		dlq := fx.name + ".ship" + broker.DeadLetterSuffix
		d := h.Get(dlq, 10*time.Second)
		courier.down.Store(false)
		published := make(chan error, 1)
		back := time.AfterFunc(300*time.Millisecond, func() {
			published <- h.Admin.Transport().Publish(context.WithoutCancel(ctx), transport.Publishing{RoutingKey: dlq, Message: d.Message})
		})
		defer back.Stop()
		moved, err := fx.eng.Replay(ctx, run)
		require.NoError(t, <-published, "the message put back in the dead-letter queue")
		require.NoError(t, err)
		require.Equal(t, 1, moved.Messages)
		fx.waitStatus(run, journal.Completed, 10*time.Second)
		require.Equal(t, 1, ef.get(run, "ship"))
	})
}

// TestHoldForReplay: a failed run of a flow that holds failed runs waits
// as failed; replayed in time, it is never compensated; left alone, it is
// compensated when the hold ends, and its message leaves the dead-letter
// queue; compensate-now does it at once, and the hold then ends without
// compensating twice.
func TestHoldForReplay(t *testing.T) {
	brokertest.Each(t, func(t *testing.T, h *brokertest.Harness) {
		fx := newFixture(t, h, engine.Config{})
		ef := newEffects()
		var courier outage
		courier.down.Store(true)
		undo := func(ctx context.Context, o Order) error {
			m, _ := broker.Handling(ctx)
			ef.add(m.RunID, "undo-charge")
			return nil
		}
		fx.register(dsl.Flow(fx.name,
			dsl.Step("charge", appendStep(ef, "charge")).Compensate(undo),
			dsl.Step("ship", courier.step(ef, "ship")).Retry(broker.NoRetry()),
			dsl.HoldForReplay(2*time.Second)))
		fx.work()
		ctx := brokertest.Ctx(t)

		replayed := fx.start(Order{ID: "replayed"})
		left := fx.start(Order{ID: "left"})
		now := fx.start(Order{ID: "now"})
		for _, run := range []string{replayed, left, now} {
			r := fx.waitStatus(run, journal.Failed, 10*time.Second)
			require.NotNil(t, r.DueAt, "a held run says when its hold ends")
		}
		courier.down.Store(false)
		_, err := fx.eng.Replay(ctx, replayed)
		require.NoError(t, err)
		moved, err := fx.eng.Compensate(ctx, now)
		require.NoError(t, err)
		require.Equal(t, fx.name+".compensate", moved.To)
		fx.waitStatus(now, journal.Compensated, 5*time.Second)
		fx.waitStatus(replayed, journal.Completed, 10*time.Second)
		fx.waitStatus(left, journal.Compensated, 10*time.Second)

		// Past every hold: the replayed run was never compensated, the
		// compensated-now one only once.
		require.Eventually(t, func() bool {
			tl, _ := fx.eng.Journal().Timeline(context.Background(), replayed)
			for _, e := range tl {
				if e.Kind == journal.KindCompensation {
					return true
				}
			}
			return false
		}, 10*time.Second, 50*time.Millisecond, "the held compensation of the replayed run came due and was dropped")
		require.Zero(t, ef.get(replayed, "undo-charge"))
		require.Equal(t, 1, ef.get(left, "undo-charge"))
		require.Equal(t, 1, ef.get(now, "undo-charge"))
		_, err = fx.eng.Replay(ctx, left)
		require.ErrorIs(t, err, engine.ErrNotReplayable)
		require.ErrorContains(t, err, "a compensated run cannot be replayed")
		require.Eventually(t, func() bool {
			tl, _ := fx.eng.Journal().Timeline(context.Background(), now)
			n := 0
			for _, e := range tl {
				if e.Kind == journal.KindCompensation && e.Step == "charge" {
					n++
				}
			}
			return n == 2
		}, 10*time.Second, 50*time.Millisecond, "the hold of the run compensated by hand ended without compensating again")
		require.Equal(t, 1, ef.get(now, "undo-charge"))
		h.WaitDepth(fx.name+".ship"+broker.DeadLetterSuffix, 0, 10*time.Second)
	})
}

// TestCompensateNothingToUndo: compensating a failed run that completed no
// step with a compensation ends it compensated, its message out of the
// dead-letter queue: it is not left failed, pointing at a message that is
// gone.
func TestCompensateNothingToUndo(t *testing.T) {
	brokertest.Each(t, func(t *testing.T, h *brokertest.Harness) {
		fx := newFixture(t, h, engine.Config{})
		ef := newEffects()
		var courier outage
		courier.down.Store(true)
		fx.register(dsl.Flow(fx.name,
			dsl.Step("charge", appendStep(ef, "charge")),
			dsl.Step("ship", courier.step(ef, "ship")).Retry(broker.NoRetry())))
		fx.work()
		ctx := brokertest.Ctx(t)
		run := fx.start(Order{ID: "nothing"})
		fx.waitStatus(run, journal.Failed, 10*time.Second)
		moved, err := fx.eng.Compensate(ctx, run)
		require.NoError(t, err)
		require.Equal(t, fx.name+".compensate", moved.To)
		r := fx.waitStatus(run, journal.Compensated, 10*time.Second)
		require.Empty(t, r.DeadLetter)
		require.Equal(t, "ship", r.Step, "it still says where it failed")
		require.Contains(t, r.Error, "ship is down", "and why")
		require.Contains(t, fx.outcomes(run), "compensation::nothing to compensate")
		require.Zero(t, h.Depth(fx.name+".ship"+broker.DeadLetterSuffix))
		_, err = fx.eng.Replay(ctx, run)
		require.ErrorIs(t, err, engine.ErrNotReplayable)
	})
}

// TestItinerary: a flow whose route is chosen when each run starts travels
// as a routing slip through the steps it chose, in that order.
func TestItinerary(t *testing.T) {
	brokertest.Each(t, func(t *testing.T, h *brokertest.Harness) {
		fx := newFixture(t, h, engine.Config{})
		ef := newEffects()
		done := make(chan Order, 2)
		fx.register(dsl.Flow(fx.name,
			dsl.Itinerary(func(_ context.Context, o Order) ([]string, error) {
				if o.Digital {
					return []string{"charge", "email"}, nil
				}
				return []string{"pack", "charge", "email"}, nil
			}),
			dsl.Step("charge", appendStep(ef, "charge")),
			dsl.Step("pack", appendStep(ef, "pack")),
			dsl.Step("email", func(_ context.Context, o Order) (Order, error) { done <- o; return o, nil })))
		fx.work()
		fx.start(Order{ID: "d", Digital: true})
		physical := fx.start(Order{ID: "p"})
		got := map[string][]string{}
		for range 2 {
			o := brokertest.Next(t, done, 10*time.Second)
			got[o.ID] = o.Trail
		}
		require.Equal(t, []string{"charge"}, got["d"])
		require.Equal(t, []string{"pack", "charge"}, got["p"])
		fx.waitStatus(physical, journal.Completed, 10*time.Second)
		fx.waitOutcomes(physical, []string{"start::started", "step:pack:completed", "step:charge:completed", "step:email:completed"})
	})
}
