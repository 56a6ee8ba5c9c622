package patterns_test

import (
	"context"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
	"go.uber.org/goleak"

	"github.com/acemq/acemq-flow/broker"
	"github.com/acemq/acemq-flow/broker/transport"
	"github.com/acemq/acemq-flow/internal/testenv"
	"github.com/acemq/acemq-flow/patterns"
)

func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

// flowHarness opens connections to one broker (the loopback or RabbitMQ)
// with a ladder of the test's own, and deletes everything the test
// declared when it ends.
type flowHarness struct {
	t      *testing.T
	url    string
	ladder string
	admin  *broker.Conn
	rabbit bool
}

// flowEach runs f against the loopback and against RabbitMQ.
func flowEach(t *testing.T, f func(t *testing.T, h *flowHarness)) {
	t.Run("loopback", func(t *testing.T) {
		t.Parallel()
		f(t, newFlowHarness(t, "memory://"+testenv.Name(t, "broker"), false))
	})
	t.Run("rabbitmq", func(t *testing.T) {
		t.Parallel()
		f(t, newFlowHarness(t, testenv.RabbitURL(t), true))
	})
}

// flowOnRabbit runs f against RabbitMQ only.
func flowOnRabbit(t *testing.T, f func(t *testing.T, h *flowHarness)) {
	t.Parallel()
	f(t, newFlowHarness(t, testenv.RabbitURL(t), true))
}

func newFlowHarness(t *testing.T, url string, rabbit bool) *flowHarness {
	h := &flowHarness{t: t, url: url, ladder: testenv.Name(t, "ladder"), rabbit: rabbit}
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
func (h *flowHarness) open(cfg broker.Config) *broker.Conn {
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
		ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
		defer cancel()
		require.NoError(h.t, c.Close(ctx))
	})
	return c
}

// queue returns a unique queue name and deletes it, its .dlq and .parked
// when the test ends.
func (h *flowHarness) queue(prefix string) string {
	q := testenv.Name(h.t, prefix)
	h.deleteQueues(q)
	return q
}

func (h *flowHarness) deleteQueues(queues ...string) {
	h.t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer cancel()
		for _, q := range queues {
			for _, n := range []string{q, q + broker.DeadLetterSuffix, q + broker.ParkedSuffix} {
				_, _ = h.admin.Transport().DeleteQueue(ctx, n)
			}
		}
	})
}

// exchange returns a unique direct exchange, declared, and deletes it when
// the test ends.
func (h *flowHarness) exchange(prefix string) string {
	h.t.Helper()
	ex := testenv.Name(h.t, prefix)
	require.NoError(h.t, h.admin.Declare(flowCtx(h.t), broker.Topology{
		Exchanges: []broker.Exchange{{Name: ex, Kind: "direct", Durable: true}},
	}))
	h.t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer cancel()
		_ = h.admin.Transport().DeleteExchange(ctx, ex)
	})
	return ex
}

// bind declares queue (as Consume does) bound to exchange under key.
func (h *flowHarness) bind(queue, exchange, key string) {
	h.t.Helper()
	top := broker.ConsumerTopology(queue)
	top.Bindings = []broker.Binding{{Queue: queue, Exchange: exchange, Key: key}}
	require.NoError(h.t, h.admin.Declare(flowCtx(h.t), top))
}

// pipeline declares a pipeline with a unique name and deletes its
// topology when the test ends.
func (h *flowHarness) pipeline(steps ...string) *patterns.Pipeline {
	h.t.Helper()
	p, err := patterns.NewPipeline(testenv.Name(h.t, "pipeline"), steps...)
	require.NoError(h.t, err)
	require.NoError(h.t, h.admin.Declare(flowCtx(h.t), p.Topology()))
	queues := make([]string, len(steps))
	for i, s := range steps {
		queues[i] = p.QueueFor(s)
	}
	h.deleteQueues(queues...)
	h.t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer cancel()
		_ = h.admin.Transport().DeleteExchange(ctx, p.Name())
	})
	return p
}

// get waits for one message on queue (polling basic.get: a dead-letter
// queue has no consumer to await) and acknowledges it.
func (h *flowHarness) get(queue string, within time.Duration) *transport.Delivery {
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
func (h *flowHarness) depth(queue string) int {
	h.t.Helper()
	st, err := h.admin.Transport().Inspect(context.Background(), queue)
	require.NoError(h.t, err)
	return st.Messages
}

func flowCtx(t *testing.T) context.Context {
	ctx, cancel := context.WithTimeout(context.Background(), 90*time.Second)
	t.Cleanup(cancel)
	return ctx
}

// flowNext waits for one value on ch.
func flowNext[T any](t *testing.T, ch <-chan T, within time.Duration) T {
	t.Helper()
	select {
	case v := <-ch:
		return v
	case <-time.After(within):
		t.Fatalf("nothing within %s", within)
		var zero T
		return zero
	}
}

// flowNothing fails if anything arrives on ch within d.
func flowNothing[T any](t *testing.T, ch <-chan T, d time.Duration) {
	t.Helper()
	select {
	case v := <-ch:
		t.Fatalf("unexpected %v", v)
	case <-time.After(d):
	}
}

// flowSink consumes queue and hands every message to the returned channel.
func flowSink(t *testing.T, conn *broker.Conn, queue string, opts ...broker.ConsumeOption) <-chan *broker.Message {
	t.Helper()
	ch := make(chan *broker.Message, 1024)
	_, err := conn.Consume(flowCtx(t), queue, func(_ context.Context, m *broker.Message) broker.Ack {
		ch <- m
		return broker.Accept()
	}, append([]broker.ConsumeOption{broker.WithRetry(broker.NoRetry())}, opts...)...)
	require.NoError(t, err)
	return ch
}
