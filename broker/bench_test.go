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
	"github.com/acemq/acemq-flow/internal/testenv"
)

// The benchmarks compare the broker package with plain amqp091-go doing the
// same work on the same RabbitMQ, at issue 14's load: 256-byte persistent
// messages on a quorum queue, published by 256 goroutines each waiting for
// its confirm (256 confirms in flight), and consumed with prefetch 100 by
// one consumer acknowledging each. Each reports msg/s and the process's CPU
// (user+system) per message, and -benchmem its allocations per message.
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
	// What broker sends, by hand: persistent, content type, message id,
	// timestamp, confirmed; one confirm-mode channel per goroutine, none
	// shared. broker also writes two headers (x-acemq-first-seen,
	// x-acemq-attempt) and a correlation id, which are its work, not the
	// baseline's.
	b.Run("amqp091", func(b *testing.B) {
		_, url, q := benchConn(b)
		ac, err := amqp.Dial(url)
		require.NoError(b, err)
		defer ac.Close()
		chans := make([]*amqp.Channel, benchPublishers)
		for i := range chans {
			ch, err := ac.Channel()
			require.NoError(b, err)
			require.NoError(b, ch.Confirm(false))
			chans[i] = ch
		}
		ctx := context.Background()
		measure(b, func() {
			parallel(b, b.N, func(w int) error {
				dc, err := chans[w].PublishWithDeferredConfirmWithContext(ctx, "", q, false, false, amqp.Publishing{
					DeliveryMode: amqp.Persistent, ContentType: broker.ContentTypeBytes, MessageId: broker.NewID(),
					Timestamp: time.Now(), Body: benchBody,
				})
				if err != nil {
					return err
				}
				if ok, err := dc.WaitContext(ctx); err != nil || !ok {
					return errNack
				}
				return nil
			})
		})
	})
}

// BenchmarkConsumeAcked consumes messages published through broker (so both
// sides read the same headers), acknowledging each one.
func BenchmarkConsumeAcked(b *testing.B) {
	fill := func(b *testing.B, conn *broker.Conn, q string) {
		ctx := context.Background()
		parallel(b, b.N, func(int) error { return conn.Publish(ctx, benchBody, broker.To(q)) })
	}
	b.Run("broker", func(b *testing.B) {
		conn, _, q := benchConn(b)
		fill(b, conn, q)
		var handled atomic.Int64
		done := make(chan struct{})
		n := int64(b.N)
		var k *broker.Consumer
		measure(b, func() {
			var err error
			k, err = conn.Consume(context.Background(), q, func(context.Context, *broker.Message) broker.Ack {
				if handled.Add(1) == n {
					close(done)
				}
				return broker.Accept()
			}, broker.Prefetch(benchPrefetch), broker.WithRetry(broker.NoRetry()))
			require.NoError(b, err)
			<-done
		})
		require.NoError(b, k.Cancel(context.Background()))
	})
	b.Run("amqp091", func(b *testing.B) {
		conn, url, q := benchConn(b)
		fill(b, conn, q)
		ac, err := amqp.Dial(url)
		require.NoError(b, err)
		defer ac.Close()
		ch, err := ac.Channel()
		require.NoError(b, err)
		require.NoError(b, ch.Qos(benchPrefetch, 0, false))
		measure(b, func() {
			deliveries, err := ch.Consume(q, "", false, false, false, false, nil)
			require.NoError(b, err)
			for range b.N {
				d := <-deliveries
				require.NoError(b, d.Ack(false))
			}
		})
	})
}

type benchError string

func (e benchError) Error() string { return string(e) }

const errNack = benchError("publish not confirmed")
