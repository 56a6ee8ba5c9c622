package engine_test

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
	"go.opentelemetry.io/otel/attribute"
	sdkmetric "go.opentelemetry.io/otel/sdk/metric"
	"go.opentelemetry.io/otel/sdk/metric/metricdata"

	"github.com/acemq/acemq-flow/broker"
	"github.com/acemq/acemq-flow/dsl"
	"github.com/acemq/acemq-flow/engine"
	"github.com/acemq/acemq-flow/engine/journal"
	"github.com/acemq/acemq-flow/internal/brokertest"
)

// runDurations is the histogram name (acemq.pipeline.run.duration by
// pipeline, acemq.flow.run.duration by flow) of flow as reader sees it now:
// how many runs left the flow and their durations' sum, in seconds.
func runDurations(t *testing.T, reader *sdkmetric.ManualReader, name, label, flow string) (uint64, float64) {
	t.Helper()
	var rm metricdata.ResourceMetrics
	require.NoError(t, reader.Collect(context.Background(), &rm))
	for _, sm := range rm.ScopeMetrics {
		for _, m := range sm.Metrics {
			h, ok := m.Data.(metricdata.Histogram[float64])
			if m.Name != name || !ok {
				continue
			}
			var n uint64
			var sum float64
			for _, dp := range h.DataPoints {
				if v, _ := dp.Attributes.Value(attribute.Key(label)); v.AsString() == flow {
					n, sum = n+dp.Count, sum+dp.Sum
				}
			}
			return n, sum
		}
	}
	return 0, 0
}

// TestReplayedRunDurationIsTheReplays: a run that failed, waited in its
// dead-letter queue and was replayed has its acemq.flow.run.duration
// measured from its replay (as the journal recorded it), on the steps
// after the replayed one too, not from when it was first seen; the
// family's acemq.pipeline.run.duration stays since x-acemq-first-seen.
func TestReplayedRunDurationIsTheReplays(t *testing.T) {
	brokertest.Each(t, func(t *testing.T, h *brokertest.Harness) {
		reader := sdkmetric.NewManualReader()
		fx := newFixture(t, h, engine.Config{MeterProvider: sdkmetric.NewMeterProvider(sdkmetric.WithReader(reader))})
		ef := newEffects()
		fx.register(dsl.Flow(fx.name,
			dsl.Step("charge", func(ctx context.Context, o Order) (Order, error) {
				m, _ := broker.Handling(ctx)
				if ef.add(m.RunID, "charge") == 1 {
					return o, broker.Fatal(errors.New("card declined"))
				}
				return o, nil
			}),
			dsl.Step("ship", appendStep(ef, "ship"))))
		fx.work()
		run := fx.start(Order{ID: "o-1"})
		fx.waitStatus(run, journal.Failed, 15*time.Second)
		h.WaitDepth(fx.name+".charge"+broker.DeadLetterSuffix, 1, 5*time.Second)
		flow := func() (uint64, float64) { return runDurations(t, reader, "acemq.flow.run.duration", "flow", fx.name) }
		pipeline := func() (uint64, float64) {
			return runDurations(t, reader, "acemq.pipeline.run.duration", "pipeline", fx.name)
		}
		n, failedSum := flow()
		require.Equal(t, uint64(1), n, "the failed run left the flow")
		_, failedAge := pipeline()

		const waited = 1500 * time.Millisecond
		time.Sleep(waited)
		_, err := fx.eng.Replay(brokertest.Ctx(t), run)
		require.NoError(t, err)
		fx.waitStatus(run, journal.Completed, 15*time.Second)
		require.Eventually(t, func() bool { n, _ := flow(); return n == 2 }, 5*time.Second, 10*time.Millisecond)
		_, sum := flow()
		replayed := sum - failedSum
		require.Positive(t, replayed)
		require.Less(t, replayed, waited.Seconds(), "measured from the replay, not from when the run was first seen")
		_, age := pipeline()
		require.GreaterOrEqual(t, age-failedAge, waited.Seconds(), "the pipeline's duration is since first seen, as the family has it")
	})
}
