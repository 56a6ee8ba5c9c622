package broker

import (
	"encoding/json"
	"fmt"
	"math"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/acemq/acemq-flow/broker/transport"
)

// referenceTypedValue is the decoder the fast path must agree with.
func referenceTypedValue(s string) (any, error) {
	var tv typed
	if err := json.Unmarshal([]byte(s), &tv); err != nil {
		return nil, err
	}
	return tv.value()
}

func codecSampleEnvelopes() []Outgoing {
	now := time.Date(2026, 1, 2, 3, 4, 5, 6, time.UTC)
	return []Outgoing{
		{RoutingKey: "q", Message: transport.Message{MessageID: "m-1", Timestamp: now,
			Headers: transport.Table{"x-acemq-attempt": int64(1), "x-acemq-first-seen": now.UnixMilli()}}},
		{Exchange: "ex <&> \u2028 \"quoted\" \\ tab\t", RoutingKey: "ключ", Message: transport.Message{
			CorrelationID: "c", Type: "t.v1", ContentType: "application/json", ReplyTo: "r", Expiration: "100",
			Headers: transport.Table{
				"i8": int8(-8), "u8": uint8(8), "i16": int16(-16), "u16": uint16(16), "i32": int32(-32),
				"u32": uint32(32), "i64": int64(math.MinInt64), "int": 7, "f32": float32(0.5),
				"f64": math.Inf(-1), "nan": math.NaN(), "t": true, "f": false, "nil": nil,
				"bytes": []byte{0, 1, 0xff}, "empty-bytes": []byte{}, "bad-utf8": "a\xffb", "empty": "",
				"when": now, "list": []any{"a", int32(2), []any{}, transport.Table{}},
				"nested": transport.Table{"deep": transport.Table{"x": "y"}},
			}}},
		{RoutingKey: "no headers"},
	}
}

// The fast decoder reads everything MarshalEnvelope writes, and reads it as
// the reference decoder does.
func TestEnvelopeFastDecoderAgrees(t *testing.T) {
	for i, e := range codecSampleEnvelopes() {
		s, err := e.MarshalEnvelope()
		require.NoError(t, err)
		want, err := referenceTypedValue(s)
		require.NoError(t, err)
		got, err := fastTypedValue(s)
		if i == 1 {
			// Escaped strings are left to encoding/json.
			require.ErrorIs(t, err, errNotFast)
		} else {
			require.NoError(t, err)
			require.Equal(t, fmt.Sprintf("%#v", want), fmt.Sprintf("%#v", got))
		}
		back, err := UnmarshalEnvelope(s)
		require.NoError(t, err)
		require.Equal(t, e.Exchange, back.Exchange)
		require.Equal(t, e.RoutingKey, back.RoutingKey)
		wantHeaders, _ := want.(transport.Table)["headers"].(transport.Table)
		require.Equal(t, fmt.Sprintf("%#v", wantHeaders), fmt.Sprintf("%#v", back.Message.Headers))
	}
	// Everything escape-free in the sample, read fast.
	e := codecSampleEnvelopes()[1]
	e.Exchange, e.RoutingKey = "ex", "key"
	delete(e.Message.Headers, "bad-utf8")
	s, err := e.MarshalEnvelope()
	require.NoError(t, err)
	want, err := referenceTypedValue(s)
	require.NoError(t, err)
	got, err := fastTypedValue(s)
	require.NoError(t, err)
	require.Equal(t, fmt.Sprintf("%#v", want), fmt.Sprintf("%#v", got))
}

// FuzzEnvelopeFastDecoder: whatever the fast decoder accepts, the
// reference decoder accepts and reads the same.
func FuzzEnvelopeFastDecoder(f *testing.F) {
	for _, e := range codecSampleEnvelopes() {
		s, err := e.MarshalEnvelope()
		require.NoError(f, err)
		f.Add(s)
	}
	f.Add(`{"t":"table","v":{"a":{"t":"null"},"a":{"t":"str","v":"x"}}}`)
	f.Add(`{"t":"i8","v":"300"}`)
	f.Fuzz(func(t *testing.T, s string) {
		got, err := fastTypedValue(s)
		if err != nil {
			return
		}
		want, err := referenceTypedValue(s)
		require.NoError(t, err, "fast accepted %q", s)
		require.Equal(t, fmt.Sprintf("%#v", want), fmt.Sprintf("%#v", got), "input %q", s)
	})
}

