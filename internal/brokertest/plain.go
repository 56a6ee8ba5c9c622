package brokertest

import (
	amqp "github.com/rabbitmq/amqp091-go"
	"github.com/stretchr/testify/require"
)

// Plain opens a channel of a plain amqp091-go client on the harness's
// RabbitMQ, to publish or read the way another library or a service in
// another language would. The connection is closed when the test ends.
// It fails the test on the loopback, which speaks no AMQP.
func (h *Harness) Plain() *amqp.Channel {
	h.T.Helper()
	if !h.Rabbit {
		h.T.Fatal("brokertest: a plain AMQP client needs RabbitMQ")
	}
	conn, err := amqp.Dial(h.URL)
	require.NoError(h.T, err)
	h.T.Cleanup(func() { _ = conn.Close() })
	ch, err := conn.Channel()
	require.NoError(h.T, err)
	return ch
}
