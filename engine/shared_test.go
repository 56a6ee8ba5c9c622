package engine_test

import (
	"fmt"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/acemq/acemq-flow/broker"
	"github.com/acemq/acemq-flow/dsl"
	"github.com/acemq/acemq-flow/engine"
	"github.com/acemq/acemq-flow/engine/journal"
	"github.com/acemq/acemq-flow/internal/brokertest"
	"github.com/acemq/acemq-flow/persistence"
)

// TestTwoWorkersShareOneDatabase: two workers, each with its own
// connection, journal writer and store instance over one database, work
// the same flow; every run is journalled once, each step once, with no
// timeline entry twice, and each step's work done once.
func TestTwoWorkersShareOneDatabase(t *testing.T) {
	brokertest.OnRabbit(t, func(t *testing.T, h *brokertest.Harness) {
		const runs = 100
		ef := newEffects()
		name, fxs := sharedEngines(t, h, 2, func(name string) *dsl.FlowDef {
			return dsl.Flow(name, dsl.Step("a", appendStep(ef, "a")), dsl.Step("b", appendStep(ef, "b")), dsl.Step("c", appendStep(ef, "c")))
		})
		engines := []*engine.Engine{fxs[0].eng, fxs[1].eng}
		ctx := brokertest.Ctx(t)
		ids := make([]string, runs)
		for i := range ids {
			res, err := engines[i%2].Start(ctx, name, Order{ID: fmt.Sprint(i)})
			require.NoError(t, err)
			ids[i] = res.RunID
		}
		j := engines[0].Journal()
		require.Eventually(t, func() bool {
			done, err := j.Runs(ctx, journal.Query{Flow: name, Statuses: []journal.Status{journal.Completed}, Limit: runs})
			return err == nil && len(done) == runs
		}, 30*time.Second, 50*time.Millisecond, "every run completes")
		for _, e := range engines {
			require.NoError(t, e.Flush(ctx))
		}
		for _, id := range ids {
			require.Eventually(t, func() bool {
				tl, err := j.Timeline(ctx, id)
				return err == nil && len(tl) == 4
			}, 5*time.Second, 20*time.Millisecond, "run %s: a start and three steps, none twice", id)
			tl, err := j.Timeline(ctx, id)
			require.NoError(t, err)
			var got []string
			for _, e := range tl {
				got = append(got, string(e.Kind)+":"+e.Step+":"+e.Outcome)
			}
			require.Equal(t, []string{"start::started", "step:a:completed", "step:b:completed", "step:c:completed"}, got, "run %s", id)
			for _, s := range []string{"a", "b", "c"} {
				require.Equal(t, 1, ef.get(id, s), "run %s step %s", id, s)
			}
		}
		h.WaitDepth(name+".a"+broker.DeadLetterSuffix, 0, time.Second)
	})
}

// sharedEngines is n engines, each with its own connection, journal and
// store over one database, working f (built for the name they share).
func sharedEngines(t *testing.T, h *brokertest.Harness, n int, f func(name string) *dsl.FlowDef) (string, []*fixture) {
	db, tables := testDatabase(t)
	var name string
	var fxs []*fixture
	for i := range n {
		j, err := persistence.NewSQLJournal(db, persistence.SQLJournalConfig{Tables: tables})
		require.NoError(t, err)
		store, err := persistence.NewSQLIdempotencyStore(db, persistence.SQLIdempotencyStoreConfig{Tables: tables})
		require.NoError(t, err)
		fx := newFixture(t, h, engine.Config{Journal: j, Store: store})
		if i == 0 {
			name = fx.name
		}
		fx.name = name
		fx.register(f(name))
		fx.work()
		fxs = append(fxs, fx)
	}
	return name, fxs
}
