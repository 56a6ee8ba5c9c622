package patterns_test

import (
	"context"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/acemq/acemq-flow/broker"
	"github.com/acemq/acemq-flow/internal/testenv"
)

// opsHarness serves the integration tests of the operational patterns
// (replay, request/reply, consumer groups, claim check, streams): it opens
// connections to one broker with a ladder of the test's own and deletes
// everything the test declared when it ends.
type opsHarness struct {
	t      *testing.T
	url    string
	ladder string
	admin  *broker.Conn
	rabbit bool
}

// opsEach runs f against the loopback and against RabbitMQ.
func opsEach(t *testing.T, f func(t *testing.T, h *opsHarness)) {
	t.Run("loopback", func(t *testing.T) {
		t.Parallel()
		f(t, newOpsHarness(t, "memory://"+testenv.Name(t, "broker"), false))
	})
	t.Run("rabbitmq", func(t *testing.T) {
		t.Parallel()
		f(t, newOpsHarness(t, testenv.RabbitURL(t), true))
	})
}

// opsOnRabbit runs f against RabbitMQ only.
func opsOnRabbit(t *testing.T, f func(t *testing.T, h *opsHarness)) {
	t.Parallel()
	f(t, newOpsHarness(t, testenv.RabbitURL(t), true))
}

func newOpsHarness(tb *testing.T, url string, rabbit bool) *opsHarness {
	h := &opsHarness{t: tb, url: url, ladder: testenv.Name(tb, "ladder"), rabbit: rabbit}
	h.admin = h.open(broker.Config{})
	tb.Cleanup(func() {
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
func (h *opsHarness) open(cfg broker.Config) *broker.Conn {
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

// queue returns a unique queue name, deleting it, its .dlq and its .parked
// when the test ends.
func (h *opsHarness) queue(prefix string) string {
	q := testenv.Name(h.t, prefix)
	h.cleanup(q, q+broker.DeadLetterSuffix, q+broker.ParkedSuffix)
	return q
}

// cleanup deletes queues when the test ends.
func (h *opsHarness) cleanup(queues ...string) {
	h.t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer cancel()
		for _, q := range queues {
			_, _ = h.admin.Transport().DeleteQueue(ctx, q)
		}
	})
}

// depth is the number of ready messages on queue.
func (h *opsHarness) depth(queue string) int {
	h.t.Helper()
	st, err := h.admin.Transport().Inspect(context.Background(), queue)
	require.NoError(h.t, err)
	return st.Messages
}

// consumers is the number of consumers on queue.
func (h *opsHarness) consumers(queue string) int {
	h.t.Helper()
	st, err := h.admin.Transport().Inspect(context.Background(), queue)
	require.NoError(h.t, err)
	return st.Consumers
}

func opsCtx(t testing.TB) context.Context {
	ctx, cancel := context.WithTimeout(context.Background(), 90*time.Second)
	t.Cleanup(cancel)
	return ctx
}

// opsRecv waits for one value on ch.
func opsRecv[T any](t testing.TB, ch <-chan T, within time.Duration) T {
	t.Helper()
	select {
	case v := <-ch:
		return v
	case <-time.After(within):
		t.Fatalf("nothing arrived within %s", within)
		var zero T
		return zero
	}
}
