package broker_test

import (
	"context"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/acemq/acemq-flow/broker"
	"github.com/acemq/acemq-flow/broker/transport"
	"github.com/acemq/acemq-flow/internal/testenv"
)

// harness opens connections to one broker (the loopback or RabbitMQ) with a
// ladder of the test's own, and deletes everything the test declared.
type harness struct {
	t      *testing.T
	url    string
	ladder string
	admin  *broker.Conn
	rabbit bool
}

// eachTransport runs f against the loopback and against RabbitMQ.
func eachTransport(t *testing.T, f func(t *testing.T, h *harness)) {
	t.Run("loopback", func(t *testing.T) {
		t.Parallel()
		f(t, newHarness(t, "memory://"+testenv.Name(t, "broker"), false))
	})
	t.Run("rabbitmq", func(t *testing.T) {
		t.Parallel()
		f(t, newHarness(t, testenv.RabbitURL(t), true))
	})
}

// onRabbit runs f against RabbitMQ only.
func onRabbit(t *testing.T, f func(t *testing.T, h *harness)) {
	t.Parallel()
	f(t, newHarness(t, testenv.RabbitURL(t), true))
}

func newHarness(t *testing.T, url string, rabbit bool) *harness {
	h := &harness{t: t, url: url, ladder: testenv.Name(t, "ladder"), rabbit: rabbit}
	h.admin = h.open(broker.Config{})
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer cancel()
		for _, q := range broker.LadderTopology(h.ladder).Queues {
			_, _ = h.admin.Transport().DeleteQueue(ctx, q.Name)
		}
		_ = h.admin.Transport().DeleteExchange(ctx, h.ladder)
	})
	return h
}

// open returns a connection closed when the test ends.
func (h *harness) open(cfg broker.Config) *broker.Conn {
	h.t.Helper()
	if cfg.Ladder == "" {
		cfg.Ladder = h.ladder
	}
	if cfg.Logger == nil {
		cfg.Logger = testenv.Logger(h.t)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	c, err := cfg.Open(ctx, h.url)
	require.NoError(h.t, err)
	h.t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer cancel()
		require.NoError(h.t, c.Close(ctx))
	})
	return c
}

// queue returns a unique queue name and deletes it, its .dlq and .parked
// when the test ends.
func (h *harness) queue(prefix string) string {
	q := testenv.Name(h.t, prefix)
	h.t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer cancel()
		for _, n := range []string{q, q + broker.DeadLetterSuffix, q + broker.ParkedSuffix} {
			_, _ = h.admin.Transport().DeleteQueue(ctx, n)
		}
	})
	return q
}

// get waits for one message on queue (polling basic.get: a dead-letter
// queue has no consumer to await) and acknowledges it.
func (h *harness) get(queue string, within time.Duration) *transport.Delivery {
	h.t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), within)
	defer cancel()
	for {
		d, err := h.admin.Transport().Get(ctx, queue)
		require.NoError(h.t, err)
		if d != nil {
			require.NoError(h.t, d.Ack())
			return d
		}
		select {
		case <-ctx.Done():
			h.t.Fatalf("nothing arrived on %s within %s", queue, within)
		case <-time.After(20 * time.Millisecond):
		}
	}
}

// depth is the number of ready messages on queue.
func (h *harness) depth(queue string) int {
	h.t.Helper()
	st, err := h.admin.Transport().Inspect(context.Background(), queue)
	require.NoError(h.t, err)
	return st.Messages
}

func ctxT(t *testing.T) context.Context {
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	t.Cleanup(cancel)
	return ctx
}

// seen is what a handler observed of one delivery.
type seen struct {
	msg     *broker.Message
	payload map[string]any
}

// recorder is a handler that records every message on a channel and then
// answers with decide.
func recorder(decide func(m *broker.Message) broker.Ack) (broker.Handler, <-chan seen) {
	ch := make(chan seen, 1024)
	return func(ctx context.Context, m *broker.Message) broker.Ack {
		var p map[string]any
		_ = m.Decode(&p)
		ch <- seen{msg: m, payload: p}
		return decide(m)
	}, ch
}

func next(t *testing.T, ch <-chan seen, within time.Duration) seen {
	t.Helper()
	select {
	case s := <-ch:
		return s
	case <-time.After(within):
		t.Fatalf("no delivery within %s", within)
		return seen{}
	}
}

func nothing(t *testing.T, ch <-chan seen, within time.Duration) {
	t.Helper()
	select {
	case s := <-ch:
		t.Fatalf("unexpected delivery %s attempt %d", s.msg.ID, s.msg.Attempt)
	case <-time.After(within):
	}
}
