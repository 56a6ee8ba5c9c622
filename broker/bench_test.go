package broker_test

import (
	"context"
	"log/slog"
	"sync"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	amqp "github.com/rabbitmq/amqp091-go"
	"github.com/stretchr/testify/require"
	sdkmetric "go.opentelemetry.io/otel/sdk/metric"

	"github.com/acemq/acemq-flow/broker"
	"github.com/acemq/acemq-flow/internal/brokertest"
	"github.com/acemq/acemq-flow/internal/plainamqp"
	"github.com/acemq/acemq-flow/internal/testenv"
)

// The benchmarks compare the broker package with the fastest plain
// amqp091-go code (package internal/plainamqp) on the same RabbitMQ, at
// issue 14's load: 256-byte persistent messages on a quorum queue with 256
// publishes awaiting their confirm, consumed with prefetch 100 by one
// consumer acknowledging each. broker publishes from 256 goroutines each
// calling Publish, which returns once its message is confirmed; the plain
// side from one goroutine on one confirm-mode channel, keeping 256
// publishes unconfirmed (a sliding window). Each reports msg/s and the
// process's CPU (user+system) per message, and -benchmem its allocations
// per message.
//
//	ACEMQ_REQUIRE_SERVICES=1 go test -run '^$' -bench 'PublishConfirmed|ConsumeAcked' -benchtime 40000x -count 3 ./broker/

const (
	benchPublishers = 256
	benchPrefetch   = 100
)

var benchBody = make([]byte, 256)

func benchConn(b *testing.B) (*broker.Conn, string, string) {
	return benchConnConfig(b, broker.Config{Logger: slog.New(slog.DiscardHandler)})
}

func benchConnConfig(b *testing.B, cfg broker.Config) (*broker.Conn, string, string) {
	h := brokertest.New(b, testenv.RabbitURL(b), true)
	conn := h.Open(cfg)
	q := h.Queue("bench")
	require.NoError(b, conn.Declare(context.Background(), broker.ConsumerTopology(q)))
	return conn, h.URL, q
}

// cpu is the CPU time (user+system) the process has used so far.
func cpu() time.Duration {
	var ru syscall.Rusage
	_ = syscall.Getrusage(syscall.RUSAGE_SELF, &ru)
	return time.Duration(ru.Utime.Nano() + ru.Stime.Nano())
}

// measure times run, which handles b.N messages, and reports msg/s and the
// process's CPU µs per message; -benchmem adds allocations per message.
func measure(b *testing.B, run func()) {
	b.ReportAllocs()
	b.SetBytes(int64(len(benchBody)))
	b.ResetTimer()
	cpu0 := cpu()
	run()
	used := cpu() - cpu0
	b.StopTimer()
	b.ReportMetric(float64(b.N)/b.Elapsed().Seconds(), "msg/s")
	b.ReportMetric(float64(used.Microseconds())/float64(b.N), "cpu-us/msg")
}

// parallel runs n operations split across benchPublishers goroutines.
func parallel(b *testing.B, n int, op func(worker int) error) {
	var next atomic.Int64
	var wg sync.WaitGroup
	errs := make(chan error, benchPublishers)
	for w := range benchPublishers {
		wg.Go(func() {
			for next.Add(1) <= int64(n) {
				if err := op(w); err != nil {
					errs <- err
					return
				}
			}
		})
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		b.Fatal(err)
	}
}

func BenchmarkPublishConfirmed(b *testing.B) {
	b.Run("broker", func(b *testing.B) {
		conn, _, q := benchConn(b)
		ctx := context.Background()
		measure(b, func() {
			parallel(b, b.N, func(int) error { return conn.Publish(ctx, benchBody, broker.To(q)) })
		})
	})
	// The same with metrics recorded to an SDK MeterProvider, as a worker
	// with --metrics-addr records them: what the publish path's counters
	// and histograms cost.
	b.Run("broker+metrics", func(b *testing.B) {
		mp := sdkmetric.NewMeterProvider(sdkmetric.WithReader(sdkmetric.NewManualReader()))
		defer func() { _ = mp.Shutdown(context.Background()) }()
		conn, _, q := benchConnConfig(b, broker.Config{Logger: slog.New(slog.DiscardHandler), MeterProvider: mp})
		ctx := context.Background()
		measure(b, func() {
			parallel(b, b.N, func(int) error { return conn.Publish(ctx, benchBody, broker.To(q)) })
		})
	})
	// The fastest plain code: one confirm-mode channel, one goroutine,
	// 256 publishes unconfirmed. It sends no headers, no correlation id and
	// no timestamp: broker's envelope (the wire contract) is broker's work.
	b.Run("amqp091", func(b *testing.B) {
		_, url, q := benchConn(b)
		ac, err := amqp.Dial(url)
		require.NoError(b, err)
		defer ac.Close()
		ch, err := ac.Channel()
		require.NoError(b, err)
		require.NoError(b, ch.Confirm(false))
		measure(b, func() {
			require.NoError(b, plainamqp.Publish(context.Background(), ch, q, benchBody, b.N, benchPublishers))
		})
	})
}

// BenchmarkConsumeAcked consumes messages its side published (broker's
// carry the envelope, the plain side's none), acknowledging each one.
func BenchmarkConsumeAcked(b *testing.B) {
	b.Run("broker", func(b *testing.B) {
		conn, _, q := benchConn(b)
		ctx := context.Background()
		parallel(b, b.N, func(int) error { return conn.Publish(ctx, benchBody, broker.To(q)) })
		var handled atomic.Int64
		done := make(chan struct{})
		n := int64(b.N)
		var k *broker.Consumer
		measure(b, func() {
			var err error
			k, err = conn.Consume(ctx, q, func(context.Context, *broker.Message) broker.Ack {
				if handled.Add(1) == n {
					close(done)
				}
				return broker.Accept()
			}, broker.Prefetch(benchPrefetch), broker.WithRetry(broker.NoRetry()))
			require.NoError(b, err)
			<-done
		})
		require.NoError(b, k.Cancel(ctx))
	})
	b.Run("amqp091", func(b *testing.B) {
		_, url, q := benchConn(b)
		ac, err := amqp.Dial(url)
		require.NoError(b, err)
		defer ac.Close()
		ch, err := ac.Channel()
		require.NoError(b, err)
		require.NoError(b, ch.Confirm(false))
		require.NoError(b, plainamqp.Publish(context.Background(), ch, q, benchBody, b.N, benchPublishers))
		var handled atomic.Int64
		done := make(chan struct{})
		n := int64(b.N)
		var c *plainamqp.Consumer
		measure(b, func() {
			c, err = plainamqp.Consume(ac, q, benchPrefetch, func() {
				if handled.Add(1) == n {
					close(done)
				}
			})
			require.NoError(b, err)
			<-done
		})
		c.Stop()
	})
}
