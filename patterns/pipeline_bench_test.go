package patterns_test

import (
	"bytes"
	"context"
	"fmt"
	"sync"
	"testing"
	"time"

	amqp "github.com/rabbitmq/amqp091-go"

	"github.com/acemq/acemq-flow/broker"
	"github.com/acemq/acemq-flow/internal/testenv"
	"github.com/acemq/acemq-flow/patterns"
)

// pipelineBenchPayload is the 256-byte payload of the benchmark.
var pipelineBenchPayload = bytes.Repeat([]byte("x"), 256)

// BenchmarkPipelineRabbit runs b.N runs through a 3-step pipeline on
// RabbitMQ (one consumer per step), and, in the same run, b.N messages
// through a plain amqp091-go consume-republish-ack chain over three quorum
// queues with the same guarantees (publisher confirms, ack after the
// confirm). The target is the first at 80 % of the second or better.
func BenchmarkPipelineRabbit(b *testing.B) {
	url := testenv.RabbitURL(b)
	b.Run("acemq", func(b *testing.B) { pipelineBenchAcemq(b, url) })
	b.Run("plain", func(b *testing.B) { pipelineBenchPlain(b, url) })
}

func pipelineBenchAcemq(b *testing.B, url string) {
	ctx := context.Background()
	conn, err := broker.Config{Ladder: testenv.Name(b, "ladder"), Logger: testenv.Logger(b)}.Open(ctx, url)
	if err != nil {
		b.Fatal(err)
	}
	p, err := patterns.NewPipeline(testenv.Name(b, "pipeline"), "validate", "charge", "ship")
	if err != nil {
		b.Fatal(err)
	}
	defer pipelineBenchCleanup(b, conn, p)
	if err := conn.Declare(ctx, p.Topology()); err != nil {
		b.Fatal(err)
	}
	done := make(chan struct{}, 1024)
	for _, step := range p.Steps() {
		h, err := p.Follow(conn, func(_ context.Context, m *broker.Message) (any, error) {
			if step == "ship" {
				done <- struct{}{}
			}
			return m.Body, nil
		})
		if err != nil {
			b.Fatal(err)
		}
		if _, err := conn.Consume(ctx, p.QueueFor(step), h, broker.WithRetry(broker.NoRetry())); err != nil {
			b.Fatal(err)
		}
	}
	b.ResetTimer()
	start := time.Now()
	pipelineBenchFeed(b, b.N, func() error {
		_, err := p.Start(ctx, conn, pipelineBenchPayload)
		return err
	})
	for range b.N {
		<-done
	}
	b.ReportMetric(float64(b.N)/time.Since(start).Seconds(), "runs/s")
}

// pipelineBenchFeed calls start n times from 16 goroutines.
func pipelineBenchFeed(b *testing.B, n int, start func() error) {
	var wg sync.WaitGroup
	next := make(chan struct{}, n)
	for range n {
		next <- struct{}{}
	}
	close(next)
	for range 16 {
		wg.Go(func() {
			for range next {
				if err := start(); err != nil {
					b.Error(err)
					return
				}
			}
		})
	}
	wg.Wait()
}

func pipelineBenchCleanup(b *testing.B, conn *broker.Conn, p *patterns.Pipeline) {
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	_ = conn.Close(ctx)
	admin, err := broker.Config{Logger: testenv.Logger(b)}.Open(ctx, testenv.RabbitURL(b))
	if err != nil {
		b.Fatal(err)
	}
	defer admin.Close(ctx)
	for _, q := range p.Topology().Queues {
		_, _ = admin.Transport().DeleteQueue(ctx, q.Name)
	}
	_ = admin.Transport().DeleteExchange(ctx, p.Name())
	for _, q := range broker.LadderTopology(conn.Ladder()).Queues {
		_, _ = admin.Transport().DeleteQueue(ctx, q.Name)
	}
	_ = admin.Transport().DeleteExchange(ctx, conn.Ladder())
}

func pipelineBenchPlain(b *testing.B, url string) {
	ctx := context.Background()
	admin, err := broker.Config{Logger: testenv.Logger(b)}.Open(ctx, url)
	if err != nil {
		b.Fatal(err)
	}
	queues := []string{testenv.Name(b, "plain1"), testenv.Name(b, "plain2"), testenv.Name(b, "plain3")}
	defer func() {
		for _, q := range queues {
			for _, n := range []string{q, q + broker.DeadLetterSuffix, q + broker.ParkedSuffix} {
				_, _ = admin.Transport().DeleteQueue(ctx, n)
			}
		}
		_ = admin.Close(ctx)
	}()
	for _, q := range queues {
		if err := admin.Declare(ctx, broker.ConsumerTopology(q)); err != nil {
			b.Fatal(err)
		}
	}
	plain, err := amqp.Dial(url)
	if err != nil {
		b.Fatal(err)
	}
	defer plain.Close()
	done := make(chan struct{}, 1024)
	for i, q := range queues {
		ch, err := plain.Channel()
		if err != nil {
			b.Fatal(err)
		}
		if err := ch.Qos(broker.DefaultPrefetch, 0, false); err != nil {
			b.Fatal(err)
		}
		if err := ch.Confirm(false); err != nil {
			b.Fatal(err)
		}
		deliveries, err := ch.Consume(q, "", false, false, false, false, nil)
		if err != nil {
			b.Fatal(err)
		}
		go func() {
			for d := range deliveries {
				if i == len(queues)-1 {
					_ = d.Ack(false)
					done <- struct{}{}
					continue
				}
				conf, err := ch.PublishWithDeferredConfirmWithContext(ctx, "", queues[i+1], true, false, amqp.Publishing{
					DeliveryMode: amqp.Persistent, ContentType: d.ContentType, MessageId: d.MessageId, Body: d.Body,
				})
				if err == nil && conf.Wait() {
					_ = d.Ack(false)
				} else {
					_ = d.Nack(false, true)
				}
			}
		}()
	}
	pub, err := plain.Channel()
	if err != nil {
		b.Fatal(err)
	}
	if err := pub.Confirm(false); err != nil {
		b.Fatal(err)
	}
	var pubMu sync.Mutex
	b.ResetTimer()
	start := time.Now()
	pipelineBenchFeed(b, b.N, func() error {
		pubMu.Lock()
		conf, err := pub.PublishWithDeferredConfirmWithContext(ctx, "", queues[0], true, false, amqp.Publishing{
			DeliveryMode: amqp.Persistent, ContentType: "application/octet-stream", Body: pipelineBenchPayload,
		})
		pubMu.Unlock()
		if err != nil {
			return err
		}
		if !conf.Wait() {
			return fmt.Errorf("nacked")
		}
		return nil
	})
	for range b.N {
		<-done
	}
	b.ReportMetric(float64(b.N)/time.Since(start).Seconds(), "runs/s")
}
