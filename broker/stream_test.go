package broker_test

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/acemq/acemq-flow/broker"
	"github.com/acemq/acemq-flow/broker/rabbitmq"
	"github.com/acemq/acemq-flow/broker/transport"
	"github.com/acemq/acemq-flow/internal/brokertest"
)

// TestStreamConsumerNeverRejects: on a stream a failed or in-progress
// message cannot be moved back; with no .dlq to set it aside in, it is
// acknowledged and skipped. A nack would close the whole connection, so the
// connection still working afterwards is the proof that none was sent.
func TestStreamConsumerNeverRejects(t *testing.T) {
	brokertest.OnRabbit(t, func(t *testing.T, h *brokertest.Harness) {
		ctx := brokertest.Ctx(t)
		conn := h.Open(broker.Config{})
		q := h.Queue("stream")
		require.NoError(t, conn.Declare(ctx, broker.Topology{Queues: []broker.Queue{
			{Name: q, Durable: true, Args: broker.Table{"x-queue-type": "stream"}},
		}}))
		for _, s := range []string{"reject", "in-progress", "accept"} {
			require.NoError(t, conn.Publish(ctx, s, broker.To(q), broker.Mandatory()))
		}
		handler, got := brokertest.Recorder(func(m *broker.Message) broker.Ack {
			var s string
			_ = m.Decode(&s)
			switch s {
			case "reject":
				return broker.Reject(errors.New("cannot project"))
			case "in-progress":
				return broker.InProgress(time.Second)
			}
			return broker.Accept()
		})
		_, err := conn.Consume(ctx, q, handler, broker.OnStream(), broker.Prefetch(10),
			broker.ConsumeArgs(broker.Table{broker.HeaderStreamOffset: "first"}, nil))
		require.NoError(t, err)
		var offsets []int64
		for range 3 {
			m := brokertest.Next(t, got, 10*time.Second).Msg
			offsets = append(offsets, mustInt(t, m.Headers[broker.HeaderStreamOffset]))
		}
		require.Equal(t, []int64{0, 1, 2}, offsets, "x-stream-offset reaches the handler, counting from 0")
		require.NoError(t, conn.Publish(ctx, "after", broker.To(q), broker.Mandatory()))
		m := brokertest.Next(t, got, 10*time.Second).Msg
		require.Equal(t, int64(3), mustInt(t, m.Headers[broker.HeaderStreamOffset]), "the connection survived: nothing was nacked")
		brokertest.Nothing(t, got, 300*time.Millisecond)
	})
}

func TestLoopbackRefusesStreams(t *testing.T) {
	t.Parallel()
	ctx := brokertest.Ctx(t)
	conn, err := broker.Open(ctx, "memory://")
	require.NoError(t, err)
	defer conn.Close(context.Background())
	err = conn.Declare(ctx, broker.Topology{Queues: []broker.Queue{{Name: "s", Durable: true, Args: broker.Table{"x-queue-type": "stream"}}}})
	require.ErrorIs(t, err, transport.ErrNotSupported)
	require.ErrorContains(t, err, "stream")
}

// TestStreamConsumerCancelKeepsTheConnection: cancelling a stream consumer
// with deliveries in flight must not nack them (RabbitMQ closes the whole
// connection on a nack to a stream). The transport would reconnect by
// itself, so the proof is that the connection is still the same one.
func TestStreamConsumerCancelKeepsTheConnection(t *testing.T) {
	brokertest.OnRabbit(t, func(t *testing.T, h *brokertest.Harness) {
		ctx := brokertest.Ctx(t)
		conn := h.Open(broker.Config{})
		q := h.Queue("stream-cancel")
		require.NoError(t, conn.Declare(ctx, broker.Topology{Queues: []broker.Queue{
			{Name: q, Durable: true, Args: broker.Table{"x-queue-type": "stream"}},
		}}))
		for i := range 200 {
			require.NoError(t, conn.Publish(ctx, i, broker.To(q), broker.Mandatory()))
		}
		rt := conn.Transport().(*rabbitmq.Transport)
		before := rt.LocalAddr().String()
		started := make(chan struct{}, 1)
		release := make(chan struct{})
		k, err := conn.Consume(ctx, q, func(ctx context.Context, m *broker.Message) broker.Ack {
			select {
			case started <- struct{}{}:
			default:
			}
			<-release
			return broker.Accept()
		}, broker.OnStream(), broker.Prefetch(50),
			broker.ConsumeArgs(broker.Table{broker.HeaderStreamOffset: "first"}, nil))
		require.NoError(t, err)
		<-started
		cancelled := make(chan error, 1)
		go func() { cancelled <- k.Cancel(ctx) }()
		close(release)
		require.NoError(t, <-cancelled)
		// Whatever closes the connection has reached the client by now if
		// anything was going to: a publish round trip comes after it.
		require.NoError(t, conn.Publish(ctx, "after", broker.To(q), broker.Mandatory()))
		require.Equal(t, before, rt.LocalAddr().String(), "the connection was not closed and redialled")
	})
}
