package patterns_test

import (
	"context"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/acemq/acemq-flow/broker"
	"github.com/acemq/acemq-flow/internal/brokertest"
	"github.com/acemq/acemq-flow/internal/testenv"
	"github.com/acemq/acemq-flow/patterns"
)

// BenchmarkReplay measures messages moved per second from a dead-letter
// queue back to its queue on RabbitMQ, 5,000 messages a pass.
func BenchmarkReplay(b *testing.B) {
	const perPass = 5000
	ctx := context.Background()
	h := brokertest.New(b, testenv.RabbitURL(b), true)
	conn := h.Open(broker.Config{})
	q := h.Queue("bench-replay")
	require.NoError(b, conn.Declare(ctx, broker.ConsumerTopology(q)))
	var moved int
	var elapsed time.Duration
	for b.Loop() {
		b.StopTimer()
		_, err := conn.Transport().Purge(ctx, q)
		require.NoError(b, err)
		replayBenchSeed(b, conn, q, perPass)
		b.StartTimer()
		start := time.Now()
		res, err := patterns.Replay(ctx, conn, q+broker.DeadLetterSuffix)
		elapsed += time.Since(start)
		require.NoError(b, err)
		require.Equal(b, perPass, res.Moved)
		moved += res.Moved
	}
	b.ReportMetric(float64(moved)/elapsed.Seconds(), "msgs/s")
}

// replayBenchSeed puts n dead letters of q on q.dlq, many at a time.
func replayBenchSeed(b *testing.B, conn *broker.Conn, q string, n int) {
	ctx := context.Background()
	const workers = 32
	errs := make([]error, workers)
	var wg sync.WaitGroup
	for w := range workers {
		wg.Go(func() {
			for i := w; i < n; i += workers {
				out, err := conn.Prepare(ctx, map[string]int{"n": i}, broker.To(q+broker.DeadLetterSuffix), broker.Mandatory())
				if err == nil {
					out.Message.Headers[broker.HeaderError] = "boom"
					out.Message.Headers[broker.HeaderQueue] = q
					err = conn.Send(ctx, out)
				}
				if err != nil {
					errs[w] = err
					return
				}
			}
		})
	}
	wg.Wait()
	for _, err := range errs {
		require.NoError(b, err)
	}
}
