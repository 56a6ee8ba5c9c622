package broker_test

import (
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/acemq/acemq-flow/broker"
	"github.com/acemq/acemq-flow/internal/brokertest"
	"github.com/acemq/acemq-flow/internal/testenv"
)

// TestLadderNoHeadOfLineBlocking is the seed's failure: a long delay
// published before a short one must not hold the short one back.
func TestLadderNoHeadOfLineBlocking(t *testing.T) {
	brokertest.Each(t, func(t *testing.T, h *brokertest.Harness) {
		ctx := brokertest.Ctx(t)
		conn := h.Open(broker.Config{})
		q := h.Queue("scheduled")
		require.NoError(t, conn.RunLadder(ctx))
		handler, got := brokertest.Recorder(func(*broker.Message) broker.Ack { return broker.Accept() })
		_, err := conn.Consume(ctx, q, handler, broker.WithRetry(broker.NoRetry()))
		require.NoError(t, err)

		start := time.Now()
		long, err := conn.Prepare(ctx, map[string]string{"which": "4s"}, broker.To(q), broker.Header("tenant", "acme"))
		require.NoError(t, err)
		short, err := conn.Prepare(ctx, map[string]string{"which": "1s"}, broker.To(q))
		require.NoError(t, err)
		require.NoError(t, conn.Schedule(ctx, start.Add(4*time.Second), long))
		require.NoError(t, conn.Schedule(ctx, start.Add(1*time.Second), short))

		first := brokertest.Next(t, got, 10*time.Second)
		firstAt := time.Since(start)
		second := brokertest.Next(t, got, 10*time.Second)
		secondAt := time.Since(start)
		require.Equal(t, "1s", first.Payload["which"], "the short delay is not stuck behind the long one")
		require.Equal(t, "4s", second.Payload["which"])
		require.GreaterOrEqual(t, firstAt, time.Second, "never early")
		require.GreaterOrEqual(t, secondAt, 4*time.Second, "never early")
		t.Logf("lateness: 1s message %s, 4s message %s", firstAt-time.Second, secondAt-4*time.Second)

		m := second.Msg
		require.Equal(t, broker.Table{"tenant": "acme"}, m.Headers, "no x-schedule-* or x-death reaches the handler")
		require.Equal(t, broker.ContentTypeJSON, m.ContentType)
		// The ladder counts a delivery once its confirm is back, which can be
		// just after the handler has seen the message.
		require.Eventually(t, func() bool { return conn.LadderStats().Delivered == 2 }, 5*time.Second, 10*time.Millisecond)
		stats := conn.LadderStats()
		require.Equal(t, int64(2), stats.Scheduled)
		require.Zero(t, stats.Malformed)
	})
}

func TestScheduleAlreadyDueIsDeliveredAtOnce(t *testing.T) {
	brokertest.Each(t, func(t *testing.T, h *brokertest.Harness) {
		ctx := brokertest.Ctx(t)
		conn := h.Open(broker.Config{})
		q := h.Queue("due")
		require.NoError(t, conn.RunLadder(ctx))
		handler, got := brokertest.Recorder(func(*broker.Message) broker.Ack { return broker.Accept() })
		_, err := conn.Consume(ctx, q, handler, broker.WithRetry(broker.NoRetry()))
		require.NoError(t, err)
		out, err := conn.Prepare(ctx, []byte{0xde, 0xad}, broker.To(q))
		require.NoError(t, err)
		start := time.Now()
		require.NoError(t, conn.Schedule(ctx, start.Add(-time.Minute), out))
		m := brokertest.Next(t, got, 5*time.Second).Msg
		require.Less(t, time.Since(start), time.Second)
		require.Equal(t, []byte{0xde, 0xad}, m.Body, "the bytes are carried, not re-encoded")
		require.Equal(t, broker.ContentTypeBytes, m.ContentType)
	})
}

