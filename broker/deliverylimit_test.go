package broker_test

import (
	"context"
	"log/slog"
	"sync/atomic"
	"testing"
	"time"

	amqp "github.com/rabbitmq/amqp091-go"
	"github.com/stretchr/testify/require"

	"github.com/acemq/acemq-flow/broker"
	"github.com/acemq/acemq-flow/broker/rabbitmq"
	"github.com/acemq/acemq-flow/broker/transport"
	"github.com/acemq/acemq-flow/internal/brokertest"
	"github.com/acemq/acemq-flow/internal/testenv"
)

// counting is a log handler that counts the records with one message.
type counting struct {
	slog.Handler
	msg string
	n   *atomic.Int32
}

func (c counting) Handle(ctx context.Context, r slog.Record) error {
	if r.Message == c.msg {
		c.n.Add(1)
	}
	return c.Handler.Handle(ctx, r)
}

func (c counting) WithAttrs(attrs []slog.Attr) slog.Handler {
	return counting{Handler: c.Handler.WithAttrs(attrs), msg: c.msg, n: c.n}
}

func (c counting) WithGroup(name string) slog.Handler {
	return counting{Handler: c.Handler.WithGroup(name), msg: c.msg, n: c.n}
}

// A message no amqp091-go reader can read (a header array of 10,000
// elements, published by a plain client) makes the consumer's connection
// drop every time it is delivered. The queue's delivery limit ends that in
// Q.dlq after a bounded number of reconnects, and the message queued behind
// it, delivered with it every time until then, is handled rather than
// dead-lettered with it.
func TestUnreadableMessageEndsInDeadLetterQueue(t *testing.T) {
	brokertest.OnRabbit(t, func(t *testing.T, h *brokertest.Harness) {
		ctx := brokertest.Ctx(t)
		var reconnects atomic.Int32
		logger := slog.New(counting{Handler: testenv.Logger(t).Handler(), msg: "rabbitmq reconnected", n: &reconnects})
		conn := h.Open(broker.Config{Logger: logger,
			RabbitMQ: rabbitmq.Config{ReconnectMin: 10 * time.Millisecond, ReconnectMax: 100 * time.Millisecond}})
		q := h.Queue("unreadable")
		h.Declare(q)

		plain := h.Plain()
		route := make([]any, 10_000)
		for i := range route {
			route[i] = "step"
		}
		require.NoError(t, plain.PublishWithContext(ctx, "", q, false, false, amqp.Publishing{
			MessageId: "poison", DeliveryMode: amqp.Persistent, Headers: amqp.Table{"x-acemq-route": route}}))
		require.NoError(t, plain.PublishWithContext(ctx, "", q, false, false, amqp.Publishing{
			MessageId: "behind", DeliveryMode: amqp.Persistent, ContentType: "application/json", Body: []byte(`"ok"`)}))
		h.WaitDepth(q, 2, 10*time.Second)

		handler, seen := brokertest.Recorder(func(*broker.Message) broker.Ack { return broker.Accept() })
		_, err := conn.Consume(ctx, q, handler)
		require.NoError(t, err)

		got := brokertest.Next(t, seen, 50*time.Second)
		require.Equal(t, "behind", got.Msg.ID)
		h.WaitDepth(q+broker.DeadLetterSuffix, 1, 10*time.Second)
		h.WaitDepth(q, 0, 10*time.Second)
		n := reconnects.Load()
		t.Logf("the unreadable message cost %d reconnects", n)
		require.LessOrEqual(t, n, int32(broker.DefaultDeliveryLimit+2), "bounded by the delivery limit")
		brokertest.Nothing(t, seen, 200*time.Millisecond)
	})
}

// Consuming declares the queue with its delivery limit: the broker then
// holds it with x-delivery-limit 20, which a declaration without it
// contradicts.
func TestConsumeDeclaresTheDeliveryLimit(t *testing.T) {
	brokertest.Each(t, func(t *testing.T, h *brokertest.Harness) {
		ctx := brokertest.Ctx(t)
		q := h.Queue("limited")
		seen := h.Sink(h.Open(broker.Config{}), q)
		require.NoError(t, h.Admin.Publish(ctx, "x", broker.To(q)))
		brokertest.Next(t, seen, 5*time.Second)

		err := h.Admin.Transport().Declare(ctx, broker.ConsumerQueues{DeliveryLimit: -1}.Topology(q))
		require.True(t, transport.IsCode(err, transport.PreconditionFailed), "want 406, got %v", err)
		require.ErrorContains(t, err, "'x-delivery-limit'")
		require.NoError(t, h.Admin.Transport().Declare(ctx, broker.ConsumerQueues{DeliveryLimit: broker.DefaultDeliveryLimit}.Topology(q)))
	})
}

// A queue that exists without a delivery limit (declared by an earlier
// version of this library, or by an AceMQ library that does not set one) is
// declared as it exists, with a warning, rather than refused: consuming it
// works as it did, and the queue keeps its arguments. A queue that exists
// with another limit is a conflict, refused as the broker refuses it.
func TestConsumeKeepsAQueueThatExistsWithoutDeliveryLimit(t *testing.T) {
	brokertest.Each(t, func(t *testing.T, h *brokertest.Harness) {
		ctx := brokertest.Ctx(t)
		q := h.Queue("unlimited")
		old := broker.ConsumerQueues{DeliveryLimit: -1}.Topology(q)
		require.NoError(t, h.Admin.Transport().Declare(ctx, old))
		var warned atomic.Int32
		logger := slog.New(counting{Handler: testenv.Logger(t).Handler(),
			msg: "queue exists without a delivery limit; declared as it is", n: &warned})
		conn := h.Open(broker.Config{Logger: logger})
		seen := h.Sink(conn, q)
		require.NoError(t, conn.Publish(ctx, "x", broker.To(q), broker.MessageID("m-1")))
		require.Equal(t, "m-1", brokertest.Next(t, seen, 5*time.Second).Msg.ID)
		require.Equal(t, int32(1), warned.Load())
		require.NoError(t, h.Admin.Transport().Declare(ctx, old), "the queue still has no limit")

		other := h.Queue("other-limit")
		require.NoError(t, h.Admin.Declare(ctx, broker.ConsumerQueues{DeliveryLimit: 5}.Topology(other)))
		_, err := conn.Consume(ctx, other, broker.Func(func(context.Context, *broker.Message) error { return nil }))
		require.True(t, transport.IsCode(err, transport.PreconditionFailed), "want 406, got %v", err)
		require.ErrorContains(t, err, "'x-delivery-limit'")
	})
}

// ConsumerQueues sets x-delivery-limit on the consumer's queue only: its
// .dlq and .parked have no dead-letter exchange, and the broker would drop
// what went past a limit there.
func TestConsumerQueuesDeliveryLimit(t *testing.T) {
	t.Parallel()
	limit := func(top broker.Topology) []any {
		var out []any
		for _, q := range top.Queues {
			out = append(out, q.Args["x-delivery-limit"])
		}
		return out
	}
	require.Equal(t, []any{int64(broker.DefaultDeliveryLimit), nil, nil}, limit(broker.ConsumerTopology("orders")))
	require.Equal(t, broker.ConsumerTopology("orders"), broker.ConsumerQueues{}.Topology("orders"))
	require.Equal(t, []any{int64(3), nil, nil}, limit(broker.ConsumerQueues{DeliveryLimit: 3}.Topology("orders")))
	require.Equal(t, []any{nil, nil, nil}, limit(broker.ConsumerQueues{DeliveryLimit: -1}.Topology("orders")))
}
