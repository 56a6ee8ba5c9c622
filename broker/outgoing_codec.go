package broker

import (
	"encoding/base64"
	"encoding/json"
	"errors"
	"fmt"
	"strconv"
	"time"
	"unicode/utf8"

	"github.com/acemq/acemq-flow/broker/transport"
)

// ErrUnreadableEnvelope is a stored envelope (MarshalEnvelope,
// MarshalBinary) this version cannot read back: written by another
// version, or damaged.
var ErrUnreadableEnvelope = errors.New("unreadable message envelope")

// errEnvelope is the short name the decoders below use.
var errEnvelope = ErrUnreadableEnvelope

// MarshalEnvelope encodes everything of o but its body and Mandatory, as
// an outbox keeps it: the destination and the AMQP properties and headers,
// each value tagged with its AMQP type so that it goes back on the wire
// exactly as it was prepared (plain JSON would turn an int64 header into a
// float and bytes into text). A header value that is not an AMQP field
// value is refused with transport.ErrInvalidHeader.
func (o Outgoing) MarshalEnvelope() (string, error) {
	t := o.envelopeTable()
	v, err := typedValue(t)
	if err != nil {
		return "", err
	}
	b, err := json.Marshal(v)
	return string(b), err
}

// UnmarshalEnvelope reads what MarshalEnvelope wrote (Body empty). Input
// it cannot read is an error matching ErrUnreadableEnvelope.
func UnmarshalEnvelope(s string) (Outgoing, error) {
	t, err := decodeEnvelopeTable(s)
	if err != nil {
		return Outgoing{}, err
	}
	return envelopeFromTable(t), nil
}

func (o Outgoing) envelopeTable() transport.Table {
	m := o.Message
	t := transport.Table{
		"exchange": o.Exchange, "routing_key": o.RoutingKey,
		"message_id": m.MessageID, "correlation_id": m.CorrelationID, "type": m.Type,
		"content_type": m.ContentType, "reply_to": m.ReplyTo, "expiration": m.Expiration,
	}
	if !m.Timestamp.IsZero() {
		t["timestamp"] = m.Timestamp
	}
	if m.Headers != nil {
		t["headers"] = m.Headers
	}
	return t
}

func decodeEnvelopeTable(s string) (transport.Table, error) {
	// The fast path reads what encodeEnvelope writes; anything else it
	// leaves to the reference decoder, which also says what is wrong.
	v, err := fastTypedValue(s)
	if err != nil {
		var tv typed
		if err := json.Unmarshal([]byte(s), &tv); err != nil {
			return nil, fmt.Errorf("%w: %w", errEnvelope, err)
		}
		if v, err = tv.value(); err != nil {
			return nil, err
		}
	}
	t, ok := v.(transport.Table)
	if !ok {
		return nil, fmt.Errorf("%w: not a table", errEnvelope)
	}
	return t, nil
}

func envelopeFromTable(t transport.Table) Outgoing {
	str := func(k string) string { s, _ := t[k].(string); return s }
	o := Outgoing{Exchange: str("exchange"), RoutingKey: str("routing_key")}
	o.Message = transport.Message{
		MessageID: str("message_id"), CorrelationID: str("correlation_id"), Type: str("type"),
		ContentType: str("content_type"), ReplyTo: str("reply_to"), Expiration: str("expiration"),
	}
	o.Message.Timestamp, _ = t["timestamp"].(time.Time)
	o.Message.Headers, _ = t["headers"].(transport.Table)
	return o
}

// typed is one AMQP field value: T names its type, V holds it. Numbers are
// written as strings so that nothing passes through a float on the way
// back, and NaN and infinities survive.
type typed struct {
	T string          `json:"t"`
	V json.RawMessage `json:"v,omitempty"`
}

func typedValue(v any) (typed, error) {
	raw := func(tag string, x any) (typed, error) {
		b, err := json.Marshal(x)
		return typed{T: tag, V: b}, err
	}
	num := func(tag string, n int64) (typed, error) { return raw(tag, strconv.FormatInt(n, 10)) }
	switch x := v.(type) {
	case nil:
		return typed{T: "null"}, nil
	case bool:
		return raw("bool", x)
	case int8:
		return num("i8", int64(x))
	case uint8:
		return num("u8", int64(x))
	case int16:
		return num("i16", int64(x))
	case uint16:
		return num("u16", int64(x))
	case int32:
		return num("i32", int64(x))
	case uint32:
		return num("u32", int64(x))
	case int64:
		return num("i64", x)
	case int:
		return num("int", int64(x))
	case float32:
		return raw("f32", strconv.FormatFloat(float64(x), 'g', -1, 32))
	case float64:
		return raw("f64", strconv.FormatFloat(x, 'g', -1, 64))
	case string:
		if utf8.ValidString(x) {
			return raw("str", x)
		}
		// JSON would replace the invalid bytes; keep them.
		return raw("str64", base64.StdEncoding.EncodeToString([]byte(x)))
	case []byte:
		return raw("bytes", base64.StdEncoding.EncodeToString(x))
	case time.Time:
		return raw("time", x.Format(time.RFC3339Nano))
	case transport.Table:
		return typedTable(x)
	case map[string]any:
		return typedTable(transport.Table(x))
	case []any:
		out := make([]typed, len(x))
		for i, e := range x {
			tv, err := typedValue(e)
			if err != nil {
				return typed{}, err
			}
			out[i] = tv
		}
		return raw("array", out)
	default:
		return typed{}, fmt.Errorf("%w: %T", transport.ErrInvalidHeader, v)
	}
}

