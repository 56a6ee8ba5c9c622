package broker_test

import (
	"context"
	"log/slog"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	amqp "github.com/rabbitmq/amqp091-go"
	"github.com/stretchr/testify/require"

	"github.com/acemq/acemq-flow/broker"
	"github.com/acemq/acemq-flow/internal/brokertest"
	"github.com/acemq/acemq-flow/internal/testenv"
)

// The benchmarks compare the broker package with a plain amqp091-go loop
// doing the same work on the same RabbitMQ and the same queue type (a
// quorum queue): 256-byte messages, confirmed publishing from 16
// goroutines, and acknowledged consuming with prefetch 20.

const (
	benchPublishers = 16
	benchPrefetch   = 20
)

var benchBody = make([]byte, 256)

func benchConn(b *testing.B) (*broker.Conn, string, string) {
	h := brokertest.New(b, testenv.RabbitURL(b), true)
	conn := h.Open(broker.Config{Logger: slog.New(slog.DiscardHandler)})
	q := h.Queue("bench")
	require.NoError(b, conn.Declare(context.Background(), broker.ConsumerTopology(q)))
	return conn, h.URL, q
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
		b.SetBytes(int64(len(benchBody)))
		b.ResetTimer()
		parallel(b, b.N, func(int) error { return conn.Publish(ctx, benchBody, broker.To(q)) })
		b.StopTimer()
		b.ReportMetric(float64(b.N)/b.Elapsed().Seconds(), "msg/s")
	})
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
		b.SetBytes(int64(len(benchBody)))
		b.ResetTimer()
		parallel(b, b.N, func(w int) error {
			dc, err := chans[w].PublishWithDeferredConfirmWithContext(ctx, "", q, false, false, amqp.Publishing{
				DeliveryMode: amqp.Persistent, ContentType: "application/octet-stream", MessageId: broker.NewID(),
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
		b.StopTimer()
		b.ReportMetric(float64(b.N)/b.Elapsed().Seconds(), "msg/s")
	})
}

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
		b.SetBytes(int64(len(benchBody)))
		b.ResetTimer()
		k, err := conn.Consume(context.Background(), q, func(context.Context, *broker.Message) broker.Ack {
			if handled.Add(1) == n {
				close(done)
			}
			return broker.Accept()
		}, broker.Prefetch(benchPrefetch), broker.WithRetry(broker.NoRetry()))
		require.NoError(b, err)
		<-done
		b.StopTimer()
		b.ReportMetric(float64(b.N)/b.Elapsed().Seconds(), "msg/s")
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
		b.SetBytes(int64(len(benchBody)))
		b.ResetTimer()
		deliveries, err := ch.Consume(q, "", false, false, false, false, nil)
		require.NoError(b, err)
		for i := 0; i < b.N; i++ {
			d := <-deliveries
			require.NoError(b, d.Ack(false))
		}
		b.StopTimer()
		b.ReportMetric(float64(b.N)/b.Elapsed().Seconds(), "msg/s")
	})
}

type benchError string

func (e benchError) Error() string { return string(e) }

const errNack = benchError("publish not confirmed")