// TestScheduledToUnboundTargetWaits: a due message whose destination has no
// binding yet goes round the one-second rung until something is bound.
func TestScheduledToUnboundTargetWaits(t *testing.T) {
	brokertest.Each(t, func(t *testing.T, h *brokertest.Harness) {
		ctx := brokertest.Ctx(t)
		conn := h.Open(broker.Config{})
		q := h.Queue("later-bound")
		require.NoError(t, conn.RunLadder(ctx))
		out, err := conn.Prepare(ctx, "hello", broker.To(q))
		require.NoError(t, err)
		require.NoError(t, conn.Schedule(ctx, time.Now(), out))
		require.Eventually(t, func() bool { return conn.LadderStats().Hops >= 1 }, 5*time.Second, 20*time.Millisecond,
			"the undeliverable message hops into the 1s rung")
		handler, got := brokertest.Recorder(func(*broker.Message) broker.Ack { return broker.Accept() })
		_, err = conn.Consume(ctx, q, handler, broker.WithRetry(broker.NoRetry()))
		require.NoError(t, err)
		var s string
		require.NoError(t, brokertest.Next(t, got, 5*time.Second).Msg.Decode(&s))
		require.Equal(t, "hello", s)
	})
}

func TestMalformedControlMessageIsDropped(t *testing.T) {
	brokertest.Each(t, func(t *testing.T, h *brokertest.Harness) {
		ctx := brokertest.Ctx(t)
		conn := h.Open(broker.Config{})
		require.NoError(t, conn.RunLadder(ctx))
		require.NoError(t, conn.Publish(ctx, "stray", broker.ToExchange(conn.Ladder()), broker.To(conn.Ladder()+broker.DueSuffix), broker.Mandatory()))
		require.Eventually(t, func() bool { return conn.LadderStats().Malformed == 1 }, 5*time.Second, 10*time.Millisecond)
		require.Eventually(t, func() bool { return h.Depth(conn.Ladder()+broker.DueSuffix) == 0 }, 5*time.Second, 20*time.Millisecond)
	})
}

// TestScheduledToMissingExchangeWaits: a due message whose exchange does
// not exist yet goes round the one-second rung (not straight back to the
// control queue) until the exchange and a binding appear.
func TestScheduledToMissingExchangeWaits(t *testing.T) {
	brokertest.Each(t, func(t *testing.T, h *brokertest.Harness) {
		ctx := brokertest.Ctx(t)
		conn := h.Open(broker.Config{})
		q := h.Queue("later-exchange")
		ex := testenv.Name(t, "later-exchange")
		h.DeleteExchangeLater(ex)
		require.NoError(t, conn.RunLadder(ctx))
		out, err := conn.Prepare(ctx, "hello", broker.ToExchange(ex), broker.To("k"))
		require.NoError(t, err)
		require.NoError(t, conn.Schedule(ctx, time.Now(), out))
		require.Eventually(t, func() bool { return conn.LadderStats().Hops >= 1 }, 5*time.Second, 20*time.Millisecond,
			"the message hops into the 1s rung")
		require.Equal(t, int64(0), conn.LadderStats().Delivered)
		require.NoError(t, conn.Declare(ctx, broker.Topology{
			Exchanges: []broker.Exchange{{Name: ex, Kind: "direct", Durable: true}},
			Queues:    broker.ConsumerTopology(q).Queues,
			Bindings:  []broker.Binding{{Queue: q, Exchange: ex, Key: "k"}},
		}))
		handler, got := brokertest.Recorder(func(*broker.Message) broker.Ack { return broker.Accept() })
		_, err = conn.Consume(ctx, q, handler, broker.WithRetry(broker.NoRetry()))
		require.NoError(t, err)
		var s string
		require.NoError(t, brokertest.Next(t, got, 5*time.Second).Msg.Decode(&s))
		require.Equal(t, "hello", s)
		require.Less(t, conn.LadderStats().Hops, int64(20), "it waited a second a hop, not spinning")
	})
}
