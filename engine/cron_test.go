package engine_test

import (
	"context"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/acemq/acemq-flow/dsl"
	"github.com/acemq/acemq-flow/engine"
	"github.com/acemq/acemq-flow/engine/journal"
	"github.com/acemq/acemq-flow/internal/brokertest"
	"github.com/acemq/acemq-flow/internal/testenv"
	"github.com/acemq/acemq-flow/persistence"
)

// countingGuard counts the ticks each worker's guard won.
type countingGuard struct {
	engine.CronGuard
	mu   sync.Mutex
	wins map[time.Time]int
}

func (g *countingGuard) Fire(ctx context.Context, flow, trigger string, tick time.Time) (bool, error) {
	won, err := g.CronGuard.Fire(ctx, flow, trigger, tick)
	if won {
		g.mu.Lock()
		g.wins[tick.Truncate(time.Second)]++
		g.mu.Unlock()
	}
	return won, err
}

func tickFlow(name string, ef *effects, trigger *dsl.CronDef) *dsl.FlowDef {
	return dsl.Flow(name, dsl.Step("tick", appendStep(ef, "tick")), trigger)
}

func everySecond() *dsl.CronDef {
	return dsl.Cron("* * * * * *", func(_ context.Context, tick time.Time) (Order, error) {
		return Order{ID: tick.Format(time.RFC3339)}, nil
	})
}

// TestCronThreeWorkersOneRunPerTick: three workers run the same cron
// trigger, every second; each tick is claimed by one of them and starts
// one run, done once.
func TestCronThreeWorkersOneRunPerTick(t *testing.T) {
	t.Parallel()
	h := brokertest.New(t, "memory://"+testenv.Name(t, "broker"), false)
	db, tables := testDatabase(t)
	sqlGuard, err := persistence.NewSQLCronGuard(db, tables)
	require.NoError(t, err)
	guard := &countingGuard{CronGuard: sqlGuard, wins: map[time.Time]int{}}
	shared, err := journal.NewMemory(0)
	require.NoError(t, err)
	ef := newEffects()
	var name string
	for i := range 3 {
		fx := newFixture(t, h, engine.Config{Journal: shared, CronGuard: guard})
		if i == 0 {
			name = fx.name
		}
		fx.name = name
		fx.register(tickFlow(name, ef, everySecond()))
		fx.work()
	}
	ctx := brokertest.Ctx(t)
	var runs []journal.Run
	require.Eventually(t, func() bool {
		runs, err = shared.Runs(ctx, journal.Query{Flow: name, Statuses: []journal.Status{journal.Completed}, Limit: 1000})
		return err == nil && len(runs) >= 10
	}, 20*time.Second, 50*time.Millisecond, "ten ticks ran")
	guard.mu.Lock()
	defer guard.mu.Unlock()
	for tick, n := range guard.wins {
		require.Equal(t, 1, n, "tick %s claimed once of three workers", tick)
	}
	for _, r := range runs {
		require.Equal(t, 1, ef.get(r.ID, "tick"), "run %s done once", r.ID)
		require.True(t, strings.HasPrefix(r.ID, "cron/"+name+"/"), r.ID)
	}
}

// TestCronMissedTicks: a worker starting after missed ticks runs the last
// of them (CatchUpLast), or skips them and says so in its next run's
// timeline (the default).
func TestCronMissedTicks(t *testing.T) {
	t.Parallel()
	h := brokertest.New(t, "memory://"+testenv.Name(t, "broker"), false)
	db, tables := testDatabase(t)
	guard, err := persistence.NewSQLCronGuard(db, tables)
	require.NoError(t, err)
	ef := newEffects()
	ctx := brokertest.Ctx(t)
	for _, policy := range []string{"last", "skip"} {
		fx := newFixture(t, h, engine.Config{CronGuard: guard})
		trigger := everySecond()
		if policy == "last" {
			trigger = trigger.CatchUpLast()
		}
		// The trigger last fired 30 s ago: 29 ticks were missed.
		long := time.Now().Add(-30 * time.Second).Truncate(time.Second)
		won, err := guard.Fire(ctx, fx.name, "* * * * * *", long)
		require.NoError(t, err)
		require.True(t, won)
		fx.register(tickFlow(fx.name, ef, trigger))
		fx.work()
		var first journal.Event
		require.Eventually(t, func() bool {
			runs, err := fx.eng.Journal().Runs(ctx, journal.Query{Flow: fx.name, Limit: 100})
			if err != nil || len(runs) == 0 {
				return false
			}
			oldest := runs[len(runs)-1]
			tl, err := fx.eng.Journal().Timeline(ctx, oldest.ID)
			if err != nil || len(tl) == 0 {
				return false
			}
			first = tl[0]
			return true
		}, 10*time.Second, 50*time.Millisecond)
		switch policy {
		case "last":
			require.Contains(t, first.Outcome, "caught up: the last of")
		case "skip":
			require.Contains(t, first.Outcome, "missed ticks skipped")
		}
	}
}

// TestCronAloneLocks: without a database, one worker runs the triggers
// (CronAlone); a second one asking is refused.
func TestCronAloneLocks(t *testing.T) {
	brokertest.Each(t, func(t *testing.T, h *brokertest.Harness) { cronAloneLocks(t, h) })
}

func cronAloneLocks(t *testing.T, h *brokertest.Harness) {
	ef := newEffects()
	first := newFixture(t, h, engine.Config{CronAlone: true})
	first.register(tickFlow(first.name, ef, everySecond()))
	first.work()
	second := newFixture(t, h, engine.Config{CronAlone: true})
	second.name = first.name
	second.register(tickFlow(first.name, ef, everySecond()))
	_, err := second.eng.StartWorker(brokertest.Ctx(t))
	require.ErrorIs(t, err, engine.ErrCronLocked)
	h.DeleteLater(first.name + ".cron-lock")
	require.Eventually(t, func() bool {
		runs, _ := first.eng.Journal().Runs(context.Background(), journal.Query{Flow: first.name, Statuses: []journal.Status{journal.Completed}})
		return len(runs) >= 2
	}, 10*time.Second, 50*time.Millisecond, "the locked worker fires")
}
