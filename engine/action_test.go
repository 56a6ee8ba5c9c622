package engine_test

import (
	"context"
	"slices"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/acemq/acemq-flow/broker"
	"github.com/acemq/acemq-flow/dsl"
	"github.com/acemq/acemq-flow/engine"
	"github.com/acemq/acemq-flow/engine/journal"
	"github.com/acemq/acemq-flow/internal/brokertest"
)

// TestActionsRecordWhoAndWhy: a replay, a compensation, a signal and a
// start asked with an engine.Action say in the run's timeline who asked
// and why; without one they read as they always did.
func TestActionsRecordWhoAndWhy(t *testing.T) {
	brokertest.Each(t, func(t *testing.T, h *brokertest.Harness) {
		fx := newFixture(t, h, engine.Config{})
		ef := newEffects()
		var courier outage
		courier.down.Store(true)
		fx.register(dsl.Flow(fx.name,
			dsl.Step("charge", appendStep(ef, "charge")).Compensate(func(ctx context.Context, _ Order) error {
				m, _ := broker.Handling(ctx)
				ef.add(m.RunID, "refund")
				return nil
			}),
			dsl.Step("ship", courier.step(ef, "ship")).Retry(broker.Constant(1, 0)),
			// A failed run waits to be replayed or compensated by hand.
			dsl.HoldForReplay(time.Hour)))
		fx.work()
		ctx := brokertest.Ctx(t)

		run := fx.start(Order{ID: "o-1"}, engine.StartedBy(engine.Action{Actor: "ada", Reason: "by hand"}))
		fx.waitStatus(run, journal.Failed, 10*time.Second)
		require.Equal(t, "start::started by ada: by hand", fx.outcomes(run)[0])
		courier.down.Store(false)
		_, err := fx.eng.ReplayWith(ctx, run, engine.Action{Actor: "ada", Reason: "courier back"})
		require.NoError(t, err)
		fx.waitStatus(run, journal.Completed, 10*time.Second)
		require.Contains(t, fx.outcomes(run), "replay:ship:replayed by ada: courier back")

		courier.down.Store(true)
		other := fx.start(Order{ID: "o-2"})
		fx.waitStatus(other, journal.Failed, 10*time.Second)
		require.Equal(t, "start::started", fx.outcomes(other)[0], "no Action: as it always read")
		_, err = fx.eng.CompensateWith(ctx, other, engine.Action{Actor: "bob", Reason: "order withdrawn"})
		require.NoError(t, err)
		fx.waitStatus(other, journal.Compensated, 10*time.Second)
		require.Contains(t, fx.outcomes(other), "compensation::compensation asked by bob: order withdrawn")
		require.Equal(t, 1, ef.get(other, "refund"))

		plain := fx.start(Order{ID: "o-3"})
		fx.waitStatus(plain, journal.Failed, 10*time.Second)
		_, err = fx.eng.Compensate(ctx, plain)
		require.NoError(t, err)
		fx.waitStatus(plain, journal.Compensated, 10*time.Second)
		require.False(t, slices.ContainsFunc(fx.outcomes(plain), func(o string) bool { return o == "compensation::compensation asked" }),
			"Compensate records no asker: %v", fx.outcomes(plain))
	})
}

// TestSignalWithRecordsWhoAndWhy: a signal sent with an Action says in
// the wait's event who sent it and why.
func TestSignalWithRecordsWhoAndWhy(t *testing.T) {
	brokertest.Each(t, func(t *testing.T, h *brokertest.Harness) {
		fx, _, paid, run := waitingApproval(t, h, time.Minute)
		sent, err := fx.eng.SignalWith(brokertest.Ctx(t), run, "approval", Approval{By: "ada", OK: true}, engine.Action{Actor: "ada", Reason: "looks right"})
		require.NoError(t, err)
		require.True(t, sent.Resumed)
		goesOn(fx, paid, run)
		fx.waitStatus(run, journal.Completed, 10*time.Second)
		require.Contains(t, fx.outcomes(run), "step:approval:signal received by ada: looks right; the run goes on")
	})
}
