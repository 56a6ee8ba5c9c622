package rabbitmq_test

import (
	"context"
	"fmt"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/acemq/acemq-flow/broker/rabbitmq"
	"github.com/acemq/acemq-flow/broker/transport"
	"github.com/acemq/acemq-flow/internal/testenv"
)

// TestAcksAfterCancelAreKept: a consumer cancelled with 1,000 deliveries in
// hand acks them all and the transport closes straight away. Closing the
// channel (or the connection) right behind the acks let RabbitMQ 3.10's
// quorum queue undo hundreds of them; with the settle grace none come back.
func TestAcksAfterCancelAreKept(t *testing.T) {
	t.Parallel()
	url := testenv.RabbitURL(t)
	admin := open(t, rabbitmq.Config{})
	const n = 1000
	for round := range 2 {
		tr, err := rabbitmq.Dial(ctx(t), url, rabbitmq.Config{Logger: logger(t)})
		require.NoError(t, err)
		q := testenv.Name(t, "acked")
		declare(t, admin, transport.Topology{Queues: []transport.Queue{
			{Name: q, Durable: true, Args: transport.Table{"x-queue-type": "quorum"}},
		}})
		for i := range n {
			require.NoError(t, tr.Publish(ctx(t), transport.Publishing{RoutingKey: q,
				Message: transport.Message{MessageID: fmt.Sprint(i)}}))
		}
		sub, err := tr.Consume(ctx(t), q, transport.ConsumeOptions{Prefetch: n})
		require.NoError(t, err)
		held := make([]*transport.Delivery, 0, n)
		for len(held) < n {
			held = append(held, <-sub.Deliveries())
		}
		require.NoError(t, sub.Cancel(ctx(t)))
		for _, d := range held {
			require.NoError(t, d.Ack())
		}
		require.NoError(t, tr.Close(context.Background()))
		st, err := admin.Inspect(ctx(t), q)
		require.NoError(t, err)
		require.Zero(t, st.Messages, "round %d: acknowledged messages came back", round)
	}
}
