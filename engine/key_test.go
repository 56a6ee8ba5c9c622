package engine_test

import (
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/acemq/acemq-flow/dsl"
	"github.com/acemq/acemq-flow/engine"
	"github.com/acemq/acemq-flow/engine/journal"
	"github.com/acemq/acemq-flow/internal/brokertest"
)

// TestBusinessKey: a run of a flow with a dsl.Key records the key its input
// gives, and the journal finds the run by it; a run of a flow without one
// records none.
func TestBusinessKey(t *testing.T) {
	brokertest.Each(t, func(t *testing.T, h *brokertest.Harness) {
		ctx := brokertest.Ctx(t)
		fx := newFixture(t, h, engine.Config{})
		ef := newEffects()
		fx.register(dsl.Flow(fx.name, dsl.Step("a", appendStep(ef, "a")), dsl.Key(`payload.id`)))
		fx.work()
		ada, bob := fx.start(Order{ID: "order-ada"}), fx.start(Order{ID: "order-bob"})
		r := fx.waitStatus(ada, journal.Completed, 10*time.Second)
		require.Equal(t, "order-ada", r.BusinessKey)
		fx.waitStatus(bob, journal.Completed, 10*time.Second)
		runs, err := fx.journal.Runs(ctx, journal.Query{Flow: fx.name, BusinessKey: "order-bob"})
		require.NoError(t, err)
		require.Len(t, runs, 1)
		require.Equal(t, bob, runs[0].ID)
		runs, err = fx.journal.Runs(ctx, journal.Query{Flow: fx.name, IDPrefix: ada[:8]})
		require.NoError(t, err)
		require.Equal(t, []string{ada}, []string{runs[0].ID})

		plain := newFixture(t, h, engine.Config{})
		plain.register(dsl.Flow(plain.name, dsl.Step("a", appendStep(ef, "a"))))
		plain.work()
		r = plain.waitStatus(plain.start(Order{ID: "x"}), journal.Completed, 10*time.Second)
		require.Empty(t, r.BusinessKey)
	})
}
