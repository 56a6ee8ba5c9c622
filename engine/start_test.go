package engine_test

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/acemq/acemq-flow/broker"
	"github.com/acemq/acemq-flow/dsl"
	"github.com/acemq/acemq-flow/engine"
	"github.com/acemq/acemq-flow/engine/journal"
	"github.com/acemq/acemq-flow/internal/brokertest"
)

// TestStartIsIdempotentOnTheRunID: starting a run id that exists returns
// that run and publishes nothing, whatever its status and whatever the new
// payload; only StartAgain starts a finished run again, as its next
// replay, every step anew on the new payload, recorded in its timeline and
// as its input; a run in flight is never started again.
func TestStartIsIdempotentOnTheRunID(t *testing.T) {
	brokertest.Each(t, func(t *testing.T, h *brokertest.Harness) {
		fx := newFixture(t, h, engine.Config{})
		ef := newEffects()
		release := make(chan struct{})
		fx.register(dsl.Flow(fx.name,
			dsl.Step("validate", appendStep(ef, "validate")),
			dsl.Step("ship", func(ctx context.Context, o Order) (Order, error) {
				if o.ID == "slow" {
					<-release
				}
				return appendStep(ef, "ship")(ctx, o)
			})))
		fx.work()
		ctx := brokertest.Ctx(t)
		id := fx.name + "-order-42"

		first, err := fx.eng.Start(ctx, fx.name, Order{ID: "o-42", Amount: 1}, engine.RunID(id))
		require.NoError(t, err)
		require.False(t, first.Existing)
		fx.waitStatus(id, journal.Completed, 10*time.Second)

		again, err := fx.eng.Start(ctx, fx.name, Order{ID: "o-42", Amount: 999}, engine.RunID(id))
		require.NoError(t, err)
		require.True(t, again.Existing, "a second start returns the run")
		require.Equal(t, journal.Completed, again.Status)
		require.Equal(t, id, again.RunID)
		require.NoError(t, fx.eng.Flush(ctx))
		r, err := fx.eng.Journal().Run(ctx, id)
		require.NoError(t, err)
		require.JSONEq(t, `{"id":"o-42","amount":1,"digital":false,"Trail":null}`, string(r.Input), "its input is the first start's")
		require.Equal(t, []string{"start::started", "step:validate:completed", "step:ship:completed"}, fx.outcomes(id), "nothing rewritten")
		require.Equal(t, 1, ef.get(id, "validate"))

		restarted, err := fx.eng.Start(ctx, fx.name, Order{ID: "o-42", Amount: 7}, engine.RunID(id), engine.StartAgain())
		require.NoError(t, err)
		require.False(t, restarted.Existing)
		require.Equal(t, 1, restarted.Replays)
		require.Eventually(t, func() bool { return ef.get(id, "ship") == 2 }, 10*time.Second, 20*time.Millisecond, "every step ran anew")
		r = fx.waitStatus(id, journal.Completed, 10*time.Second)
		require.Equal(t, 2, ef.get(id, "validate"))
		require.Equal(t, 1, r.Replays)
		require.JSONEq(t, `{"id":"o-42","amount":7,"digital":false,"Trail":null}`, string(r.Input), "started again on the new payload")
		fx.waitOutcomes(id, []string{"start::started", "step:validate:completed", "step:ship:completed",
			"start::started again (replay 1)", "step:validate:completed", "step:ship:completed"})

		slow := fx.name + "-slow"
		_, err = fx.eng.Start(ctx, fx.name, Order{ID: "slow"}, engine.RunID(slow))
		require.NoError(t, err)
		require.NoError(t, fx.eng.Flush(ctx))
		fx.waitOutcomes(slow, []string{"start::started", "step:validate:completed"})
		_, err = fx.eng.Start(ctx, fx.name, Order{ID: "slow"}, engine.RunID(slow), engine.StartAgain())
		require.ErrorIs(t, err, engine.ErrRunInFlight)
		close(release)
		fx.waitStatus(slow, journal.Completed, 10*time.Second)
		require.Equal(t, 1, ef.get(slow, "validate"))
	})
}

