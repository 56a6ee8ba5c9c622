package broker

import (
	"encoding/binary"
	"fmt"
	"math"
	"time"

	"github.com/acemq/acemq-flow/broker/transport"
)

// outgoingBinaryVersion starts what MarshalBinary writes, so that a later
// format can be told from this one.
const outgoingBinaryVersion = 0xA1

// Value tags of the binary form: each AMQP field value is written with the
// Go type it had, so that it goes back on the wire exactly as it was.
const (
	tagNil byte = iota
	tagFalse
	tagTrue
	tagInt8
	tagUint8
	tagInt16
	tagUint16
	tagInt32
	tagUint32
	tagInt64
	tagInt
	tagFloat32
	tagFloat64
	tagString
	tagBytes
	tagTime
	tagTable
	tagArray
)

// maxBinaryDepth bounds how deeply tables and arrays nest in what
// UnmarshalBinary reads: a damaged or hostile input must not exhaust the
// stack.
const maxBinaryDepth = 64

// MarshalBinary encodes o whole (Mandatory aside) in a compact binary
// form: what is kept of a prepared message that may have to be sent again
// exactly as it was (patterns.ResultStore). Every header value keeps its
// AMQP type. A header value that is not an AMQP field value is refused
// with transport.ErrInvalidHeader.
func (o Outgoing) MarshalBinary() ([]byte, error) {
	m := o.Message
	size := 64 + len(m.Body) + len(o.Exchange) + len(o.RoutingKey) + len(m.MessageID) + len(m.CorrelationID)
	b := append(make([]byte, 0, size), outgoingBinaryVersion)
	for _, s := range []string{o.Exchange, o.RoutingKey, m.MessageID, m.CorrelationID, m.Type, m.ContentType, m.ReplyTo, m.Expiration} {
		b = appendString(b, s)
	}
	var ts int64
	if !m.Timestamp.IsZero() {
		ts = m.Timestamp.UnixNano()
	}
	b = binary.AppendVarint(b, ts)
	b, err := appendTable(b, m.Headers, 0)
	if err != nil {
		return nil, err
	}
	b = binary.AppendUvarint(b, uint64(len(m.Body)))
	return append(b, m.Body...), nil
}

func appendString(b []byte, s string) []byte {
	b = binary.AppendUvarint(b, uint64(len(s)))
	return append(b, s...)
}

func appendTable(b []byte, t transport.Table, depth int) ([]byte, error) {
	if depth > maxBinaryDepth {
		return nil, fmt.Errorf("%w: headers nested more than %d deep", transport.ErrInvalidHeader, maxBinaryDepth)
	}
	b = binary.AppendUvarint(b, uint64(len(t)))
	var err error
	for k, v := range t {
		b = appendString(b, k)
		if b, err = appendValue(b, v, depth); err != nil {
			return nil, fmt.Errorf("%q: %w", k, err)
		}
	}
	return b, nil
}

func appendValue(b []byte, v any, depth int) ([]byte, error) {
	switch x := v.(type) {
	case nil:
		return append(b, tagNil), nil
	case bool:
		if x {
			return append(b, tagTrue), nil
		}
		return append(b, tagFalse), nil
	case int8:
		return append(b, tagInt8, byte(x)), nil
	case uint8:
		return append(b, tagUint8, x), nil
	case int16:
		return binary.AppendVarint(append(b, tagInt16), int64(x)), nil
	case uint16:
		return binary.AppendUvarint(append(b, tagUint16), uint64(x)), nil
	case int32:
		return binary.AppendVarint(append(b, tagInt32), int64(x)), nil
	case uint32:
		return binary.AppendUvarint(append(b, tagUint32), uint64(x)), nil
	case int64:
		return binary.AppendVarint(append(b, tagInt64), x), nil
	case int:
		return binary.AppendVarint(append(b, tagInt), int64(x)), nil
	case float32:
		return binary.BigEndian.AppendUint32(append(b, tagFloat32), math.Float32bits(x)), nil
	case float64:
		return binary.BigEndian.AppendUint64(append(b, tagFloat64), math.Float64bits(x)), nil
	case string:
		return appendString(append(b, tagString), x), nil
	case []byte:
		b = binary.AppendUvarint(append(b, tagBytes), uint64(len(x)))
		return append(b, x...), nil
	case time.Time:
		return binary.AppendVarint(append(b, tagTime), x.UnixNano()), nil
	case transport.Table:
		return appendTable(append(b, tagTable), x, depth+1)
	case map[string]any:
		return appendTable(append(b, tagTable), transport.Table(x), depth+1)
	case []any:
		if depth > maxBinaryDepth {
			return nil, fmt.Errorf("%w: headers nested more than %d deep", transport.ErrInvalidHeader, maxBinaryDepth)
		}
		b = binary.AppendUvarint(append(b, tagArray), uint64(len(x)))
		var err error
		for _, e := range x {
			if b, err = appendValue(b, e, depth+1); err != nil {
				return nil, err
			}
		}
		return b, nil
	default:
		return nil, fmt.Errorf("%w: %T", transport.ErrInvalidHeader, v)
	}
}

