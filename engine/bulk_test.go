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
)

// TestReplayBulk: failed runs replayed together, chosen by a condition on
// their payload, with a dry run first, a limit, and one interrupted half
// way: every replayed run completes once, the others stay failed with
// their message where it was; nothing is lost or doubled.
func TestReplayBulk(t *testing.T) {
	brokertest.Each(t, func(t *testing.T, h *brokertest.Harness) {
		fx := newFixture(t, h, engine.Config{})
		ef := newEffects()
		var courier outage
		courier.down.Store(true)
		fx.register(dsl.Flow(fx.name, dsl.Step("ship", courier.step(ef, "ship")).Retry(broker.NoRetry())))
		fx.work()
		ctx := brokertest.Ctx(t)
		var big, small []string
		for i := range 8 {
			amount := 5
			if i%2 == 0 {
				amount = 500
			}
			id := fx.start(Order{ID: fmt.Sprint(i), Amount: amount})
			if amount > 100 {
				big = append(big, id)
			} else {
				small = append(small, id)
			}
		}
		for _, id := range append(append([]string{}, big...), small...) {
			fx.waitStatus(id, journal.Failed, 10*time.Second)
		}
		courier.down.Store(false)
		dlq := fx.name + ".ship" + broker.DeadLetterSuffix
		// A failure is journaled before its message's move to the
		// dead-letter queue is confirmed: a bulk replay reads the queue.
		h.WaitDepth(dlq, 8, 5*time.Second)

		dry, err := fx.eng.ReplayBulk(ctx, engine.BulkReplay{Flow: fx.name, Where: `payload.amount > 100`, DryRun: true})
		require.NoError(t, err)
		require.Equal(t, 8, dry.Selected)
		require.Equal(t, 4, dry.Skipped)
		require.ElementsMatch(t, big, dry.Replayed)
		require.Equal(t, 8, h.Depth(dlq), "a dry run moves nothing")

		// Interrupted after two: those two complete, the other two big ones
		// stay failed, their messages still in the dead-letter queue.
		ictx, cancel := context.WithCancel(ctx)
		got, err := fx.eng.ReplayBulk(ictx, engine.BulkReplay{Flow: fx.name, Where: `payload.amount > 100 && run.step == "ship"`,
			Progress: func(r engine.BulkResult) {
				if len(r.Replayed) == 2 {
					cancel()
				}
			}})
		require.NoError(t, err)
		require.True(t, got.Interrupted)
		require.Len(t, got.Replayed, 2)
		for _, id := range got.Replayed {
			fx.waitStatus(id, journal.Completed, 10*time.Second)
		}
		h.WaitDepth(dlq, 6, 5*time.Second)

		// The rest, at most 3 of the small ones, a few a second.
		limited, err := fx.eng.ReplayBulk(ctx, engine.BulkReplay{Flow: fx.name, Where: `payload.amount < 100`, Limit: 8, Rate: 20})
		require.NoError(t, err)
		require.ElementsMatch(t, small, limited.Replayed)
		all, err := fx.eng.ReplayBulk(ctx, engine.BulkReplay{Flow: fx.name})
		require.NoError(t, err)
		require.Len(t, all.Replayed, 2, "the two big ones left by the interrupted pass")
		for _, id := range append(append([]string{}, big...), small...) {
			fx.waitStatus(id, journal.Completed, 10*time.Second)
			require.Equal(t, 1, ef.get(id, "ship"), "run %s shipped once", id)
		}
		h.WaitDepth(dlq, 0, 5*time.Second)

		_, err = fx.eng.ReplayBulk(ctx, engine.BulkReplay{Where: `payload.amount >`})
		require.ErrorIs(t, err, engine.ErrInvalidConfig)
	})
}