func BenchmarkEnvelopeDecode(b *testing.B) {
	s, err := codecSampleEnvelopes()[0].MarshalEnvelope()
	require.NoError(b, err)
	b.Run("fast", func(b *testing.B) {
		b.ReportAllocs()
		for b.Loop() {
			if _, err := UnmarshalEnvelope(s); err != nil {
				b.Fatal(err)
			}
		}
	})
	b.Run("reference", func(b *testing.B) {
		b.ReportAllocs()
		for b.Loop() {
			if _, err := referenceTypedValue(s); err != nil {
				b.Fatal(err)
			}
		}
	})
}

// MarshalBinary keeps a prepared message whole, body and AMQP types
// included, so that it can be sent again exactly as it was.
func TestOutgoingBinaryRoundTrip(t *testing.T) {
	for _, e := range codecSampleEnvelopes() {
		e.Message.Body = []byte{'{', 0, 0xff, '}'}
		b, err := e.MarshalBinary()
		require.NoError(t, err)
		var back Outgoing
		require.NoError(t, back.UnmarshalBinary(b))
		require.Equal(t, e.Message.Body, back.Message.Body)
		require.Equal(t, e.Exchange, back.Exchange)
		require.Equal(t, e.RoutingKey, back.RoutingKey)
		require.Equal(t, e.Message.MessageID, back.Message.MessageID)
		require.Equal(t, e.Message.Expiration, back.Message.Expiration)
		require.True(t, e.Message.Timestamp.Equal(back.Message.Timestamp))
		require.Len(t, back.Message.Headers, len(e.Message.Headers))
		for k, v := range e.Message.Headers {
			got := back.Message.Headers[k]
			if when, ok := v.(time.Time); ok {
				require.True(t, when.Equal(got.(time.Time)), k)
				continue
			}
			require.Equal(t, fmt.Sprintf("%T %#v", v, v), fmt.Sprintf("%T %#v", got, got), "header %s keeps its type", k)
		}
	}
	var o Outgoing
	require.ErrorIs(t, o.UnmarshalBinary([]byte(`{"t":"str","v":"x"}`)), ErrUnreadableEnvelope)
	require.ErrorIs(t, o.UnmarshalBinary(nil), ErrUnreadableEnvelope)
	good, err := codecSampleEnvelopes()[1].MarshalBinary()
	require.NoError(t, err)
	for n := range len(good) {
		require.ErrorIs(t, o.UnmarshalBinary(good[:n]), ErrUnreadableEnvelope, "truncated at %d", n)
	}
}

// FuzzOutgoingUnmarshalBinary: whatever the bytes, UnmarshalBinary returns
// an error or a message that encodes back to the same bytes' meaning; it
// never panics.
func FuzzOutgoingUnmarshalBinary(f *testing.F) {
	for _, e := range codecSampleEnvelopes() {
		e.Message.Body = []byte("body")
		b, err := e.MarshalBinary()
		if err != nil {
			f.Fatal(err)
		}
		f.Add(b)
	}
	f.Fuzz(func(t *testing.T, data []byte) {
		var o Outgoing
		if err := o.UnmarshalBinary(data); err != nil {
			return
		}
		again, err := o.MarshalBinary()
		if err != nil {
			t.Fatalf("read back a message it cannot write: %v", err)
		}
		var o2 Outgoing
		if err := o2.UnmarshalBinary(again); err != nil {
			t.Fatalf("cannot read what it wrote: %v", err)
		}
	})
}

func BenchmarkOutgoingMarshalBinary(b *testing.B) {
	e := codecSampleEnvelopes()[0]
	e.Message.Body = make([]byte, 256)
	b.ReportAllocs()
	for b.Loop() {
		if _, err := e.MarshalBinary(); err != nil {
			b.Fatal(err)
		}
	}
}
