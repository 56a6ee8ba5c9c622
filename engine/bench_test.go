package engine_test

import (
	"context"
	"fmt"
	"log/slog"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	amqp "github.com/rabbitmq/amqp091-go"
	"github.com/stretchr/testify/require"

	"github.com/acemq/acemq-flow/broker"
	"github.com/acemq/acemq-flow/dsl"
	"github.com/acemq/acemq-flow/engine"
	"github.com/acemq/acemq-flow/engine/journal"
	"github.com/acemq/acemq-flow/internal/brokertest"
	"github.com/acemq/acemq-flow/internal/testenv"
	"github.com/acemq/acemq-flow/persistence"
)

// The flow benchmark: b.N runs through a 3-step flow on RabbitMQ (journal
// and idempotency store in memory), and, in the same run, b.N messages
// through a plain amqp091-go consume-republish-ack chain over three quorum
// queues with the same guarantees (persistent, mandatory, publisher
// confirms, ack after the confirm) and the same concurrency: 8 handlers
// per queue, prefetch 20, runs started from 16 goroutines. Target: the
// engine at 0.80 of the chain or better. Both report runs/s, the latency of
// a run from its start to its last step (p50, p99) and the process's CPU
// time per step.

const (
	benchStarters    = 16
	benchConcurrency = 8
	benchPrefetch    = 20
)

// BenchPayload is a run's payload: 256 bytes of it, and when it started.
type BenchPayload struct {
	Started time.Time `json:"started"`
	Pad     string    `json:"pad"`
}

var benchPad = strings.Repeat("x", 200)

func BenchmarkFlowRabbit(b *testing.B) {
	url := testenv.RabbitURL(b)
	b.Run("engine", func(b *testing.B) { benchEngine(b, url, nil) })
	// The same with the run journal on PostgreSQL (issue 11: at least 0.7
	// of the in-memory journal's runs/s).
	b.Run("engine-pg-journal", func(b *testing.B) {
		db, tables := testDatabase(b)
		j, err := persistence.NewSQLJournal(db, persistence.SQLJournalConfig{Tables: tables})
		require.NoError(b, err)
		benchEngine(b, url, j)
	})
	b.Run("plain", func(b *testing.B) { benchPlain(b, url, false) })
	// The same chain carrying the envelope every AceMQ pipeline message
	// carries (docs/wire.md): first-seen, attempt, run id, causation,
	// route and position. RabbitMQ's cost per message grows with its
	// headers, so this is what a hand-written chain that speaks the wire
	// costs.
	b.Run("plain-enveloped", func(b *testing.B) { benchPlain(b, url, true) })
}

// latencies collects run latencies and reports their percentiles.
type latencies struct {
	mu sync.Mutex
	d  []time.Duration
}

func (l *latencies) add(d time.Duration) {
	l.mu.Lock()
	l.d = append(l.d, d)
	l.mu.Unlock()
}

func (l *latencies) report(b *testing.B) {
	l.mu.Lock()
	defer l.mu.Unlock()
	slices.Sort(l.d)
	if len(l.d) == 0 {
		return
	}
	at := func(p float64) time.Duration { return l.d[min(len(l.d)-1, int(p*float64(len(l.d))))] }
	b.ReportMetric(float64(at(0.50).Microseconds())/1000, "p50-ms")
	b.ReportMetric(float64(at(0.99).Microseconds())/1000, "p99-ms")
}

// cpu is this process's user+system CPU time so far.
func cpu() time.Duration {
	var ru syscall.Rusage
	_ = syscall.Getrusage(syscall.RUSAGE_SELF, &ru)
	return time.Duration(ru.Utime.Nano() + ru.Stime.Nano())
}

func benchReport(b *testing.B, start time.Time, cpu0 time.Duration, lat *latencies) {
	elapsed := time.Since(start)
	b.ReportMetric(float64(b.N)/elapsed.Seconds(), "runs/s")
	b.ReportMetric(float64((cpu()-cpu0).Microseconds())/float64(3*b.N), "cpu-us/step")
	lat.report(b)
}

// feed calls start n times from benchStarters goroutines.
func feed(b *testing.B, n int, start func(i int) error) {
	var next atomic.Int64
	var wg sync.WaitGroup
	for range benchStarters {
		wg.Go(func() {
			for {
				i := next.Add(1)
				if i > int64(n) {
					return
				}
				if err := start(int(i)); err != nil {
					b.Error(err)
					return
				}
			}
		})
	}
	wg.Wait()
}

