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
	"github.com/acemq/acemq-flow/patterns"
)

// orderingRun publishes perKey messages for each of keys keys,
// interleaved, then consumes them with concurrency, ordered by order (which
// wraps the handler and may add consume options), and returns
// the messages handled per second and how many messages overtook an
// earlier one of their key. It fails the test if two messages of one key
// ever ran at once.
func orderingRun(t *testing.T, h *brokertest.Harness, keys, perKey, concurrency int,
	order func(broker.Handler) (broker.Handler, []broker.ConsumeOption)) (rate float64, overtaken int) {
	ctx := brokertest.Ctx(t)
	q := h.Queue("ordered") // deleted after the connection closes
	conn := h.Open(broker.Config{})
	require.NoError(t, conn.Declare(ctx, broker.ConsumerTopology(q)))
	// Round by round, the keys of a round published at once: every key's
	// messages are in order on the queue and the keys are interleaved.
	for i := range perKey {
		var pub sync.WaitGroup
		errs := make(chan error, keys)
		for k := range keys {
			pub.Go(func() {
				errs <- conn.Publish(ctx, i, broker.To(q), broker.Header("x-order-id", fmt.Sprintf("order-%d", k)))
			})
		}
		pub.Wait()
		close(errs)
		for err := range errs {
			require.NoError(t, err)
		}
	}

	total := keys * perKey
	var (
		mu        sync.Mutex
		last      = map[string]int{}
		inFlight  = map[string]*atomic.Int32{}
		running   atomic.Int32
		overlap   atomic.Int32
		handled   atomic.Int32
		done      = make(chan struct{})
		violation = make(chan string, 1)
	)
	for k := range keys {
		inFlight[fmt.Sprintf("order-%d", k)] = &atomic.Int32{}
		last[fmt.Sprintf("order-%d", k)] = -1
	}
	handler, opts := order(func(_ context.Context, m *broker.Message) broker.Ack {
		key := m.Headers["x-order-id"].(string)
		if n := running.Add(1); n > 1 {
			overlap.Store(max(overlap.Load(), n))
		}
		if inFlight[key].Add(1) != 1 {
			select {
			case violation <- "two messages of " + key + " at once":
			default:
			}
		}
		var seq int
		_ = m.Decode(&seq)
		mu.Lock()
		if seq < last[key] {
			overtaken++
		}
		last[key] = max(last[key], seq)
		mu.Unlock()
		time.Sleep(5 * time.Millisecond) // the handler's own work: a database write, say
		inFlight[key].Add(-1)
		running.Add(-1)
		if handled.Add(1) == int32(total) {
			close(done)
		}
		return broker.Accept()
	})
	start := time.Now()
	_, err := conn.Consume(ctx, q, handler, append(opts, broker.Concurrency(concurrency), broker.Prefetch(4*concurrency),
		broker.WithRetry(broker.NoRetry()))...)
	require.NoError(t, err)
	select {
	case <-done:
	case v := <-violation:
		t.Fatal(v)
	case <-ctx.Done():
		t.Fatalf("handled %d of %d", handled.Load(), total)
	}
	took := time.Since(start)
	select {
	case v := <-violation:
		t.Fatal(v)
	default:
	}
	if concurrency > 1 {
		require.Greater(t, overlap.Load(), int32(1), "different keys ran concurrently")
	}
	rate = float64(total) / took.Seconds()
	mu.Lock()
	defer mu.Unlock()
	t.Logf("concurrency %d: %d messages in %s (%.0f/s), %d overtaken", concurrency, total, took.Round(time.Millisecond), rate, overtaken)
	return rate, overtaken
}

