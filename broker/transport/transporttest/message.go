package transporttest

import (
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/acemq/acemq-flow/broker/transport"
)

var messageTests = map[string]func(*testing.T, suite){
	"PropertiesAndHeadersRoundTrip": func(t *testing.T, s suite) {
		tr := s.connect(t)
		q := queue(t, tr, "roundtrip", nil)
		when := time.Date(2024, 5, 6, 7, 8, 9, 123456789, time.UTC)
		msg := transport.Message{
			MessageID:     "id-1",
			CorrelationID: "corr-1",
			Type:          "order.placed.v2",
			ContentType:   "application/json",
			ReplyTo:       "replies",
			Expiration:    "60000",
			Timestamp:     when,
			Headers: transport.Table{
				"int":   42,
				"i64":   int64(-1) << 40,
				"i32":   int32(7),
				"s":     "text",
				"b":     true,
				"f":     1.5,
				"bytes": []byte{0, 1, 2},
				"nil":   nil,
				"arr":   []any{"a", int64(1), transport.Table{"k": "v"}},
				"tab":   transport.Table{"k": "v", "n": int64(2), "inner": transport.Table{"deep": true}},
				"map":   map[string]any{"k": "v"},
				"when":  when,
			},
			Body: []byte(`{"id":1}`),
		}
		sub, err := tr.Consume(ctx(t), q, transport.ConsumeOptions{Tag: "roundtrip-consumer", Prefetch: 1})
		require.NoError(t, err)
		require.NoError(t, tr.Publish(ctx(t), transport.Publishing{RoutingKey: q, Message: msg}))
		d := receive(t, sub, arrival)
		require.Equal(t, "roundtrip-consumer", d.ConsumerTag)
		require.Equal(t, "", d.Exchange)
		require.Equal(t, q, d.RoutingKey)
		require.False(t, d.Redelivered)
		require.Equal(t, msg.MessageID, d.MessageID)
		require.Equal(t, msg.CorrelationID, d.CorrelationID)
		require.Equal(t, msg.Type, d.Type)
		require.Equal(t, msg.ContentType, d.ContentType)
		require.Equal(t, msg.ReplyTo, d.ReplyTo)
		require.Equal(t, msg.Expiration, d.Expiration)
		require.Equal(t, when.Unix(), d.Timestamp.Unix(), "timestamp at second resolution")
		require.Equal(t, msg.Body, d.Body)

		h := d.Headers
		require.Equal(t, int64(42), h["int"], "int comes back as int64")
		require.Equal(t, int64(-1)<<40, h["i64"])
		require.Equal(t, int32(7), h["i32"])
		require.Equal(t, "text", h["s"])
		require.Equal(t, true, h["b"])
		require.Equal(t, 1.5, h["f"])
		require.Equal(t, []byte{0, 1, 2}, h["bytes"])
		require.Contains(t, h, "nil")
		require.Nil(t, h["nil"])
		require.Equal(t, []any{"a", int64(1), transport.Table{"k": "v"}}, h["arr"])
		require.Equal(t, transport.Table{"k": "v", "n": int64(2), "inner": transport.Table{"deep": true}}, h["tab"])
		require.Equal(t, transport.Table{"k": "v"}, h["map"], "a map[string]any comes back as a Table")
		got, ok := h["when"].(time.Time)
		require.True(t, ok, "time header is %T", h["when"])
		require.Equal(t, when.Unix(), got.Unix())
		require.Zero(t, got.Nanosecond())
		require.NoError(t, d.Ack())
	},
	"MessagesAreNotShared": func(t *testing.T, s suite) {
		tr := s.connect(t)
		q := queue(t, tr, "isolation", nil)
		nested := transport.Table{"k": "before"}
		body := []byte("body")
		require.NoError(t, tr.Publish(ctx(t), transport.Publishing{RoutingKey: q,
			Message: transport.Message{Headers: transport.Table{"nested": nested}, Body: body}}))
		nested["k"] = "changed by the sender"
		body[0] = 'X'

		d := get(t, tr, q)
		require.Equal(t, "before", d.Headers["nested"].(transport.Table)["k"])
		require.Equal(t, "body", string(d.Body))
		d.Headers["nested"].(transport.Table)["k"] = "changed by the receiver"
		d.Body[0] = 'Y'
		require.NoError(t, d.Nack(true))

		again := get(t, tr, q)
		require.True(t, again.Redelivered)
		require.Equal(t, "before", again.Headers["nested"].(transport.Table)["k"])
		require.Equal(t, "body", string(again.Body))
		require.NoError(t, again.Ack())
	},
	"InvalidExpirationIsRefused": func(t *testing.T, s suite) {
		tr := s.connect(t)
		q := queue(t, tr, "expiration", nil)
		for _, exp := range []string{"abc", "-1", "1.5", " 10", "1e3"} {
			err := tr.Publish(ctx(t), transport.Publishing{RoutingKey: q, Message: transport.Message{Expiration: exp, Body: []byte("m")}})
			require.ErrorIs(t, err, transport.ErrInvalidExpiration, "expiration %q", exp)
		}
		require.NoError(t, tr.Publish(ctx(t), transport.Publishing{RoutingKey: q, Message: transport.Message{Expiration: "60000", Body: []byte("m")}}))
		require.Equal(t, 1, ready(t, tr, q))
	},
	"InvalidHeaderIsRefused": func(t *testing.T, s suite) {
		tr := s.connect(t)
		q := queue(t, tr, "header", nil)
		for _, h := range []transport.Table{
			{"strings": []string{"a"}},
			{"nested": transport.Table{"strings": []string{"a"}}},
			{"array": []any{struct{}{}}},
		} {
			err := tr.Publish(ctx(t), transport.Publishing{RoutingKey: q, Message: transport.Message{Headers: h, Body: []byte("m")}})
			require.ErrorIs(t, err, transport.ErrInvalidHeader, "headers %v", h)
		}
		publish(t, tr, "", q, "valid")
		require.Equal(t, 1, ready(t, tr, q))
	},
}
