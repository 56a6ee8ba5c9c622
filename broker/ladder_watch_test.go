package broker_test

import (
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/acemq/acemq-flow/broker"
	"github.com/acemq/acemq-flow/internal/brokertest"
)

// TestLadderWatchMovesStuckMessages: a message a rung kept past its due
// time (RabbitMQ 3.10 quorum queues were seen not to expire some) is moved
// on by the rung watch; a message that is on time stays in its rung.
func TestLadderWatchMovesStuckMessages(t *testing.T) {
	brokertest.Each(t, func(t *testing.T, h *brokertest.Harness) {
		ctx := brokertest.Ctx(t)
		conn := h.Open(broker.Config{})
		q := h.Queue("watched")
		require.NoError(t, conn.RunLadder(ctx))
		handler, got := brokertest.Recorder(func(*broker.Message) broker.Ack { return broker.Accept() })
		_, err := conn.Consume(ctx, q, handler, broker.WithRetry(broker.NoRetry()))
		require.NoError(t, err)

		// Both go to the hour rung. The first says it was due ten seconds
		// ago: the broker should long have expired it, and did not.
		inRung := func(which string) broker.Outgoing {
			out, err := conn.Prepare(ctx, map[string]string{"which": which}, broker.To(q))
			require.NoError(t, err)
			return conn.Scheduled(time.Now().Add(2*time.Hour), out)
		}
		stuck, onTime := inRung("stuck"), inRung("on time")
		require.Equal(t, h.Ladder+".1h", stuck.RoutingKey)
		stuck.Message.Headers[broker.HeaderScheduleDueAt] = time.Now().Add(-10 * time.Second).UnixMilli()
		require.NoError(t, conn.Send(ctx, stuck))
		require.NoError(t, conn.Send(ctx, onTime))

		seen := brokertest.Next(t, got, 15*time.Second)
		require.Equal(t, "stuck", seen.Payload["which"])
		require.Equal(t, int64(1), conn.LadderStats().Unstuck)
		_, hasSchedule := seen.Msg.Headers[broker.HeaderScheduleDueAt]
		require.False(t, hasSchedule, "delivered as the control consumer delivers, without the ladder's headers")

		brokertest.Nothing(t, got, 6*time.Second)
		require.Equal(t, 1, h.Depth(h.Ladder+".1h"), "the on-time message is still in its rung")
	})
}
