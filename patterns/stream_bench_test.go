package patterns_test

import (
	"context"
	"fmt"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/acemq/acemq-flow/broker"
	"github.com/acemq/acemq-flow/internal/brokertest"
	"github.com/acemq/acemq-flow/internal/testenv"
	"github.com/acemq/acemq-flow/patterns"
)

// BenchmarkStreamRead measures messages read per second from First on
// RabbitMQ with prefetch 10 (the default) and 500.
func BenchmarkStreamRead(b *testing.B) {
	const total = 20000
	ctx := context.Background()
	h := brokertest.New(b, testenv.RabbitURL(b), true)
	conn := h.Open(broker.Config{})
	stream := testenv.Name(b, "bench-stream")
	h.DeleteLater(stream)
	require.NoError(b, patterns.DeclareStream(ctx, conn, stream, patterns.StreamRetention{MaxAge: time.Hour}))
	var wg sync.WaitGroup
	for w := range 32 {
		wg.Go(func() {
			for i := w; i < total; i += 32 {
				if err := conn.Publish(ctx, map[string]int{"n": i}, broker.To(stream)); err != nil {
					b.Error(err)
					return
				}
			}
		})
	}
	wg.Wait()

	for _, prefetch := range []int{10, 500} {
		b.Run(fmt.Sprintf("prefetch=%d", prefetch), func(b *testing.B) {
			var read int
			var elapsed time.Duration
			for b.Loop() {
				var n atomic.Int64
				done := make(chan struct{})
				start := time.Now()
				k, err := patterns.ReadStream(ctx, conn, stream, patterns.StreamFirst(), func(context.Context, *broker.Message) broker.Ack {
					if n.Add(1) == total {
						close(done)
					}
					return broker.Accept()
				}, broker.Prefetch(prefetch))
				require.NoError(b, err)
				<-done
				elapsed += time.Since(start)
				read += total
				require.NoError(b, k.Cancel(ctx))
			}
			b.ReportMetric(float64(read)/elapsed.Seconds(), "msgs/s")
		})
	}
}
