package engine_test

import (
	"context"
	"errors"
	"sync"
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

// runsStarted is acemq.flow.runs.started for flow as reader last saw it.
func runsStarted(t *testing.T, reader *sdkmetric.ManualReader, flow string) int64 {
	return counted(t, reader, "acemq.flow.runs.started", "flow", flow)
}

// counted is the int64 counter name, summed over its series whose
// attribute key is value, as reader last saw it.
func counted(t *testing.T, reader *sdkmetric.ManualReader, name, key, value string) int64 {
	t.Helper()
	var rm metricdata.ResourceMetrics
	require.NoError(t, reader.Collect(context.Background(), &rm))
	var n int64
	for _, sm := range rm.ScopeMetrics {
		for _, m := range sm.Metrics {
			sum, ok := m.Data.(metricdata.Sum[int64])
			if m.Name != name || !ok {
				continue
			}
			for _, dp := range sum.DataPoints {
				if v, _ := dp.Attributes.Value(attribute.Key(key)); v.AsString() == value {
					n += dp.Value
				}
			}
		}
	}
	return n
}

// TestRunsStartedAreCountedByTheWorker: acemq.flow.runs.started is counted
// by the worker whose first step takes a run up, not by the process that
// started it (another engine here, as `acemq-flow start` is): once per
// run, whether its first step is retried, it fails and is replayed, its
// first message comes twice, or the steps before the one it starts at were
// skipped.
func TestRunsStartedAreCountedByTheWorker(t *testing.T) {
	brokertest.Each(t, func(t *testing.T, h *brokertest.Harness) {
		workerMetrics := sdkmetric.NewManualReader()
		fx := newFixture(t, h, engine.Config{MeterProvider: sdkmetric.NewMeterProvider(sdkmetric.WithReader(workerMetrics))})
		var (
			mu       sync.Mutex
			attempts = map[string]int{}
			down     = true
		)
		first := func(ctx context.Context, o Order) (Order, error) {
			m, _ := broker.Handling(ctx)
			mu.Lock()
			defer mu.Unlock()
			attempts[m.RunID]++
			switch {
			case o.ID == "flaky" && attempts[m.RunID] == 1:
				return o, errors.New("try again")
			case o.ID == "broken" && down:
				return o, broker.Fatal(errors.New("broken"))
			}
			return o, nil
		}
		def := dsl.Flow(fx.name,
			// One delivery at a time: a run started after another is taken
			// up after it.
			dsl.Step("first", first).When(`payload.amount > 0`).Retry(broker.Constant(3, 0)).Concurrency(1),
			dsl.Step("second", appendStep(newEffects(), "second")))
		fx.register(def)
		fx.work()

		// The runs are started by an engine of their own, with no worker.
		starterMetrics := sdkmetric.NewManualReader()
		starter, err := engine.New(engine.Config{Conn: h.Open(broker.Config{}), Journal: fx.journal,
			MeterProvider: sdkmetric.NewMeterProvider(sdkmetric.WithReader(starterMetrics))})
		require.NoError(t, err)
		t.Cleanup(func() { require.NoError(t, starter.Close(context.Background())) })
		require.NoError(t, starter.Register(def))
		ctx := brokertest.Ctx(t)
		start := func(o Order, opts ...engine.StartOption) string {
			res, err := starter.Start(ctx, fx.name, o, opts...)
			require.NoError(t, err)
			return res.RunID
		}

		ids := []string{start(Order{ID: "plain", Amount: 1}), start(Order{ID: "flaky", Amount: 1}),
			start(Order{ID: "skips-first", Amount: 0})}
		twice := start(Order{ID: "twice", Amount: 1})
		for _, id := range append(ids, twice) {
			fx.waitStatus(id, journal.Completed, 10*time.Second)
		}
		// The same run's first message again: its first step ran, so it is
		// not taken up again. The run started next is taken up after it.
		require.Equal(t, twice, start(Order{ID: "twice", Amount: 1}, engine.RunID(twice)))
		broken := start(Order{ID: "broken", Amount: 1})
		fx.waitStatus(broken, journal.Failed, 10*time.Second)
		fx.h.WaitDepth(fx.name+".first"+broker.DeadLetterSuffix, 1, 5*time.Second)
		mu.Lock()
		down = false
		mu.Unlock()
		_, err = fx.eng.Replay(ctx, broken)
		require.NoError(t, err)
		fx.waitStatus(broken, journal.Completed, 10*time.Second)

		require.Equal(t, int64(5), runsStarted(t, workerMetrics, fx.name), "five runs, each counted once by the worker")
		fi, err := fx.eng.Flow(fx.name)
		require.NoError(t, err)
		require.Equal(t, int64(5), counted(t, workerMetrics, "acemq.flow.runs.started", "version", fi.Version), "under the version the worker serves")
		require.Zero(t, runsStarted(t, starterMetrics, fx.name), "the process that only started them counts none")
		mu.Lock()
		require.Equal(t, 2, attempts[ids[1]], "flaky's first step was retried")
		require.Equal(t, 2, attempts[broken], "broken's first step ran again when replayed")
		require.Zero(t, attempts[ids[2]], "skips-first started at its second step")
		require.Equal(t, 1, attempts[twice], "twice's first step ran once")
		mu.Unlock()
	})
}
