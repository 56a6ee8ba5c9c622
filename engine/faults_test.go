package engine_test

import (
	"context"
	"fmt"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/acemq/acemq-flow/broker"
	"github.com/acemq/acemq-flow/broker/rabbitmq"
	"github.com/acemq/acemq-flow/dsl"
	"github.com/acemq/acemq-flow/engine"
	"github.com/acemq/acemq-flow/engine/journal"
	"github.com/acemq/acemq-flow/internal/brokertest"
	"github.com/acemq/acemq-flow/internal/testenv"
)

// TestStepRedeliveredMidStepIsNotDoneTwice: the worker's connection is
// closed by the broker while a step runs, so its delivery comes back while
// the step is still working; the step's work is done once, the run
// completes, and the next step runs once.
func TestStepRedeliveredMidStepIsNotDoneTwice(t *testing.T) {
	brokertest.OnRabbit(t, func(t *testing.T, h *brokertest.Harness) {
		fx := newFixture(t, h, engine.Config{})
		ef := newEffects()
		running := make(chan struct{}, 4)
		release := make(chan struct{})
		fx.register(dsl.Flow(fx.name,
			dsl.Step("charge", func(ctx context.Context, o Order) (Order, error) {
				m, _ := broker.Handling(ctx)
				ef.add(m.RunID, "charge")
				running <- struct{}{}
				<-release
				return o, nil
			}),
			dsl.Step("ship", appendStep(ef, "ship"))))
		fx.work()
		run := fx.start(Order{ID: "o-9"})
		brokertest.Next(t, running, 10*time.Second)
		rt, ok := fx.conn.Transport().(*rabbitmq.Transport)
		require.True(t, ok)
		testenv.CloseConnection(t, rt.LocalAddr())
		// Give the broker time to hand the delivery back to the reconnected
		// worker: it must find the step in progress, not run it.
		brokertest.Nothing(t, running, 2*time.Second)
		close(release)
		fx.waitStatus(run, journal.Completed, 20*time.Second)
		require.Equal(t, 1, ef.get(run, "charge"), "the step's work was done once")
		require.Equal(t, 1, ef.get(run, "ship"))
	})
}

// TestDrainLosesNothing: a worker closed with runs in flight lets its
// running steps finish, puts the rest back, and a worker started after it
// finishes every run, each step done once.
func TestDrainLosesNothing(t *testing.T) {
	brokertest.Each(t, func(t *testing.T, h *brokertest.Harness) {
		const runs = 200
		fx := newFixture(t, h, engine.Config{})
		ef := newEffects()
		slow := func(name string) func(context.Context, Order) (Order, error) {
			step := appendStep(ef, name)
			return func(ctx context.Context, o Order) (Order, error) {
				time.Sleep(5 * time.Millisecond) // a step that takes a moment, so that some are in flight
				return step(ctx, o)
			}
		}
		fx.register(dsl.Flow(fx.name, dsl.Step("a", slow("a")), dsl.Step("b", slow("b")), dsl.Step("c", slow("c"))))
		ids := make([]string, runs)
		for i := range ids {
			ids[i] = fx.start(Order{ID: fmt.Sprint(i)})
		}
		first, err := fx.eng.StartWorker(brokertest.Ctx(t))
		require.NoError(t, err)
		// Let some runs get going, then drain mid-flight.
		require.Eventually(t, func() bool {
			n := 0
			for _, id := range ids {
				n += ef.get(id, "b")
			}
			return n > 10
		}, 10*time.Second, 5*time.Millisecond)
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer cancel()
		require.NoError(t, first.Close(ctx))
		inFlight := 0
		for _, id := range ids {
			if ef.get(id, "c") == 0 {
				inFlight++
			}
		}
		require.Positive(t, inFlight, "the drain happened with runs in flight")
		fx.work()
		for _, id := range ids {
			fx.waitStatus(id, journal.Completed, 30*time.Second)
		}
		for _, id := range ids {
			for _, s := range []string{"a", "b", "c"} {
				require.Equal(t, 1, ef.get(id, s), "run %s step %s", id, s)
			}
		}
		t.Logf("%d of %d runs were in flight at the drain", inFlight, runs)
	})
}
