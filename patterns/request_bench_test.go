package patterns_test

import (
	"fmt"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/acemq/acemq-flow/internal/benchmark"
	"github.com/acemq/acemq-flow/internal/testenv"
)

// BenchmarkRequestReply measures round trips on RabbitMQ with 1 and 16
// concurrent callers on one Requester: p50 latency and requests/s. The
// responder and the requester are on connections of their own, as two
// services would be. The measurement is internal/benchmark's, which
// `acemq-flow bench` prints too.
func BenchmarkRequestReply(b *testing.B) {
	for _, callers := range []int{1, 16} {
		b.Run(fmt.Sprintf("callers=%d", callers), func(b *testing.B) {
			cfg := benchmark.Config{URL: testenv.RabbitURL(b), N: b.N}
			m, err := benchmark.RequestReply(b.Context(), cfg, callers)
			require.NoError(b, err)
			b.ReportMetric(float64(m.Elapsed.Nanoseconds())/float64(b.N), "ns/op")
			b.ReportMetric(benchmark.Millis(m.Percentile(0.50)), "p50-ms")
			b.ReportMetric(benchmark.Millis(m.Percentile(0.99)), "p99-ms")
			b.ReportMetric(m.Rate(), "req/s")
		})
	}
}