func benchEngine(b *testing.B, url string, j journal.Journal) {
	h := brokertest.New(b, url, true)
	conn := h.Open(broker.Config{Logger: slog.New(slog.DiscardHandler)})
	eng, err := engine.New(engine.Config{Conn: conn, Concurrency: benchConcurrency, Journal: j})
	require.NoError(b, err)
	defer eng.Close(context.Background())
	name := testenv.Name(b, "bench")
	var lat latencies
	done := make(chan struct{}, 1024)
	pass := func(_ context.Context, p BenchPayload) (BenchPayload, error) { return p, nil }
	f := dsl.Flow(name,
		dsl.Step("validate", pass).Prefetch(benchPrefetch),
		dsl.Step("charge", pass).Prefetch(benchPrefetch),
		dsl.Step("ship", func(_ context.Context, p BenchPayload) (BenchPayload, error) {
			lat.add(time.Since(p.Started))
			done <- struct{}{}
			return p, nil
		}).Prefetch(benchPrefetch))
	require.NoError(b, eng.Register(f))
	for _, s := range []string{"validate", "charge", "ship", "compensate"} {
		q := name + "." + s
		h.DeleteLater(q, q+broker.DeadLetterSuffix, q+broker.ParkedSuffix)
	}
	h.DeleteExchangeLater(name)
	w, err := eng.StartWorker(context.Background())
	require.NoError(b, err)
	defer w.Close(context.Background())
	ctx := context.Background()
	b.ResetTimer()
	start, cpu0 := time.Now(), cpu()
	go feed(b, b.N, func(int) error {
		_, err := eng.Start(ctx, name, BenchPayload{Started: time.Now(), Pad: benchPad})
		return err
	})
	for range b.N {
		<-done
	}
	benchReport(b, start, cpu0, &lat)
}

// envelope is the header table of a pipeline message at position pos of
// the bench's three-step route.
func envelope(runID, causedBy string, pos int64, firstSeen int64) amqp.Table {
	h := amqp.Table{
		"x-acemq-first-seen": firstSeen, "x-acemq-attempt": int64(1), "x-acemq-run-id": runID,
		"x-acemq-route": []any{"validate", "charge", "ship"}, "x-acemq-route-position": pos,
	}
	if causedBy != "" {
		h["x-acemq-causation-id"] = causedBy
	}
	return h
}

func benchPlain(b *testing.B, url string, enveloped bool) {
	h := brokertest.New(b, url, true)
	queues := []string{h.Queue("plain1"), h.Queue("plain2"), h.Queue("plain3")}
	for _, q := range queues {
		h.Declare(q)
	}
	ac, err := amqp.Dial(url)
	require.NoError(b, err)
	defer ac.Close()
	var lat latencies
	done := make(chan struct{}, 1024)
	ctx := context.Background()
	for i, q := range queues {
		cch, err := ac.Channel()
		require.NoError(b, err)
		require.NoError(b, cch.Qos(benchPrefetch, 0, false))
		deliveries, err := cch.Consume(q, "", false, false, false, false, nil)
		require.NoError(b, err)
		for range benchConcurrency {
			pch, err := ac.Channel()
			require.NoError(b, err)
			require.NoError(b, pch.Confirm(false))
			go func() {
				for d := range deliveries {
					if i == len(queues)-1 {
						var p BenchPayload
						if err := jsonUnmarshal(d.Body, &p); err == nil {
							lat.add(time.Since(p.Started))
						}
						_ = d.Ack(false)
						done <- struct{}{}
						continue
					}
					headers := d.Headers
					if enveloped {
						first, _ := headers["x-acemq-first-seen"].(int64)
						run, _ := headers["x-acemq-run-id"].(string)
						headers = envelope(run, d.MessageId, int64(i+1), first)
					}
					conf, err := pch.PublishWithDeferredConfirmWithContext(ctx, "", queues[i+1], true, false, amqp.Publishing{
						DeliveryMode: amqp.Persistent, ContentType: d.ContentType, MessageId: broker.NewID(), Body: d.Body,
						Headers: headers, CorrelationId: d.CorrelationId, Timestamp: time.Now(),
					})
					if err == nil && conf.Wait() {
						_ = d.Ack(false)
					} else {
						_ = d.Nack(false, true)
					}
				}
			}()
		}
	}
	pubs := make(chan *amqp.Channel, benchStarters)
	for range benchStarters {
		ch, err := ac.Channel()
		require.NoError(b, err)
		require.NoError(b, ch.Confirm(false))
		pubs <- ch
	}
	b.ResetTimer()
	start, cpu0 := time.Now(), cpu()
	go feed(b, b.N, func(int) error {
		ch := <-pubs
		defer func() { pubs <- ch }()
		body, err := jsonMarshal(BenchPayload{Started: time.Now(), Pad: benchPad})
		if err != nil {
			return err
		}
		msg := amqp.Publishing{
			DeliveryMode: amqp.Persistent, ContentType: "application/json", MessageId: broker.NewID(), Body: body, Timestamp: time.Now(),
		}
		if enveloped {
			msg.CorrelationId = msg.MessageId
			msg.Headers = envelope(broker.NewID(), "", 0, time.Now().UnixMilli())
		}
		conf, err := ch.PublishWithDeferredConfirmWithContext(ctx, "", queues[0], true, false, msg)
		if err != nil {
			return err
		}
		if !conf.Wait() {
			return fmt.Errorf("start not confirmed")
		}
		return nil
	})
	for range b.N {
		<-done
	}
	benchReport(b, start, cpu0, &lat)
}
