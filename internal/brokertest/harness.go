// Package brokertest is the test harness shared by every package whose
// tests talk to a broker: it runs a test against the loopback and against
// RabbitMQ, opens connections with a scheduler ladder of the test's own,
// hands out unique queue names, and deletes everything the test declared.
package brokertest

import (
	"context"
	"slices"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/acemq/acemq-flow/broker"
	"github.com/acemq/acemq-flow/broker/transport"
	"github.com/acemq/acemq-flow/internal/testenv"
)

// Harness opens connections to one broker (the loopback or RabbitMQ) with a
// ladder of the test's own, and deletes what the test declared.
type Harness struct {
	T testing.TB
	// URL is the broker's URL: memory://<unique> or the RabbitMQ test URL.
	URL string
	// Ladder is the test's own scheduler ladder, so retries of parallel
	// tests never meet.
	Ladder string
	// Admin is a connection for inspecting and cleaning up.
	Admin *broker.Conn
	// Rabbit is true on RabbitMQ.
	Rabbit bool

	mu                sync.Mutex
	queues, exchanges []string // deleted when the test ends
}

// Each runs f against the loopback and against RabbitMQ, in parallel.
func Each(t *testing.T, f func(t *testing.T, h *Harness)) {
	t.Run("loopback", func(t *testing.T) {
		t.Parallel()
		f(t, New(t, "memory://"+testenv.Name(t, "broker"), false))
	})
	t.Run("rabbitmq", func(t *testing.T) {
		t.Parallel()
		f(t, New(t, testenv.RabbitURL(t), true))
	})
}

// OnRabbit runs f against RabbitMQ only, in parallel with other tests.
func OnRabbit(t *testing.T, f func(t *testing.T, h *Harness)) {
	t.Parallel()
	f(t, New(t, testenv.RabbitURL(t), true))
}

// New is a harness on the broker at url; its ladder, and what DeleteLater
// and DeleteExchangeLater were given, are deleted when the test ends,
// after every other connection the harness opened is closed (Cleanup runs
// last in, first out): a connection still open could be reconnecting, and
// declare again what was just deleted.
func New(t testing.TB, url string, rabbit bool) *Harness {
	h := &Harness{T: t, URL: url, Ladder: testenv.Name(t, "ladder"), Rabbit: rabbit}
	h.Admin = h.Open(broker.Config{})
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer cancel()
		h.mu.Lock()
		queues, exchanges := slices.Clone(h.queues), append(slices.Clone(h.exchanges), h.Ladder)
		h.mu.Unlock()
		for _, q := range broker.LadderTopology(h.Ladder).Queues {
			queues = append(queues, q.Name)
		}
		for _, n := range queues {
			if _, err := h.Admin.Transport().DeleteQueue(ctx, n); err != nil {
				t.Logf("delete queue %q: %v", n, err)
			}
		}
		for _, n := range exchanges {
			if err := h.Admin.Transport().DeleteExchange(ctx, n); err != nil {
				t.Logf("delete exchange %q: %v", n, err)
			}
		}
	})
	return h
}

// Open returns a connection, on the harness's ladder unless cfg names one,
// logging to the test, and closed when the test ends.
func (h *Harness) Open(cfg broker.Config) *broker.Conn {
	h.T.Helper()
	if cfg.Ladder == "" {
		cfg.Ladder = h.Ladder
	}
	if cfg.Logger == nil {
		cfg.Logger = testenv.Logger(h.T)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	c, err := cfg.Open(ctx, h.URL)
	require.NoError(h.T, err)
	h.T.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
		defer cancel()
		require.NoError(h.T, c.Close(ctx))
	})
	return c
}

// Queue returns a unique queue name and deletes it, its .dlq and its
// .parked when the test ends.
func (h *Harness) Queue(prefix string) string {
	q := testenv.Name(h.T, prefix)
	h.DeleteLater(q, q+broker.DeadLetterSuffix, q+broker.ParkedSuffix)
	return q
}

