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

// TestReplayBulkLimitCountsMatchedRuns: the limit is on the runs Where
// accepts, not on the runs read: with the newest failed run declined,
// --limit 1 still replays one run (the newest that matches), and runs
// that failed a moment ago are replayed although their message may still
// be on its way to the dead-letter queue.
func TestReplayBulkLimitCountsMatchedRuns(t *testing.T) {
	brokertest.Each(t, func(t *testing.T, h *brokertest.Harness) {
		fx := newFixture(t, h, engine.Config{})
		ef := newEffects()
		var courier outage
		courier.down.Store(true)
		fx.register(dsl.Flow(fx.name, dsl.Step("ship", courier.step(ef, "ship")).Retry(broker.NoRetry())))
		fx.work()
		ctx := brokertest.Ctx(t)
		var ids []string
		for i, amount := range []int{500, 600, 5, 6, 7} { // the newest three are small
			ids = append(ids, fx.start(Order{ID: fmt.Sprint(i), Amount: amount}))
			fx.waitStatus(ids[i], journal.Failed, 10*time.Second)
		}
		courier.down.Store(false)

		dry, err := fx.eng.ReplayBulk(ctx, engine.BulkReplay{Flow: fx.name, Where: `payload.amount > 100`, Limit: 1, DryRun: true})
		require.NoError(t, err)
		require.Equal(t, []string{ids[1]}, dry.Replayed, "the newest run that matches")
		require.Equal(t, 1, dry.Matched)
		require.Equal(t, 3, dry.Skipped, "the three newer small runs were read and declined")
		require.Equal(t, 4, dry.Selected)

		var total int
		got, err := fx.eng.ReplayBulk(ctx, engine.BulkReplay{Flow: fx.name, Where: `payload.amount > 100`, Limit: 2,
			Selected: func(r engine.BulkResult) { total = r.Matched }})
		require.NoError(t, err)
		require.Equal(t, 2, total, "the selection is known before anything moves")
		require.ElementsMatch(t, ids[:2], got.Replayed)
		require.Empty(t, got.NotFound)
		for _, id := range ids[:2] {
			fx.waitStatus(id, journal.Completed, 10*time.Second)
			require.Equal(t, 1, ef.get(id, "ship"))
		}
		for _, id := range ids[2:] {
			r, err := fx.eng.Journal().Run(ctx, id)
			require.NoError(t, err)
			require.Equal(t, journal.Failed, r.Status, "declined runs stay failed")
		}
	})
}

// TestReplayBulkChecksWhereFirst: a condition is compiled against the
// flow's payload type before anything is read: a misspelt field and a
// result that is not a bool are errors naming the column, a condition on
// payload without a flow is refused, an unknown flow is ErrUnknownFlow;
// nothing is replayed by any of them.
func TestReplayBulkChecksWhereFirst(t *testing.T) {
	t.Parallel()
	fx := newFixture(t, brokertest.New(t, "memory://"+testenv.Name(t, "broker"), false), engine.Config{})
	var courier outage
	courier.down.Store(true)
	fx.register(dsl.Flow(fx.name, dsl.Step("ship", courier.step(newEffects(), "ship")).Retry(broker.NoRetry())))
	fx.work()
	id := fx.start(Order{ID: "1", Amount: 500})
	fx.waitStatus(id, journal.Failed, 10*time.Second)
	ctx := brokertest.Ctx(t)
	for where, want := range map[string]string{
		`payload.amountz > 100`:                 `"payload.amountz > 100": type engine_test.Order has no field amountz (column 9)`,
		`payload.amount + 1`:                    `"payload.amount + 1" gives int, want a bool (column 16)`,
		`run.stepp == "ship"`:                   `has no field stepp (column 5)`,
		`payload.amount > "1"`:                  `mismatched types int and string`,
		`payload.amount >`:                      `unexpected token EOF (column 16)`,
		`run.step == "ship" && payload.digital`: ``,
	} {
		res, err := fx.eng.ReplayBulk(ctx, engine.BulkReplay{Flow: fx.name, Where: where, DryRun: true})
		if want == "" {
			require.NoError(t, err, where)
			require.Equal(t, []string{}, res.Replayed, "not digital")
			continue
		}
		require.ErrorIs(t, err, engine.ErrInvalidConfig, where)
		require.ErrorContains(t, err, want, where)
		require.Zero(t, res.Selected, "nothing read")
	}
	_, err := fx.eng.ReplayBulk(ctx, engine.BulkReplay{Where: `payload.amount > 100`})
	require.ErrorIs(t, err, engine.ErrInvalidConfig)
	require.ErrorContains(t, err, "give the flow")
	_, err = fx.eng.ReplayBulk(ctx, engine.BulkReplay{Flow: "nosuch", DryRun: true})
	require.ErrorIs(t, err, engine.ErrUnknownFlow)
	_, err = fx.eng.ReplayBulk(ctx, engine.BulkReplay{Flow: fx.name, Limit: -1})
	require.ErrorIs(t, err, engine.ErrInvalidConfig)

	res, err := fx.eng.ReplayBulk(ctx, engine.BulkReplay{Where: `run.step == "ship" && run.attempt == 1`, DryRun: true})
	require.NoError(t, err, "a condition on run alone needs no flow")
	require.Equal(t, []string{id}, res.Replayed)
}
