package engine_test

import (
	"context"
	"errors"
	"sync/atomic"
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

// The bulk replay benchmark: b.N failed runs, their messages in one
// dead-letter queue on RabbitMQ, replayed by their ids in one ReplayBulk
// (what the dashboard's group replay does). It reports runs/s; the
// setup (starting and failing the runs) is not timed.
//
//	ACEMQ_REQUIRE_SERVICES=1 go test -run '^$' -bench ReplayBulkRabbit -benchtime 1000x -count 3 ./engine/
func BenchmarkReplayBulkRabbit(b *testing.B) {
	h := brokertest.New(b, testenv.RabbitURL(b), true)
	conn := h.Open(broker.Config{})
	j, err := journal.NewMemory(0)
	require.NoError(b, err)
	eng, err := engine.New(engine.Config{Conn: conn, Journal: j})
	require.NoError(b, err)
	b.Cleanup(func() { require.NoError(b, eng.Close(context.Background())) })
	name := testenv.Name(b, "flow")
	var down atomic.Bool
	down.Store(true)
	require.NoError(b, eng.Register(dsl.Flow(name, dsl.Step("ship", func(_ context.Context, o Order) (Order, error) {
		if down.Load() {
			return o, errors.New("courier down")
		}
		return o, nil
	}).Retry(broker.NoRetry()))))
	info, err := eng.Flow(name)
	require.NoError(b, err)
	queue := info.Steps[0].Queue
	for _, q := range []string{queue, info.CompensateQueue} {
		h.DeleteLater(q, q+broker.DeadLetterSuffix, q+broker.ParkedSuffix)
	}
	h.DeleteExchangeLater(name)
	ctx := b.Context()
	w, err := eng.StartWorker(ctx)
	require.NoError(b, err)
	b.Cleanup(func() { require.NoError(b, w.Close(context.Background())) })
	ids := make([]string, b.N)
	for i := range ids {
		res, err := eng.Start(ctx, name, Order{ID: "o"})
		require.NoError(b, err)
		ids[i] = res.RunID
	}
	h.WaitDepth(queue+broker.DeadLetterSuffix, b.N, time.Minute)
	down.Store(false)

	b.ResetTimer()
	start := time.Now()
	res, err := eng.ReplayBulk(ctx, engine.BulkReplay{RunIDs: ids})
	elapsed := time.Since(start)
	b.StopTimer()
	require.NoError(b, err)
	require.Len(b, res.Replayed, b.N)
	b.ReportMetric(float64(b.N)/elapsed.Seconds(), "runs/s")
}
