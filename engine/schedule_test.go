package engine_test

import (
	"context"
	"fmt"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/acemq/acemq-flow/broker"
	"github.com/acemq/acemq-flow/dsl"
	"github.com/acemq/acemq-flow/engine"
	"github.com/acemq/acemq-flow/engine/journal"
	"github.com/acemq/acemq-flow/internal/brokertest"
	"github.com/acemq/acemq-flow/internal/testenv"
)

// TestSchedulesAndCancel: what waits on the ladder is listed with its
// kind and due time; a delayed start cancelled before it is due is
// dropped when it comes due (recorded, never run); cancelling the hold of
// a failed run compensates it now; cancelling what was already delivered
// is refused.
func TestSchedulesAndCancel(t *testing.T) {
	brokertest.Each(t, func(t *testing.T, h *brokertest.Harness) {
		fx := newFixture(t, h, engine.Config{})
		ef := newEffects()
		var courier outage
		courier.down.Store(true)
		fx.register(dsl.Flow(fx.name,
			dsl.Step("charge", appendStep(ef, "charge")).Compensate(func(ctx context.Context, _ Order) error {
				m, _ := broker.Handling(ctx)
				ef.add(m.RunID, "undo-charge")
				return nil
			}),
			dsl.Delay(3*time.Second),
			dsl.Step("ship", courier.step(ef, "ship")).Retry(broker.NoRetry()),
			dsl.HoldForReplay(time.Hour)))
		fx.work()
		ctx := brokertest.Ctx(t)

		later, err := fx.eng.Start(ctx, fx.name, Order{ID: "later"}, engine.In(2*time.Second))
		require.NoError(t, err)
		soon := fx.start(Order{ID: "soon"})
		fx.waitStatus(soon, journal.Waiting, 5*time.Second)
		held := fx.start(Order{ID: "held"}, engine.RunID(fx.name+"-held"))
		_ = held

		list, err := fx.eng.Schedules(ctx, fx.name, 0)
		require.NoError(t, err)
		kinds := map[string]string{}
		for _, s := range list {
			kinds[s.RunID] = s.Kind
			require.False(t, s.DueAt.IsZero())
		}
		require.Equal(t, engine.ScheduledStart, kinds[later.RunID])
		require.Equal(t, engine.ScheduledDelay, kinds[soon])
		require.True(t, list[0].DueAt.Before(list[len(list)-1].DueAt) || len(list) == 1, "soonest first")

		_, err = fx.eng.Cancel(ctx, later.RunID)
		require.NoError(t, err)
		r := fx.waitStatus(later.RunID, journal.Cancelled, 5*time.Second)
		require.NotNil(t, r.EndedAt)
		// Past its due time the dropped message is recorded, and nothing ran.
		require.Eventually(t, func() bool {
			for _, o := range fx.outcomes(later.RunID) {
				if o == "cancel:charge:dropped: the run was cancelled while it waited" {
					return true
				}
			}
			return false
		}, 10*time.Second, 50*time.Millisecond, "the delayed start was dropped when it came due")
		require.Zero(t, ef.get(later.RunID, "charge"))

		// The held run: it fails at ship, held for an hour; cancelling the
		// hold compensates it now.
		fx.waitStatus(fx.name+"-held", journal.Failed, 15*time.Second)
		list, err = fx.eng.Schedules(ctx, fx.name, 0)
		require.NoError(t, err)
		var hold engine.Scheduled
		for _, s := range list {
			if s.RunID == fx.name+"-held" {
				hold = s
			}
		}
		require.Equal(t, engine.ScheduledHold, hold.Kind)
		require.WithinDuration(t, time.Now().Add(time.Hour), hold.DueAt, time.Minute)
		cancelled, err := fx.eng.Cancel(ctx, fx.name+"-held")
		require.NoError(t, err)
		require.True(t, cancelled.Compensating, "cancelling a hold says the run is compensated now")
		fx.waitStatus(fx.name+"-held", journal.Compensated, 10*time.Second)
		require.Equal(t, 1, ef.get(fx.name+"-held", "undo-charge"), "its charge was undone")
		require.Contains(t, fx.outcomes(fx.name+"-held"), "cancel:ship:hold cancelled (due "+hold.DueAt.Format(time.RFC3339)+"): compensating now")
		_, err = fx.eng.Replay(ctx, fx.name+"-held")
		require.ErrorIs(t, err, engine.ErrNotReplayable)

		// soon went on to ship (and failed there): its hold cancelled, it
		// is compensated, and nothing is left to cancel.
		fx.waitStatus(soon, journal.Failed, 15*time.Second)
		_, err = fx.eng.Cancel(ctx, soon)
		require.NoError(t, err, "its hold can still be cancelled")
		fx.waitStatus(soon, journal.Compensated, 10*time.Second)
		_, err = fx.eng.Cancel(ctx, soon)
		require.ErrorIs(t, err, engine.ErrNotCancellable)
		require.ErrorContains(t, err, "waits for nothing")
		require.Zero(t, h.Depth(fx.name+".ship"+broker.DeadLetterSuffix), "the held messages left the dead-letter queue")
	})
}

// TestSchedulesAreTheSoonestDue: with more waits than the limit, the list
// is the waits due soonest, not the runs started last: here the runs
// started last are due last (a run delayed by a day is started after
// runs delayed by minutes), and a limit of two lists the two due first.
func TestSchedulesAreTheSoonestDue(t *testing.T) {
	t.Parallel()
	h := brokertest.New(t, "memory://"+testenv.Name(t, "broker"), false)
	fx := newFixture(t, h, engine.Config{})
	fx.register(dsl.Flow(fx.name, dsl.Step("charge", appendStep(newEffects(), "charge")), dsl.Delay(time.Minute),
		dsl.Step("ship", appendStep(newEffects(), "ship"))))
	ctx := brokertest.Ctx(t)
	base := time.Now().Truncate(time.Second)
	for i := range 5 {
		id := fmt.Sprintf("%s-%d", fx.name, i)
		started := base.Add(time.Duration(i) * time.Second)
		due := base.Add(time.Duration(i+1) * time.Hour)
		require.NoError(t, fx.journal.Record(ctx, []journal.Event{
			{RunID: id, Flow: fx.name, Key: "start", Kind: journal.KindStart, Outcome: "started", StartedAt: started, EndedAt: started,
				Status: journal.Running, RunStep: "charge"},
			{RunID: id, Flow: fx.name, Key: "delay/ship", Seq: journal.Seq(0, 2, 0, 0), Kind: journal.KindDelay, Step: "ship",
				Outcome: "waiting", StartedAt: started, EndedAt: started, DueAt: &due, Status: journal.Waiting, RunStep: "ship"},
		}))
	}
	list, err := fx.eng.Schedules(ctx, fx.name, 2)
	require.NoError(t, err)
	var ids []string
	for _, s := range list {
		ids = append(ids, s.RunID)
		require.Equal(t, engine.ScheduledDelay, s.Kind)
	}
	require.Equal(t, []string{fx.name + "-0", fx.name + "-1"}, ids, "the two due soonest, soonest first")
	require.True(t, list[0].DueAt.Equal(base.Add(time.Hour)))
}
