package engine_test

import (
	"context"
	"testing"

	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/stretchr/testify/require"

	"github.com/acemq/acemq-flow/internal/benchmark"
	"github.com/acemq/acemq-flow/internal/testenv"
)

// The flow benchmark: b.N runs through a 3-step flow on RabbitMQ (journal
// and idempotency store in memory), and, in the same run, b.N messages
// through a plain amqp091-go consume-republish-ack chain over three quorum
// queues with the same guarantees (persistent, mandatory, publisher
// confirms, ack after the confirm) and the same concurrency: 8 handlers
// per queue, prefetch 20, runs started from 16 goroutines, at most 256
// runs under way (so that latency does not grow with b.N). Target: the
// engine at 0.80 of the chain or better. Both report runs/s, the latency of
// a run from its start to its last step (p50, p99) and the process's CPU
// time per step. The measurements are internal/benchmark's, which
// `acemq-flow bench` prints too.
//
//	ACEMQ_REQUIRE_SERVICES=1 go test -run '^$' -bench FlowRabbit -benchtime 8000x -count 3 ./engine/

func BenchmarkFlowRabbit(b *testing.B) {
	url := testenv.RabbitURL(b)
	cfg := func(b *testing.B) benchmark.Config {
		return benchmark.Config{URL: url, N: b.N}
	}
	b.Run("engine", func(b *testing.B) {
		reportFlow(b, func(ctx context.Context) (benchmark.Measurement, error) {
			return benchmark.FlowEngine(ctx, cfg(b), benchmark.InMemory)
		})
	})
	// The same with the run journal on PostgreSQL (issue 11: at least 0.7
	// of the in-memory journal's runs/s), and with the idempotency store
	// there too, as `acemq-flow worker --database-url` keeps them (issue
	// 25).
	for name, stores := range map[string]benchmark.Stores{"engine-pg-journal": benchmark.JournalOnPostgres, "engine-pg": benchmark.AllOnPostgres} {
		b.Run(name, func(b *testing.B) {
			db, err := pgxpool.New(b.Context(), testenv.DatabaseURL(b))
			require.NoError(b, err)
			b.Cleanup(db.Close)
			reportFlow(b, func(ctx context.Context) (benchmark.Measurement, error) {
				c := cfg(b)
				c.DB = db
				return benchmark.FlowEngine(ctx, c, stores)
			})
		})
	}
	b.Run("plain", func(b *testing.B) {
		reportFlow(b, func(ctx context.Context) (benchmark.Measurement, error) {
			return benchmark.FlowChain(ctx, cfg(b), false)
		})
	})
	// The same chain carrying the envelope every AceMQ pipeline message
	// carries (docs/wire.md): first-seen, attempt, run id, causation,
	// route and position. RabbitMQ's cost per message grows with its
	// headers, so this is what a hand-written chain that speaks the wire
	// costs.
	b.Run("plain-enveloped", func(b *testing.B) {
		reportFlow(b, func(ctx context.Context) (benchmark.Measurement, error) {
			return benchmark.FlowChain(ctx, cfg(b), true)
		})
	})
}

// reportFlow runs one measurement of b.N runs and reports runs/s, the CPU per
// step and the latency percentiles; ns/op is the measured time alone,
// without the setup.
func reportFlow(b *testing.B, measure func(context.Context) (benchmark.Measurement, error)) {
	m, err := measure(b.Context())
	require.NoError(b, err)
	b.ReportMetric(float64(m.Elapsed.Nanoseconds())/float64(b.N), "ns/op")
	b.ReportMetric(m.Rate(), "runs/s")
	b.ReportMetric(m.CPUPerMessage(), "cpu-us/step")
	b.ReportMetric(benchmark.Millis(m.Percentile(0.50)), "p50-ms")
	b.ReportMetric(benchmark.Millis(m.Percentile(0.99)), "p99-ms")
}
