package transporttest

import (
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/acemq/acemq-flow/broker/transport"
	"github.com/acemq/acemq-flow/internal/testenv"
)

var deadLetterTests = map[string]func(*testing.T, suite){
	"RejectDeadLetters": func(t *testing.T, s suite) {
		tr := s.connect(t)
		src, dlq := deadLettering(t, tr, nil)
		require.NoError(t, tr.Publish(ctx(t), transport.Publishing{RoutingKey: src,
			Message: transport.Message{MessageID: "m", Headers: transport.Table{"app": "kept"}, Body: []byte("m")}}))
		require.NoError(t, get(t, tr, src).Nack(false))

		sub := consume(t, tr, dlq, 1)
		dead := receive(t, sub, arrival)
		require.Equal(t, "m", dead.MessageID)
		require.Equal(t, "", dead.Exchange)
		require.Equal(t, dlq, dead.RoutingKey)
		require.Equal(t, "kept", dead.Headers["app"])
		death := lastDeath(t, dead, 1)
		require.Equal(t, int64(1), death["count"])
		require.Equal(t, "rejected", death["reason"])
		require.Equal(t, src, death["queue"])
		require.Equal(t, "", death["exchange"])
		require.Equal(t, []any{src}, death["routing-keys"])
		require.Equal(t, "rejected", dead.Headers["x-first-death-reason"])
		require.Equal(t, src, dead.Headers["x-first-death-queue"])
		require.Equal(t, "", dead.Headers["x-first-death-exchange"])

		// Dead-lettered again from the same queue for the same reason, the
		// entry's count goes up.
		require.NoError(t, tr.Publish(ctx(t), transport.Publishing{RoutingKey: src,
			Message: transport.Message{MessageID: "m", Headers: dead.Headers, Body: dead.Body}}))
		require.NoError(t, dead.Ack())
		require.NoError(t, get(t, tr, src).Nack(false))
		twice := receive(t, sub, arrival)
		require.Equal(t, int64(2), lastDeath(t, twice, 1)["count"])
		require.NoError(t, twice.Ack())
	},
	"QueueTTLExpiresAndDeadLetters": func(t *testing.T, s suite) {
		tr := s.connect(t)
		src, dlq := deadLettering(t, tr, transport.Table{"x-message-ttl": int64(100)})
		sub := consume(t, tr, dlq, 1)
		publish(t, tr, "", src, "m")
		dead := receive(t, sub, arrival)
		require.Equal(t, "m", dead.MessageID)
		death := lastDeath(t, dead, 1)
		require.Equal(t, "expired", death["reason"])
		require.Equal(t, src, death["queue"])
		require.NotContains(t, death, "original-expiration")
		require.Equal(t, 0, ready(t, tr, src))
	},
	"MessageExpirationExpiresAndDeadLetters": func(t *testing.T, s suite) {
		tr := s.connect(t)
		src, dlq := deadLettering(t, tr, nil)
		sub := consume(t, tr, dlq, 1)
		require.NoError(t, tr.Publish(ctx(t), transport.Publishing{RoutingKey: src,
			Message: transport.Message{MessageID: "m", Expiration: "100", Body: []byte("m")}}))
		dead := receive(t, sub, arrival)
		require.Empty(t, dead.Expiration, "dead-lettering removes the per-message expiration")
		death := lastDeath(t, dead, 1)
		require.Equal(t, "expired", death["reason"])
		require.Equal(t, "100", death["original-expiration"])
	},
	"ExpiryOnlyAtTheHead": func(t *testing.T, s suite) {
		tr := s.connect(t)
		src, dlq := deadLettering(t, tr, nil)
		sub := consume(t, tr, dlq, 2)
		for _, m := range []struct{ id, ttl string }{{"slow", "400"}, {"fast", "50"}} {
			require.NoError(t, tr.Publish(ctx(t), transport.Publishing{RoutingKey: src,
				Message: transport.Message{MessageID: m.id, Expiration: m.ttl, Body: []byte(m.id)}}))
		}
		// The short TTL behind a long one waits for the head to go.
		require.Equal(t, "slow", receive(t, sub, arrival).MessageID)
		require.Equal(t, "fast", receive(t, sub, arrival).MessageID)
	},
	"MissingDeadLetterExchangeDrops": func(t *testing.T, s suite) {
		tr := s.connect(t)
		q := queue(t, tr, "dlx-missing", transport.Table{"x-dead-letter-exchange": testenv.Name(t, "no-such-exchange")})
		publish(t, tr, "", q, "m")
		require.NoError(t, get(t, tr, q).Nack(false))
		nothing(t, consume(t, tr, q, 1))
	},
	"MaxLengthDropHeadDeadLetters": func(t *testing.T, s suite) {
		tr := s.connect(t)
		src, dlq := deadLettering(t, tr, transport.Table{"x-max-length": int64(1)})
		publish(t, tr, "", src, "m1")
		publish(t, tr, "", src, "m2")
		dead := get(t, tr, dlq)
		require.Equal(t, "m1", dead.MessageID)
		require.Equal(t, "maxlen", lastDeath(t, dead, 1)["reason"])
		require.Equal(t, "m2", get(t, tr, src).MessageID)
	},
	"MaxLengthRejectPublishNacks": func(t *testing.T, s suite) {
		tr := s.connect(t)
		q := queue(t, tr, "reject-publish", transport.Table{"x-max-length": int64(1), "x-overflow": "reject-publish"})
		publish(t, tr, "", q, "m1")
		err := tr.Publish(ctx(t), transport.Publishing{RoutingKey: q, Message: transport.Message{Body: []byte("m2")}})
		require.ErrorIs(t, err, transport.ErrNacked)
		require.Equal(t, 1, ready(t, tr, q))
	},
	"QuorumDeliveryLimitDeadLetters": func(t *testing.T, s suite) {
		tr := s.connect(t)
		dlq := queue(t, tr, "delivery-limit.dlq", nil)
		src := transport.Queue{Name: testenv.Name(t, "delivery-limit"), Durable: true, Args: transport.Table{
			"x-queue-type": "quorum", "x-delivery-limit": int64(1),
			"x-dead-letter-exchange": "", "x-dead-letter-routing-key": dlq,
		}}
		declare(t, tr, transport.Topology{Queues: []transport.Queue{src}})
		publish(t, tr, "", src.Name, "m")
		first := get(t, tr, src.Name)
		require.Equal(t, int64(0), first.Headers["x-delivery-count"])
		require.NoError(t, first.Nack(true))
		second := get(t, tr, src.Name)
		require.True(t, second.Redelivered)
		require.Equal(t, int64(1), second.Headers["x-delivery-count"])
		require.NoError(t, second.Nack(true))
		dead := get(t, tr, dlq)
		require.Equal(t, "delivery_limit", lastDeath(t, dead, 1)["reason"])
		require.NotContains(t, dead.Headers, "x-delivery-count")
	},
	"QuorumDeliveryLimitCountsLostConnections": func(t *testing.T, s suite) {
		// A consumer whose connection dies holding a delivery (its client
		// could not read the message, or its process crashed) gives the
		// message back unsettled; the delivery limit counts that too, so
		// the message cannot take connections down for ever.
		admin := s.connect(t)
		dlq := queue(t, admin, "lost.dlq", nil)
		src := transport.Queue{Name: testenv.Name(t, "lost"), Durable: true, Args: transport.Table{
			"x-queue-type": "quorum", "x-delivery-limit": int64(1),
			"x-dead-letter-exchange": "", "x-dead-letter-routing-key": dlq,
		}}
		declare(t, admin, transport.Topology{Queues: []transport.Queue{src}})
		publish(t, admin, "", src.Name, "m")
		for i := range 2 {
			tr := s.connect(t)
			d := receive(t, consume(t, tr, src.Name, 1), arrival)
			require.Equal(t, "m", d.MessageID)
			if i > 0 {
				require.Equal(t, int64(i), d.Headers["x-delivery-count"])
			}
			require.NoError(t, tr.Close(ctx(t)), "closed holding the delivery")
		}
		dead := get(t, admin, dlq)
		require.Equal(t, "m", dead.MessageID)
		require.Equal(t, "delivery_limit", lastDeath(t, dead, 1)["reason"])
		require.Equal(t, 0, ready(t, admin, src.Name))
	},
}

// deadLettering declares a queue dead-lettering through the default
// exchange to a second queue, and returns both names.
func deadLettering(t *testing.T, tr transport.Transport, args transport.Table) (src, dlq string) {
	t.Helper()
	dlq = queue(t, tr, "dlq", nil)
	all := transport.Table{"x-dead-letter-exchange": "", "x-dead-letter-routing-key": dlq}
	for k, v := range args {
		all[k] = v
	}
	return queue(t, tr, "dead-lettering", all), dlq
}

// lastDeath returns the most recent x-death entry of d, requiring n
// entries.
func lastDeath(t *testing.T, d *transport.Delivery, n int) transport.Table {
	t.Helper()
	deaths, ok := d.Headers["x-death"].([]any)
	require.True(t, ok, "x-death is %T", d.Headers["x-death"])
	require.Len(t, deaths, n)
	death, ok := deaths[0].(transport.Table)
	require.True(t, ok, "x-death entry is %T", deaths[0])
	return death
}