// TestStartAgainTakesAFailedRunsMessageOut: a failed run started again is
// a run anew; the message it was given up with leaves the dead-letter
// queue rather than waiting there for a replay that would be refused.
func TestStartAgainTakesAFailedRunsMessageOut(t *testing.T) {
	brokertest.Each(t, func(t *testing.T, h *brokertest.Harness) {
		fx := newFixture(t, h, engine.Config{})
		ef := newEffects()
		var courier outage
		courier.down.Store(true)
		fx.register(dsl.Flow(fx.name, dsl.Step("ship", courier.step(ef, "ship")).Retry(broker.NoRetry())))
		fx.work()
		ctx := brokertest.Ctx(t)
		id := fx.name + "-failed"
		fx.start(Order{ID: "f"}, engine.RunID(id))
		fx.waitStatus(id, journal.Failed, 10*time.Second)
		h.WaitDepth(fx.name+".ship"+broker.DeadLetterSuffix, 1, 5*time.Second)
		courier.down.Store(false)
		_, err := fx.eng.Start(ctx, fx.name, Order{ID: "f"}, engine.RunID(id), engine.StartAgain())
		require.NoError(t, err)
		fx.waitStatus(id, journal.Completed, 10*time.Second)
		require.Zero(t, h.Depth(fx.name+".ship"+broker.DeadLetterSuffix))
	})
}

// Checked is a payload that says itself whether it is valid.
type Checked struct {
	ID string `json:"id"`
}

// Validate refuses a Checked without an id.
func (c Checked) Validate() error {
	if c.ID == "" {
		return errors.New("an order needs an id")
	}
	return nil
}

// TestStartAsksThePayloadToValidate: a payload type with a Validate method
// is asked before anything is published; JSON null is never a payload.
func TestStartAsksThePayloadToValidate(t *testing.T) {
	brokertest.Each(t, func(t *testing.T, h *brokertest.Harness) {
		fx := newFixture(t, h, engine.Config{})
		fx.register(dsl.Flow(fx.name, dsl.Step("a", func(_ context.Context, c Checked) (Checked, error) { return c, nil })))
		ctx := brokertest.Ctx(t)
		for name, p := range map[string]any{
			"empty object": []byte(`{}`),
			"null":         []byte(`null`),
			"zero value":   Checked{},
		} {
			_, err := fx.eng.Start(ctx, fx.name, p)
			require.ErrorIs(t, err, engine.ErrInvalidPayload, name)
		}
		_, err := fx.eng.Start(ctx, fx.name, []byte(`{}`))
		require.ErrorContains(t, err, "an order needs an id", "the payload's own reason")
		_, err = fx.eng.Start(ctx, fx.name, []byte(` null `))
		require.ErrorContains(t, err, "null")
		_, err = fx.eng.Start(ctx, fx.name, Checked{ID: "c-1"})
		require.NoError(t, err)
	})
}

// TestStartRetriedAfterItFailedStarts: a start whose first message did not
// reach the broker is journalled as not started; a caller retrying it under
// the same run id starts it then, rather than being handed the run that
// never began.
func TestStartRetriedAfterItFailedStarts(t *testing.T) {
	brokertest.Each(t, func(t *testing.T, h *brokertest.Harness) {
		fx := newFixture(t, h, engine.Config{})
		ef := newEffects()
		fx.register(dsl.Flow(fx.name, dsl.Step("a", appendStep(ef, "a"))))
		fx.work()
		ctx := brokertest.Ctx(t)
		id := fx.name + "-retried"
		now := time.Now()
		// What Start records when the broker did not confirm the first message.
		require.NoError(t, fx.journal.Record(ctx, []journal.Event{
			{RunID: id, Flow: fx.name, Kind: journal.KindStart, Outcome: "started", StartedAt: now, EndedAt: now,
				Status: journal.Running, RunStep: "a", Seq: journal.Seq(0, 0, 1, 0), Key: "start", Input: []byte(`{}`)},
			{RunID: id, Flow: fx.name, Kind: journal.KindStart, Outcome: "not started", StartedAt: now, EndedAt: now,
				Error: "connection lost before the publish was confirmed", Status: journal.Failed, RunStep: "a",
				Seq: journal.Seq(0, 0, 1, 1), Key: "start-failed/0"},
		}))
		res, err := fx.eng.Start(ctx, fx.name, Order{ID: "r"}, engine.RunID(id))
		require.NoError(t, err)
		require.False(t, res.Existing, "a retry of a start that failed is that start")
		require.NoError(t, fx.eng.Flush(ctx))
		r, err := fx.eng.Journal().Run(ctx, id)
		require.NoError(t, err)
		require.NotEqual(t, journal.Failed, r.Status, "no longer failed once retried")
		fx.waitStatus(id, journal.Completed, 10*time.Second)
		require.Equal(t, 1, ef.get(id, "a"))
		fx.waitOutcomes(id, []string{"start::started", "start::not started", "start::started (retried)", "step:a:completed"})
	})
}
