package broker

import (
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/acemq/acemq-flow/broker/transport"
)

func TestEnvelopeRoundTrip(t *testing.T) {
	t.Parallel()
	first := time.UnixMilli(1764489600123)
	in := Envelope{
		ID: "m-1", CorrelationID: "c-1", CausationID: "m-0", Type: "order.placed.v2",
		ContentType: "application/json", Timestamp: time.Unix(1764489601, 0), FirstSeen: first,
		Attempt: 3, RunID: "run-9", Route: []string{"validate", "charge", "ship"}, RoutePosition: 1,
		Error: "boom", SourceQueue: "orders", ReplyTo: "replies",
	}
	var m transport.Message
	h := transport.Table{"tenant": "acme"}
	in.encode(&m, h)
	m.Headers = h
	require.NoError(t, h.Validate(), "every header must be an AMQP field value")
	require.Equal(t, int64(1764489600123), h[HeaderFirstSeen])
	require.Equal(t, int64(3), h[HeaderAttempt])
	require.Equal(t, []any{"validate", "charge", "ship"}, h[HeaderRoute])
	require.Equal(t, int64(1), h[HeaderRoutePosition])

	out, app, err := decodeEnvelope(&m, time.Now())
	require.NoError(t, err)
	require.Equal(t, in, out)
	require.Equal(t, transport.Table{"tenant": "acme"}, app, "engine headers never reach the application headers")
}

func TestDecodeEnvelopeForeignMessage(t *testing.T) {
	t.Parallel()
	now := time.Now()
	ts := time.Unix(1764489601, 0)
	// What a plain AMQP client, or an older library writing int32, sends.
	m := transport.Message{MessageID: "x", Timestamp: ts, Headers: transport.Table{HeaderAttempt: int32(2)}}
	env, _, err := decodeEnvelope(&m, now)
	require.NoError(t, err)
	require.Equal(t, 2, env.Attempt)
	require.Equal(t, ts, env.FirstSeen, "first seen falls back to the timestamp")

	require.Equal(t, ts.UnixMilli(), m.Headers[HeaderFirstSeen], "written into the delivery, for every copy moved of it")

	bare := transport.Message{}
	env, _, err = decodeEnvelope(&bare, now)
	require.NoError(t, err)
	require.Equal(t, 1, env.Attempt)
	require.Equal(t, now.UnixMilli(), env.FirstSeen.UnixMilli(), "first seen when received, without a timestamp")
	require.Equal(t, now.UnixMilli(), bare.Headers[HeaderFirstSeen], "the handler sees the value the copies carry")
	require.Nil(t, env.Route)

	read := transport.Message{Timestamp: ts}
	env, _, err = EnvelopeOf(&read)
	require.NoError(t, err)
	require.Equal(t, ts, env.FirstSeen)
	require.Nil(t, read.Headers, "EnvelopeOf only reads")
}

func TestDecodeEnvelopeMalformed(t *testing.T) {
	t.Parallel()
	cases := map[string]transport.Table{
		"attempt string":   {HeaderAttempt: "two"},
		"attempt zero":     {HeaderAttempt: int64(0)},
		"first-seen text":  {HeaderFirstSeen: "yesterday"},
		"route not array":  {HeaderRoute: "a,b"},
		"route non-string": {HeaderRoute: []any{"a", int64(1)}},
		"position outside": {HeaderRoute: []any{"a"}, HeaderRoutePosition: int64(5)},
		"position = len":   {HeaderRoute: []any{"a", "b"}, HeaderRoutePosition: int64(2)},
		"position < 0":     {HeaderRoute: []any{"a"}, HeaderRoutePosition: int32(-1)},
		"position text":    {HeaderRoute: []any{"a"}, HeaderRoutePosition: "0"},
		"empty route":      {HeaderRoute: []any{}, HeaderRoutePosition: int64(0)},
		"empty, no pos":    {HeaderRoute: []any{}},
		"run id number":    {HeaderRunID: int64(7)},
	}
	for name, h := range cases {
		_, _, err := decodeEnvelope(&transport.Message{Headers: h}, time.Now())
		var me *MalformedHeaderError
		require.ErrorAs(t, err, &me, name)
	}
}

func TestReservedHeadersRefused(t *testing.T) {
	t.Parallel()
	require.NoError(t, checkApplicationHeaders(transport.Table{"tenant": "a", "acemq-reply-to": "q"}))
	for _, name := range []string{"x-acemq-attempt", "X-AceMQ-Anything", "x-acemq-"} {
		err := checkApplicationHeaders(transport.Table{name: "v"})
		require.ErrorIs(t, err, ErrReservedHeader)
		require.ErrorContains(t, err, name, "the error names the header")
	}
	require.ErrorIs(t, checkApplicationHeaders(transport.Table{"bad": []string{"a"}}), transport.ErrInvalidHeader)
}

func TestNewID(t *testing.T) {
	t.Parallel()
	seen := map[string]bool{}
	for range 1000 {
		id := NewID()
		require.Regexp(t, `^[0-9a-f]{8}-[0-9a-f]{4}-4[0-9a-f]{3}-[89ab][0-9a-f]{3}-[0-9a-f]{12}$`, id)
		require.False(t, seen[id])
		seen[id] = true
	}
}

func TestCodecs(t *testing.T) {
	t.Parallel()
	b, err := JSON.Encode(map[string]int{"a": 1})
	require.NoError(t, err)
	require.JSONEq(t, `{"a":1}`, string(b))
	var v map[string]int
	require.NoError(t, JSON.Decode(b, &v))
	require.Equal(t, 1, v["a"])
	var de *DecodeError
	require.ErrorAs(t, JSON.(Checker).Check([]byte("{nope")), &de)
	require.ErrorAs(t, JSON.Decode([]byte(`"s"`), &v), &de)

	raw, err := Raw.Encode([]byte{0, 1, 2})
	require.NoError(t, err)
	var got []byte
	require.NoError(t, Raw.Decode(raw, &got))
	require.Equal(t, []byte{0, 1, 2}, got)
	_, err = Raw.Encode(42)
	require.ErrorIs(t, err, ErrInvalidPayload)
	require.ErrorAs(t, Raw.Decode(raw, &v), &de)
}