// TestOrderedPerKeyOrder: with concurrency 16 and 20 interleaved keys,
// 10,000 messages are handled one at a time per key and in queue order
// (OrderedBy), concurrently across keys, and the whole goes faster than with
// concurrency 1. Ordered, the handler wrapper, keeps one key to one handler
// at a time at any concurrency, and at concurrency 1 the queue's order.
func TestOrderedPerKeyOrder(t *testing.T) {
	brokertest.Each(t, func(t *testing.T, h *brokertest.Harness) {
		byConsumer := func(h broker.Handler) (broker.Handler, []broker.ConsumeOption) {
			return h, []broker.ConsumeOption{patterns.OrderedBy("x-order-id")}
		}
		byWrapper := func(h broker.Handler) (broker.Handler, []broker.ConsumeOption) {
			return patterns.Ordered("x-order-id", h), nil
		}
		concurrent, overtaken := orderingRun(t, h, 20, 500, 16, byConsumer)
		require.Zero(t, overtaken, "no message overtook an earlier one of its key")
		serial, overtaken := orderingRun(t, h, 20, 20, 1, byWrapper)
		require.Zero(t, overtaken, "with one worker the order is the queue's")
		require.Greater(t, concurrent, serial, "ordering per key keeps concurrency across keys")
		_, _ = orderingRun(t, h, 20, 25, 16, byWrapper) // fails on two of one key at once
	})
}

func TestOrderingKeys(t *testing.T) {
	t.Parallel()
	m := &broker.Message{
		Envelope: broker.Envelope{CorrelationID: "c-1"},
		Headers:  broker.Table{"x-tenant": "acme", "x-order-id": []byte("o-1"), "x-n": int64(7), "x-short": int32(3)},
	}
	require.Equal(t, "c-1", patterns.ByCorrelation()(m))
	require.Equal(t, "acme", patterns.ByHeader("x-tenant")(m))
	require.Equal(t, "o-1", patterns.ByHeader("x-order-id")(m))
	require.Equal(t, "7", patterns.ByHeader("x-n")(m))
	require.Equal(t, "3", patterns.ByHeader("x-short")(m))
	require.Empty(t, patterns.ByHeader("absent")(m))
}

// TestOrderedEmptyKeyIsUnordered: a message without a key does not wait
// for anything.
func TestOrderedEmptyKeyIsUnordered(t *testing.T) {
	t.Parallel()
	release := make(chan struct{})
	entered := make(chan struct{}, 2)
	h := patterns.Ordered(func(m *broker.Message) string { return m.Headers["k"].(string) },
		func(_ context.Context, m *broker.Message) broker.Ack {
			entered <- struct{}{}
			<-release
			return broker.Accept()
		})
	var wg sync.WaitGroup
	for range 2 {
		wg.Go(func() { h(t.Context(), &broker.Message{Headers: broker.Table{"k": ""}}) })
	}
	brokertest.Next(t, entered, 5*time.Second)
	brokertest.Next(t, entered, 5*time.Second)
	close(release)
	wg.Wait()
}

// TestOrderedWaiterPutBackOnCancel: a message still waiting for its key
// when its context ends is put back, its attempt unchanged.
func TestOrderedWaiterPutBackOnCancel(t *testing.T) {
	t.Parallel()
	release := make(chan struct{})
	entered := make(chan struct{})
	h := patterns.WithOrdering(patterns.ByHeader("k"))(func(context.Context, *broker.Message) broker.Ack {
		close(entered)
		<-release
		return broker.Accept()
	})
	msg := &broker.Message{Headers: broker.Table{"k": "same"}}
	first := make(chan broker.Ack, 1)
	go func() { first <- h(t.Context(), msg) }()
	<-entered
	ctx, cancel := context.WithCancel(t.Context())
	cancel()
	require.Equal(t, broker.OutcomeInProgress, h(ctx, msg).Outcome())
	close(release)
	require.Equal(t, broker.OutcomeAccept, (<-first).Outcome())
}

func TestOrderedRefusesNil(t *testing.T) {
	t.Parallel()
	require.Nil(t, patterns.Ordered("k", nil))
	require.Nil(t, patterns.Ordered(patterns.OrderKey(nil), func(context.Context, *broker.Message) broker.Ack { return broker.Accept() }))
	require.Nil(t, patterns.WithOrdering(patterns.OrderKey(nil)))
}