// DeleteLater deletes the named queues when the test ends (see New).
func (h *Harness) DeleteLater(queues ...string) {
	h.mu.Lock()
	defer h.mu.Unlock()
	h.queues = append(h.queues, queues...)
}

// DeleteExchangeLater deletes the named exchanges when the test ends (see
// New).
func (h *Harness) DeleteExchangeLater(exchanges ...string) {
	h.mu.Lock()
	defer h.mu.Unlock()
	h.exchanges = append(h.exchanges, exchanges...)
}

// Exchange returns a unique direct exchange, declared durable, and deletes
// it when the test ends.
func (h *Harness) Exchange(prefix string) string {
	h.T.Helper()
	ex := testenv.Name(h.T, prefix)
	require.NoError(h.T, h.Admin.Declare(Ctx(h.T), broker.Topology{
		Exchanges: []broker.Exchange{{Name: ex, Kind: "direct", Durable: true}},
	}))
	h.DeleteExchangeLater(ex)
	return ex
}

// Declare declares queue exactly as Consume does (with its .dlq and
// .parked).
func (h *Harness) Declare(queue string) {
	h.T.Helper()
	require.NoError(h.T, h.Admin.Declare(Ctx(h.T), broker.ConsumerTopology(queue)))
}

// Bind declares queue exactly as Consume does (with its .dlq and .parked)
// and binds it to exchange under key.
func (h *Harness) Bind(queue, exchange, key string) {
	h.T.Helper()
	top := broker.ConsumerTopology(queue)
	top.Bindings = []broker.Binding{{Queue: queue, Exchange: exchange, Key: key}}
	require.NoError(h.T, h.Admin.Declare(Ctx(h.T), top))
}

// Get waits for one message on queue (polling basic.get: a dead-letter
// queue has no consumer to await) and acknowledges it.
func (h *Harness) Get(queue string, within time.Duration) *transport.Delivery {
	h.T.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), within)
	defer cancel()
	for {
		d, err := h.Admin.Transport().Get(ctx, queue)
		require.NoError(h.T, err)
		if d != nil {
			require.NoError(h.T, d.Ack())
			return d
		}
		select {
		case <-ctx.Done():
			h.T.Fatalf("nothing arrived on %s within %s", queue, within)
		case <-time.After(20 * time.Millisecond):
		}
	}
}

// Depth is the number of ready messages on queue.
func (h *Harness) Depth(queue string) int {
	h.T.Helper()
	st, err := h.Admin.Transport().Inspect(context.Background(), queue)
	require.NoError(h.T, err)
	return st.Messages
}

// Drain takes every message off queue, in order, acknowledging each, and
// returns them once the queue is empty.
func (h *Harness) Drain(queue string) []*transport.Delivery {
	h.T.Helper()
	ctx := Ctx(h.T)
	var all []*transport.Delivery
	for {
		d, err := h.Admin.Transport().Get(ctx, queue)
		require.NoError(h.T, err)
		if d == nil {
			return all
		}
		require.NoError(h.T, d.Ack())
		all = append(all, d)
	}
}

// WaitDepth waits until queue holds want ready messages, failing the test
// if it does not within the given time. A message the broker puts back
// (a nack, a return) may still be on its way when the call that caused it
// returns.
func (h *Harness) WaitDepth(queue string, want int, within time.Duration) {
	h.T.Helper()
	require.Eventually(h.T, func() bool { return h.Depth(queue) == want }, within, 10*time.Millisecond,
		"%s should hold %d messages", queue, want)
}

// Consumers is the number of consumers on queue.
func (h *Harness) Consumers(queue string) int {
	h.T.Helper()
	st, err := h.Admin.Transport().Inspect(context.Background(), queue)
	require.NoError(h.T, err)
	return st.Consumers
}

// Ctx is a context for one test: a minute at most, cancelled when it ends.
func Ctx(t testing.TB) context.Context {
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	t.Cleanup(cancel)
	return ctx
}
