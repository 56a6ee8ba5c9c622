package patterns_test

import (
	"context"
	"fmt"
	"slices"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/acemq/acemq-flow/broker"
	"github.com/acemq/acemq-flow/internal/brokertest"
	"github.com/acemq/acemq-flow/internal/testenv"
	"github.com/acemq/acemq-flow/patterns"
)

// BenchmarkRequestReply measures round trips on RabbitMQ with 1 and 16
// concurrent callers on one Requester: p50 latency and requests/s.
func BenchmarkRequestReply(b *testing.B) {
	for _, callers := range []int{1, 16} {
		b.Run(fmt.Sprintf("callers=%d", callers), func(b *testing.B) {
			ctx := context.Background()
			h := brokertest.New(b, testenv.RabbitURL(b), true)
			conn := h.Open(broker.Config{})
			q := h.Queue("bench-request")
			responder, err := patterns.Serve(ctx, conn, q, func(_ context.Context, m *broker.Message) (any, error) {
				return m.Body, nil
			}, broker.Concurrency(16), broker.Prefetch(64))
			require.NoError(b, err)
			defer responder.Close(ctx) // before its queue is deleted
			r, err := patterns.NewRequester(ctx, h.Open(broker.Config{}), q, 10*time.Second)
			require.NoError(b, err)
			defer r.Close(ctx)

			latencies := make([][]time.Duration, callers)
			errs := make([]error, callers)
			b.ResetTimer()
			start := time.Now()
			var wg sync.WaitGroup
			for c := range callers {
				n := b.N / callers
				if c < b.N%callers {
					n++
				}
				wg.Go(func() {
					for range n {
						t0 := time.Now()
						if _, err := r.CallMessage(ctx, []byte("ping")); err != nil {
							errs[c] = err
							return
						}
						latencies[c] = append(latencies[c], time.Since(t0))
					}
				})
			}
			wg.Wait()
			elapsed := time.Since(start)
			b.StopTimer()
			for _, err := range errs {
				require.NoError(b, err)
			}
			all := slices.Concat(latencies...)
			slices.Sort(all)
			b.ReportMetric(float64(all[len(all)/2].Microseconds())/1000, "p50-ms")
			b.ReportMetric(float64(all[len(all)*99/100].Microseconds())/1000, "p99-ms")
			b.ReportMetric(float64(b.N)/elapsed.Seconds(), "req/s")
		})
	}
}
