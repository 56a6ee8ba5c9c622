package transporttest

import (
	"fmt"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/acemq/acemq-flow/broker/transport"
	"github.com/acemq/acemq-flow/internal/testenv"
)

// headerOverhead is what a content header frame carrying only a message id
// of one byte and one string header named "h" adds to the header's value:
// class, weight, body size and property flags (14), the header table's
// length, name, type and value length (11), the delivery mode (1) and the
// message id (2).
const headerOverhead = 28

var frameTests = map[string]func(*testing.T, suite){
	"OversizedPublishIsRefusedAndTheConnectionLives": func(t *testing.T, s suite) {
		tr := s.connect(t)
		q := queue(t, tr, "frame", nil)
		sub := consume(t, tr, q, 10)
		publish(t, tr, "", q, "before")
		// Held unsettled across every refusal below: had a refusal cost the
		// connection, settling it would fail as stale.
		held := receive(t, sub, arrival)

		header := func(n int) transport.Publishing {
			return transport.Publishing{RoutingKey: q, Message: transport.Message{
				MessageID: "m", Headers: transport.Table{"h": strings.Repeat("x", n)}}}
		}
		largest := transport.MaxHeaderSize(transport.DefaultFrameMax) - headerOverhead
		require.NoError(t, tr.Publish(ctx(t), header(largest)))
		d := receive(t, sub, arrival)
		require.Len(t, d.Headers["h"], largest)
		require.NoError(t, d.Ack())

		err := tr.Publish(ctx(t), header(largest+1))
		require.ErrorIs(t, err, transport.ErrTooLarge)
		require.Contains(t, err.Error(), "frame_max")

		long := strings.Repeat("k", 256)
		many := make([]any, 8193)
		for i := range many {
			many[i] = "s"
		}
		wide := transport.Table{}
		for i := range 8193 {
			wide[fmt.Sprintf("k%d", i)] = int8(1)
		}
		// The headers are depth 0: the innermost of these tables is at 33,
		// one deeper than amqp091-go reads.
		deep := transport.Table{"leaf": true}
		for range 32 {
			deep = transport.Table{"t": deep}
		}
		for name, p := range map[string]transport.Publishing{
			"header name over 255 bytes": {RoutingKey: q, Message: transport.Message{Headers: transport.Table{long: "v"}}},
			"nested header name":         {RoutingKey: q, Message: transport.Message{Headers: transport.Table{"t": transport.Table{long: "v"}}}},
			"message id over 255 bytes":  {RoutingKey: q, Message: transport.Message{MessageID: long}},
			"type over 255 bytes":        {RoutingKey: q, Message: transport.Message{Type: long}},
			"routing key over 255 bytes": {RoutingKey: long},
			"exchange over 255 bytes":    {Exchange: long, RoutingKey: q},
			"array of 8193 elements":     {RoutingKey: q, Message: transport.Message{Headers: transport.Table{"x-acemq-route": many}}},
			"table of 8193 entries":      {RoutingKey: q, Message: transport.Message{Headers: transport.Table{"t": wide}}},
			"containers 33 deep":         {RoutingKey: q, Message: transport.Message{Headers: transport.Table{"t": deep}}},
		} {
			err := tr.Publish(ctx(t), p)
			require.ErrorIs(t, err, transport.ErrTooLarge, name)
		}

		require.NoError(t, held.Ack(), "the connection was never lost")
		publish(t, tr, "", q, "after")
		require.Equal(t, "after", receive(t, sub, arrival).MessageID, "nothing refused was delivered")
	},
	"LargestHeaderSurvivesTheBrokersOwnHeaders": func(t *testing.T, s suite) {
		tr := s.connect(t)
		// A quorum queue adds x-delivery-count to a redelivery and to
		// basic.get, and dead-lettering adds x-death and x-first-death-*:
		// the largest header a publish may carry must still be readable
		// with all of them (amqp091-go drops its connection over a frame
		// beyond frame_max, and the broker would deliver it again for ever).
		dlq := queue(t, tr, strings.Repeat("d", 200), nil)
		src := transport.Queue{Name: testenv.Name(t, strings.Repeat("q", 200)), Durable: true, Args: transport.Table{
			"x-queue-type": "quorum", "x-delivery-limit": int64(1),
			"x-dead-letter-exchange": "", "x-dead-letter-routing-key": dlq,
		}}
		declare(t, tr, transport.Topology{Queues: []transport.Queue{src}})
		largest := transport.MaxHeaderSize(transport.DefaultFrameMax) - headerOverhead
		require.NoError(t, tr.Publish(ctx(t), transport.Publishing{RoutingKey: src.Name, Message: transport.Message{
			MessageID: "m", Headers: transport.Table{"h": strings.Repeat("x", largest)}}}))
		for range 2 {
			d := get(t, tr, src.Name)
			require.Contains(t, d.Headers, "x-delivery-count")
			require.NoError(t, d.Nack(true))
		}
		dead := get(t, tr, dlq)
		require.Len(t, dead.Headers["h"], largest)
		require.Equal(t, "delivery_limit", lastDeath(t, dead, 1)["reason"])
		require.NoError(t, dead.Ack())
	},
	"ReadableLimitsAreAccepted": func(t *testing.T, s suite) {
		tr := s.connect(t)
		q := queue(t, tr, "frame-limits", nil)
		many := make([]any, 8192)
		for i := range many {
			many[i] = "s"
		}
		// The innermost table is at depth 32, the deepest amqp091-go reads.
		deep := transport.Table{"leaf": true}
		for range 31 {
			deep = transport.Table{"t": deep}
		}
		name := strings.Repeat("k", 255)
		require.NoError(t, tr.Publish(ctx(t), transport.Publishing{RoutingKey: q, Message: transport.Message{
			MessageID: name, Headers: transport.Table{name: "v", "route": many, "t": deep}}}))
		d := get(t, tr, q)
		require.Equal(t, name, d.MessageID)
		require.Len(t, d.Headers["route"], 8192, "amqp091-go reads an array of 8,192 elements")
		require.Equal(t, "v", d.Headers[name])
		require.NoError(t, d.Ack())
	},
}