// UnmarshalBinary reads what MarshalBinary wrote. Input it cannot read
// (another format, truncated, damaged) is an error matching
// ErrUnreadableEnvelope; it never panics.
func (o *Outgoing) UnmarshalBinary(data []byte) error {
	r := binReader{b: data}
	if v := r.byte(); v != outgoingBinaryVersion {
		return fmt.Errorf("%w: binary form %#x, want %#x", ErrUnreadableEnvelope, v, outgoingBinaryVersion)
	}
	var out Outgoing
	m := &out.Message
	for _, f := range []*string{&out.Exchange, &out.RoutingKey, &m.MessageID, &m.CorrelationID, &m.Type, &m.ContentType, &m.ReplyTo, &m.Expiration} {
		*f = r.string()
	}
	if ts := r.varint(); ts != 0 {
		m.Timestamp = time.Unix(0, ts)
	}
	m.Headers = r.table(0)
	n := r.uvarint()
	if r.err == nil && n > uint64(len(r.b)) {
		r.fail("body of %d bytes, %d left", n, len(r.b))
	}
	if r.err != nil {
		return r.err
	}
	m.Body = append([]byte(nil), r.b[:n]...)
	if len(r.b) != int(n) {
		return fmt.Errorf("%w: %d bytes after the body", ErrUnreadableEnvelope, len(r.b)-int(n))
	}
	*o = out
	return nil
}

// binReader reads the binary form, keeping the first error and reading
// zero values after it.
type binReader struct {
	b   []byte
	err error
}

func (r *binReader) fail(format string, args ...any) {
	if r.err == nil {
		r.err = fmt.Errorf("%w: "+format, append([]any{ErrUnreadableEnvelope}, args...)...)
	}
	r.b = nil
}

func (r *binReader) byte() byte {
	if r.err != nil || len(r.b) == 0 {
		r.fail("truncated")
		return 0
	}
	c := r.b[0]
	r.b = r.b[1:]
	return c
}

func (r *binReader) uvarint() uint64 {
	if r.err != nil {
		return 0
	}
	v, n := binary.Uvarint(r.b)
	if n <= 0 {
		r.fail("bad length")
		return 0
	}
	r.b = r.b[n:]
	return v
}

func (r *binReader) varint() int64 {
	if r.err != nil {
		return 0
	}
	v, n := binary.Varint(r.b)
	if n <= 0 {
		r.fail("bad number")
		return 0
	}
	r.b = r.b[n:]
	return v
}

func (r *binReader) bytes() []byte {
	n := r.uvarint()
	if r.err != nil {
		return nil
	}
	if n > uint64(len(r.b)) {
		r.fail("%d bytes wanted, %d left", n, len(r.b))
		return nil
	}
	out := r.b[:n:n]
	r.b = r.b[n:]
	return out
}

func (r *binReader) string() string { return string(r.bytes()) }

func (r *binReader) fixed(n int) []byte {
	if r.err != nil || len(r.b) < n {
		r.fail("truncated")
		return make([]byte, n)
	}
	out := r.b[:n]
	r.b = r.b[n:]
	return out
}

func (r *binReader) table(depth int) transport.Table {
	if depth > maxBinaryDepth {
		r.fail("nested more than %d deep", maxBinaryDepth)
		return nil
	}
	n := r.uvarint()
	if r.err != nil {
		return nil
	}
	// Every entry takes at least two bytes: a count beyond that is damage.
	if n > uint64(len(r.b))/2 {
		r.fail("%d headers in %d bytes", n, len(r.b))
		return nil
	}
	t := make(transport.Table, n)
	for range n {
		k := r.string()
		t[k] = r.value(depth)
		if r.err != nil {
			return nil
		}
	}
	return t
}

func (r *binReader) value(depth int) any {
	switch tag := r.byte(); tag {
	case tagNil:
		return nil
	case tagFalse:
		return false
	case tagTrue:
		return true
	case tagInt8:
		return int8(r.byte())
	case tagUint8:
		return r.byte()
	case tagInt16:
		return int16(r.varint())
	case tagUint16:
		return uint16(r.uvarint())
	case tagInt32:
		return int32(r.varint())
	case tagUint32:
		return uint32(r.uvarint())
	case tagInt64:
		return r.varint()
	case tagInt:
		return int(r.varint())
	case tagFloat32:
		return math.Float32frombits(binary.BigEndian.Uint32(r.fixed(4)))
	case tagFloat64:
		return math.Float64frombits(binary.BigEndian.Uint64(r.fixed(8)))
	case tagString:
		return r.string()
	case tagBytes:
		src := r.bytes()
		out := make([]byte, len(src))
		copy(out, src)
		return out
	case tagTime:
		return time.Unix(0, r.varint())
	case tagTable:
		return r.table(depth + 1)
	case tagArray:
		if depth > maxBinaryDepth {
			r.fail("nested more than %d deep", maxBinaryDepth)
			return nil
		}
		n := r.uvarint()
		if r.err != nil || n > uint64(len(r.b)) {
			r.fail("array of %d in %d bytes", n, len(r.b))
			return nil
		}
		out := make([]any, n)
		for i := range out {
			out[i] = r.value(depth + 1)
		}
		return out
	default:
		r.fail("unknown value tag %d", tag)
		return nil
	}
}
