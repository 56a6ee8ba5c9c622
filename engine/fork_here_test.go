package engine_test

import (
	"context"
	"fmt"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
	sdkmetric "go.opentelemetry.io/otel/sdk/metric"

	"github.com/acemq/acemq-flow/broker"
	"github.com/acemq/acemq-flow/dsl"
	"github.com/acemq/acemq-flow/engine"
	"github.com/acemq/acemq-flow/engine/journal"
	"github.com/acemq/acemq-flow/internal/brokertest"
)

// consumed is messaging.client.consumed.messages for queue as reader
// last saw it.
func consumed(t *testing.T, reader *sdkmetric.ManualReader, queue string) int64 {
	return counted(t, reader, "messaging.client.consumed.messages", "messaging.destination.name", queue)
}

// TestBranchesSettleWhereTheirLastStepRan: a worker that serves a fork
// settles each branch where the branch's last step ran: the fork's queue
// takes the run in and then only the arrival that fires the join, yet
// every item is recorded as arrived, each ran once, and the join gets
// every output in item order.
func TestBranchesSettleWhereTheirLastStepRan(t *testing.T) {
	brokertest.Each(t, func(t *testing.T, h *brokertest.Harness) {
		reader := sdkmetric.NewManualReader()
		fx := newFixtureOn(t, h, broker.Config{MeterProvider: sdkmetric.NewMeterProvider(sdkmetric.WithReader(reader))}, engine.Config{})
		ef := newEffects()
		joined := make(chan []int, 2)
		const items = 30
		fx.register(dsl.Flow(fx.name,
			dsl.ForEach("each",
				func(_ context.Context, n int) ([]int, error) {
					out := make([]int, n)
					for i := range out {
						out[i] = i
					}
					return out, nil
				},
				dsl.Step("twice", func(ctx context.Context, i int) (int, error) {
					m, _ := broker.Handling(ctx)
					ef.add(m.RunID, fmt.Sprint("twice-", i))
					return 2 * i, nil
				}),
				func(_ context.Context, _ int, outs []int) ([]int, error) {
					joined <- outs
					return outs, nil
				}).Concurrency(5)))
		w := fx.work()
		run := fx.start(items)
		var outs []int
		select {
		case outs = <-joined:
		case <-time.After(20 * time.Second):
			t.Fatalf("no join; timeline %v", fx.outcomes(run))
		}
		fx.waitStatus(run, journal.Completed, 10*time.Second)
		require.Len(t, outs, items)
		arrived := map[string]bool{}
		for _, o := range fx.outcomes(run) {
			arrived[o] = true
		}
		for i := range items {
			require.Equal(t, 2*i, outs[i], "item %d", i)
			require.Equal(t, 1, ef.get(run, fmt.Sprint("twice-", i)), "item %d ran once", i)
			require.True(t, arrived[fmt.Sprintf("step:each:item %d arrived", i)], "item %d recorded as arrived", i)
		}
		info, err := fx.eng.Flow(fx.name)
		require.NoError(t, err)
		// A delivery is counted once settled, which may come after the
		// run's end is recorded.
		counts := func() [2]int64 {
			return [2]int64{consumed(t, reader, info.Steps[0].Queue), consumed(t, reader, info.Steps[1].Queue)}
		}
		want := [2]int64{2, items}
		require.Eventually(t, func() bool { return counts() == want }, 10*time.Second, 10*time.Millisecond,
			"the fork's queue takes the run in and the arrival that fires the join, nothing else; one delivery per item: %v", counts())
		require.NoError(t, w.Close(brokertest.Ctx(t)))
		require.Equal(t, want, counts(), "nothing more once the worker has stopped")
	})
}
