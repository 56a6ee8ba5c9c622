package broker_test

import (
	"errors"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/acemq/acemq-flow/broker"
	"github.com/acemq/acemq-flow/broker/transport"
	"github.com/acemq/acemq-flow/internal/brokertest"
	"github.com/acemq/acemq-flow/internal/testenv"
)

// A replicated queue (stream or quorum) declared transient, exclusive or
// auto-delete is refused by Declare with a QueueTypeError that says what is
// wrong, before anything reaches the broker.
func TestDeclareRefusesUnreplicableQueueTypes(t *testing.T) {
	t.Parallel()
	stream := broker.Table{"x-queue-type": "stream"}
	quorum := broker.Table{"x-queue-type": "quorum"}
	for _, tc := range []struct {
		name  string
		queue broker.Queue
		want  string
	}{
		{"transient auto-delete stream", broker.Queue{Name: "orders.log", AutoDelete: true, Args: stream},
			`queue "orders.log" cannot be a stream queue while it is transient and auto-delete: RabbitMQ only replicates durable queues that outlive their connection and consumers`},
		{"exclusive stream", broker.Queue{Name: "orders.log", Durable: true, Exclusive: true, Args: stream},
			`queue "orders.log" cannot be a stream queue while it is exclusive: RabbitMQ only replicates durable queues that outlive their connection and consumers`},
		{"everything wrong with a stream", broker.Queue{Name: "orders.log", Exclusive: true, AutoDelete: true, Args: stream},
			`queue "orders.log" cannot be a stream queue while it is transient, exclusive and auto-delete: RabbitMQ only replicates durable queues that outlive their connection and consumers`},
		{"transient quorum queue", broker.Queue{Name: "orders", Args: quorum},
			`queue "orders" cannot be a quorum queue while it is transient: RabbitMQ only replicates durable queues that outlive their connection and consumers`},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			h := brokertest.New(t, "memory://"+testenv.Name(t, "broker"), false)
			ex := testenv.Name(t, "declared-first")
			err := h.Admin.Declare(brokertest.Ctx(t), broker.Topology{
				Exchanges: []broker.Exchange{{Name: ex, Kind: "direct"}},
				Queues:    []broker.Queue{tc.queue},
			})
			var qt *broker.QueueTypeError
			require.ErrorAs(t, err, &qt)
			require.Equal(t, tc.queue.Name, qt.Queue)
			require.EqualError(t, qt, tc.want)
			require.False(t, errors.Is(err, transport.ErrNotSupported) || transport.IsCode(err, transport.PreconditionFailed),
				"refused by the library, not by the broker: %v", err)
			err = h.Admin.Publish(brokertest.Ctx(t), "x", broker.ToExchange(ex), broker.To("k"))
			require.True(t, transport.IsCode(err, transport.NotFound), "nothing was declared, not even the exchange before the queue: %v", err)
		})
	}
	t.Run("replicable declarations pass", func(t *testing.T) {
		t.Parallel()
		h := brokertest.New(t, "memory://"+testenv.Name(t, "broker"), false)
		q := testenv.Name(t, "quorum")
		require.NoError(t, h.Admin.Declare(brokertest.Ctx(t), broker.Topology{Queues: []broker.Queue{
			broker.QuorumQueue(q, nil),
			{Name: testenv.Name(t, "classic"), AutoDelete: true, Exclusive: true},
		}}))
		require.ErrorIs(t, h.Admin.Declare(brokertest.Ctx(t), broker.Topology{Queues: []broker.Queue{
			{Name: "orders.log", Durable: true, Args: stream},
		}}), transport.ErrNotSupported, "a durable stream reaches the transport (which, on the loopback, has no streams)")
	})
}
