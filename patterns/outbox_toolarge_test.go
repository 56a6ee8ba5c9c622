package patterns_test

import (
	"strings"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/acemq/acemq-flow/broker"
	"github.com/acemq/acemq-flow/broker/rabbitmq"
	"github.com/acemq/acemq-flow/broker/transport"
	"github.com/acemq/acemq-flow/internal/brokertest"
	"github.com/acemq/acemq-flow/patterns"
)

// A record whose headers no AMQP frame can carry is refused by the broker
// connection before anything is sent: each sweep counts an attempt (as for an
// unroutable record) without losing the connection, and once its attempts
// are spent the records behind it are published.
func TestOutboxRelayTooLargeRecordGivesWay(t *testing.T) {
	brokertest.Each(t, func(t *testing.T, h *brokertest.Harness) {
		ctx := brokertest.Ctx(t)
		conn := h.Open(broker.Config{})
		q := h.Queue("outbox-large")
		h.Declare(q)
		var local string
		if h.Rabbit {
			local = conn.Transport().(*rabbitmq.Transport).LocalAddr().String()
		}
		s := newOutboxStore(t)
		outboxAdd(t, ctx, conn, s, 99, broker.To(q), broker.Header("blob", strings.Repeat("x", 200_000)))
		outboxAdd(t, ctx, conn, s, 1, broker.To(q))
		outboxAdd(t, ctx, conn, s, 2, broker.To(q))
		r, err := patterns.NewOutboxRelay(conn, s, patterns.OutboxRelayConfig{})
		require.NoError(t, err)

		for i := range patterns.DefaultOutboxMaxAttempts {
			n, err := r.Sweep(ctx)
			require.ErrorIs(t, err, transport.ErrTooLarge)
			require.Zero(t, n)
			require.Equal(t, i+1, s.Records()[0].Attempts, "sweep %d counts an attempt", i+1)
		}
		n, err := r.Sweep(ctx)
		require.NoError(t, err)
		require.Equal(t, 2, n)
		require.Equal(t, []int{1, 2}, outboxDrain(t, ctx, conn, q))
		recs := s.Records()
		require.Len(t, recs, 1, "the oversized record stays for inspection")
		require.Equal(t, patterns.DefaultOutboxMaxAttempts, recs[0].Attempts)
		require.Contains(t, recs[0].LastError, "frame_max")
		if h.Rabbit {
			require.Equal(t, local, conn.Transport().(*rabbitmq.Transport).LocalAddr().String(),
				"no sweep cost the connection")
		}
	})
}
