package engine_test

import (
	"context"
	"errors"
	"strings"
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

// Scan is a payload larger than any header can carry: a frame is 131072
// bytes by default.
type Scan struct {
	ID    string `json:"id"`
	Pages string `json:"pages"`
}

// bigScanFlow is charge (compensable, returning a 200 KB result) and ship,
// which always fails: charge's compensation records the size of what it got.
func bigScanFlow(name string, ef *effects, got *int) *dsl.FlowDef {
	return dsl.Flow(name,
		dsl.Step("charge", func(ctx context.Context, s Scan) (Scan, error) {
			m, _ := broker.Handling(ctx)
			ef.add(m.RunID, "charge")
			s.Pages = strings.Repeat("p", 200_000)
			return s, nil
		}).Compensate(func(ctx context.Context, s Scan) error {
			m, _ := broker.Handling(ctx)
			*got = len(s.Pages)
			ef.add(m.RunID, "undo-charge")
			return nil
		}),
		dsl.Step("ship", func(context.Context, Scan) (Scan, error) {
			return Scan{}, broker.Fatal(errors.New("no courier"))
		}))
}

// TestLargeResultIsCompensated: a compensable step whose result is larger
// than a header can carry still passes the run on (what its compensation
// needs is kept in the journal), and when a later step is given up, the
// compensation gets the whole result.
func TestLargeResultIsCompensated(t *testing.T) {
	brokertest.Each(t, func(t *testing.T, h *brokertest.Harness) {
		fx := newFixture(t, h, engine.Config{})
		ef := newEffects()
		var got int
		fx.register(bigScanFlow(fx.name, ef, &got))
		fx.work()
		run := fx.start(Scan{ID: "s-1"})
		r := fx.waitStatus(run, journal.Compensated, 15*time.Second)
		require.Contains(t, r.Error, "no courier", "it failed where it should: at ship")
		require.Equal(t, 1, ef.get(run, "undo-charge"))
		require.Equal(t, 200_000, got, "the compensation got the whole result")
		fx.waitOutcomes(run, []string{"start::started", "step:charge:completed", "step:ship:failed", "compensation:charge:compensated"})
	})
}

// journalOnly hides every method of a journal but journal.Journal's: one
// that keeps no run data.
type journalOnly struct{ journal.Journal }

// TestEffectThenUnsendableHopIsCompensated: a step whose effect happened
// and whose hop the broker refuses (here a result too large for a header,
// with a journal that keeps no data) gives the run up and compensates that
// step's own effect too, instead of only failing.
func TestEffectThenUnsendableHopIsCompensated(t *testing.T) {
	brokertest.Each(t, func(t *testing.T, h *brokertest.Harness) {
		mem, err := journal.NewMemory(0)
		require.NoError(t, err)
		fx := newFixture(t, h, engine.Config{Journal: journalOnly{mem}})
		ef := newEffects()
		var got int
		fx.register(bigScanFlow(fx.name, ef, &got))
		fx.work()
		run := fx.start(Scan{ID: "s-2"})
		r := fx.waitStatus(run, journal.Compensated, 15*time.Second)
		require.Equal(t, "charge", r.Step, "given up at charge, whose hop could not go")
		require.Equal(t, 1, ef.get(run, "charge"))
		require.Equal(t, 1, ef.get(run, "undo-charge"), "the effect that happened was undone")
		require.Equal(t, 200_000, got)
		require.Zero(t, h.Depth(fx.name+".charge"+broker.DeadLetterSuffix))
	})
}

// TestLargeResultIsCompensatedOnADatabase: the same on the workers'
// database: the result is kept in the journal's run data, where any worker
// finds it.
func TestLargeResultIsCompensatedOnADatabase(t *testing.T) {
	brokertest.OnRabbit(t, func(t *testing.T, h *brokertest.Harness) {
		db, tables := testDatabase(t)
		j, err := persistence.NewSQLJournal(db, persistence.SQLJournalConfig{Tables: tables})
		require.NoError(t, err)
		store, err := persistence.NewSQLIdempotencyStore(db, persistence.SQLIdempotencyStoreConfig{Tables: tables})
		require.NoError(t, err)
		fx := newFixture(t, h, engine.Config{Journal: j, Store: store})
		ef := newEffects()
		var got int
		fx.register(bigScanFlow(fx.name, ef, &got))
		fx.work()
		run := fx.start(Scan{ID: "s-3"})
		fx.waitStatus(run, journal.Compensated, 15*time.Second)
		require.Equal(t, 200_000, got)
		kept, err := j.Data(brokertest.Ctx(t), run, "compensate/0/0/charge")
		require.NoError(t, err)
		require.Contains(t, string(kept), strings.Repeat("p", 1000), "kept in the journal's run data")
	})
}