func typedTable(t transport.Table) (typed, error) {
	out := make(map[string]typed, len(t))
	for k, e := range t {
		if !utf8.ValidString(k) {
			return typed{}, fmt.Errorf("%w: header name %q is not UTF-8", transport.ErrInvalidHeader, k)
		}
		tv, err := typedValue(e)
		if err != nil {
			return typed{}, fmt.Errorf("%q: %w", k, err)
		}
		out[k] = tv
	}
	b, err := json.Marshal(out)
	return typed{T: "table", V: b}, err
}

func (tv typed) value() (any, error) {
	bad := func(err error) (any, error) { return nil, fmt.Errorf("%w: %s value: %w", errEnvelope, tv.T, err) }
	switch tv.T {
	case "null":
		return nil, nil
	case "bool":
		var b bool
		if err := json.Unmarshal(tv.V, &b); err != nil {
			return bad(err)
		}
		return b, nil
	case "table":
		var m map[string]typed
		if err := json.Unmarshal(tv.V, &m); err != nil {
			return bad(err)
		}
		t := make(transport.Table, len(m))
		for k, e := range m {
			v, err := e.value()
			if err != nil {
				return nil, err
			}
			t[k] = v
		}
		return t, nil
	case "array":
		var list []typed
		if err := json.Unmarshal(tv.V, &list); err != nil {
			return bad(err)
		}
		out := make([]any, len(list))
		for i, e := range list {
			v, err := e.value()
			if err != nil {
				return nil, err
			}
			out[i] = v
		}
		return out, nil
	}
	if !scalarTag(tv.T) {
		return nil, fmt.Errorf("%w: unknown value type %q", errEnvelope, tv.T)
	}
	var s string
	if err := json.Unmarshal(tv.V, &s); err != nil {
		return bad(err)
	}
	return scalarValue(tv.T, s)
}

// scalarTag says whether values of type tag are written as a JSON string.
func scalarTag(tag string) bool {
	switch tag {
	case "i8", "u8", "i16", "u16", "i32", "u32", "i64", "int", "f32", "f64", "str", "str64", "bytes", "time":
		return true
	}
	return false
}

// scalarValue is the value of type tag (one scalarTag accepts) written as s.
func scalarValue(tag, s string) (any, error) {
	intOf := func(bits int) (int64, error) { return strconv.ParseInt(s, 10, bits) }
	uintOf := func(bits int) (uint64, error) { return strconv.ParseUint(s, 10, bits) }
	var (
		v   any
		err error
	)
	switch tag {
	case "i8":
		var n int64
		n, err = intOf(8)
		v = int8(n)
	case "u8":
		var n uint64
		n, err = uintOf(8)
		v = uint8(n)
	case "i16":
		var n int64
		n, err = intOf(16)
		v = int16(n)
	case "u16":
		var n uint64
		n, err = uintOf(16)
		v = uint16(n)
	case "i32":
		var n int64
		n, err = intOf(32)
		v = int32(n)
	case "u32":
		var n uint64
		n, err = uintOf(32)
		v = uint32(n)
	case "i64":
		v, err = intOf(64)
	case "int":
		var n int64
		n, err = intOf(64)
		v = int(n)
	case "f32":
		var f float64
		f, err = strconv.ParseFloat(s, 32)
		v = float32(f)
	case "f64":
		v, err = strconv.ParseFloat(s, 64)
	case "str":
		v = s
	case "str64", "bytes":
		var b []byte
		b, err = base64.StdEncoding.DecodeString(s)
		if tag == "str64" {
			v = string(b)
		} else {
			v = b
		}
	case "time":
		v, err = time.Parse(time.RFC3339Nano, s)
	default:
		return nil, fmt.Errorf("%w: unknown value type %q", errEnvelope, tag)
	}
	if err != nil {
		return nil, fmt.Errorf("%w: %s value: %w", errEnvelope, tag, err)
	}
	return v, nil
}
