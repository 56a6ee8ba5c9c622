package broker_test

import (
	"context"
	"errors"
	"testing"
	"time"

	amqp "github.com/rabbitmq/amqp091-go"
	"github.com/stretchr/testify/require"

	"github.com/acemq/acemq-flow/broker"
	"github.com/acemq/acemq-flow/internal/brokertest"
)

// TestWireAsAnotherLibrarySeesIt reads what this library puts on the wire
// with a plain amqp091-go client, the way another AceMQ library would:
// properties, delivery mode, and the header names and AMQP types of
// docs/wire.md, on a fresh message, a retry in the ladder and a dead letter.
func TestWireAsAnotherLibrarySeesIt(t *testing.T) {
	brokertest.OnRabbit(t, func(t *testing.T, h *brokertest.Harness) {
		ctx := brokertest.Ctx(t)
		conn := h.Open(broker.Config{})
		raw, err := amqp.Dial(h.URL)
		require.NoError(t, err)
		defer raw.Close()
		ch, err := raw.Channel()
		require.NoError(t, err)
		get := func(queue string) amqp.Delivery {
			t.Helper()
			var d amqp.Delivery
			require.Eventually(t, func() bool {
				var ok bool
				d, ok, err = ch.Get(queue, true)
				require.NoError(t, err)
				return ok
			}, 10*time.Second, 20*time.Millisecond, "nothing on %s", queue)
			return d
		}

		// A fresh message.
		q := h.Queue("wire")
		require.NoError(t, conn.Declare(ctx, broker.ConsumerTopology(q)))
		require.NoError(t, conn.Publish(ctx, map[string]int{"n": 1}, broker.To(q), broker.Type("order.placed.v2"),
			broker.MessageID("m-1"), broker.CorrelationID("c-1"), broker.ReplyTo("replies")))
		d := get(q)
		require.Equal(t, uint8(amqp.Persistent), d.DeliveryMode, "every message is persistent")
		require.Equal(t, "m-1", d.MessageId)
		require.Equal(t, "c-1", d.CorrelationId)
		require.Equal(t, "order.placed.v2", d.Type)
		require.Equal(t, "application/json", d.ContentType)
		require.Equal(t, "replies", d.ReplyTo, "the reply address as the AMQP property...")
		require.Equal(t, "replies", d.Headers["acemq-reply-to"], "...and as the acemq-reply-to header")
		require.WithinDuration(t, time.Now(), d.Timestamp, 10*time.Second)
		require.IsType(t, int64(0), d.Headers["x-acemq-first-seen"], "epoch ms as a long")
		require.InDelta(t, time.Now().UnixMilli(), d.Headers["x-acemq-first-seen"], 10000)
		require.Equal(t, int64(1), d.Headers["x-acemq-attempt"])
		require.JSONEq(t, `{"n":1}`, string(d.Body))

		// A retry waiting in the ladder, and what it carries there.
		retried := h.Queue("wire-retry")
		fail := make(chan struct{}, 1)
		k, err := conn.Consume(ctx, retried, func(context.Context, *broker.Message) broker.Ack {
			fail <- struct{}{}
			return broker.Retry(errors.New("later"))
		}, broker.WithRetry(broker.Constant(3, 30*time.Second)))
		require.NoError(t, err)
		require.NoError(t, conn.Publish(ctx, "x", broker.To(retried), broker.MessageID("m-2")))
		<-fail
		require.NoError(t, k.Cancel(ctx))
		d = get(h.Ladder + ".10s")
		require.Equal(t, "m-2", d.MessageId, "a retry keeps the message id")
		require.Equal(t, int64(2), d.Headers["x-acemq-attempt"])
		require.Equal(t, "", d.Headers["x-schedule-exchange"])
		require.Equal(t, retried, d.Headers["x-schedule-routing-key"])
		require.Equal(t, "application/json", d.Headers["x-schedule-content-type"])
		require.IsType(t, int64(0), d.Headers["x-schedule-due-at"])
		require.InDelta(t, time.Now().Add(30*time.Second).UnixMilli(), d.Headers["x-schedule-due-at"], 10000)

		// A dead letter.
		dead := h.Queue("wire-dead")
		_, err = conn.Consume(ctx, dead, broker.Func(func(context.Context, *broker.Message) error {
			return broker.Fatal(errors.New("no such customer"))
		}))
		require.NoError(t, err)
		require.NoError(t, conn.Publish(ctx, "x", broker.To(dead), broker.MessageID("m-3")))
		d = get(dead + ".dlq")
		require.Equal(t, "m-3", d.MessageId)
		require.Equal(t, "fatal: no such customer", d.Headers["x-acemq-error"])
		require.Equal(t, dead, d.Headers["x-acemq-queue"])
		require.Equal(t, int64(1), d.Headers["x-acemq-attempt"])
		require.NotContains(t, d.Headers, "x-death")
	})
}

// TestConsumerQueueArguments pins what consuming Q declares (docs/wire.md,
// "Queues a consumer owns"): exactly the contract's arguments, since a
// broker holding Q with any other arguments (an x-delivery-limit, say)
// would refuse every other AceMQ library's declaration.
func TestConsumerQueueArguments(t *testing.T) {
	t.Parallel()
	top := broker.ConsumerTopology("orders")
	require.Equal(t, []broker.Queue{
		{Name: "orders", Durable: true, Args: broker.Table{
			"x-queue-type": "quorum", "x-dead-letter-exchange": "", "x-dead-letter-routing-key": "orders.dlq"}},
		{Name: "orders.dlq", Durable: true, Args: broker.Table{"x-queue-type": "quorum"}},
		{Name: "orders.parked", Durable: true, Args: broker.Table{"x-queue-type": "quorum"}},
	}, top.Queues)
	require.Empty(t, top.Exchanges)
	require.Empty(t, top.Bindings)
}
