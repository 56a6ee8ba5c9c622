package broker

import (
	"encoding/binary"
	"errors"
	"fmt"
	"maps"
	"math"
	"reflect"
	"slices"
	"strings"
	"testing"
	"time"

	amqp "github.com/rabbitmq/amqp091-go"

	"github.com/acemq/acemq-flow/broker/transport"
)

// The fuzz input of FuzzEnvelopeHeaders is a header table in a small
// encoding every byte string decodes as (a missing byte reads as zero), so
// that no mutation is wasted on a parse error. An entry is a key byte (one
// of fuzzHeaderNames, or above them a key of its own spelled out after it)
// and a value: a tag byte, then the value. Integers are varints, so that a
// mutated byte reaches both 1 and math.MinInt64.
var fuzzHeaderNames = []string{
	HeaderFirstSeen, HeaderAttempt, HeaderError, HeaderQueue, HeaderCausationID, HeaderRunID,
	HeaderRoute, HeaderRoutePosition,
	"x-acemq-unknown", "X-AceMQ-Attempt", HeaderRoutingSlip, HeaderReplayCount, "x-death", "traceparent",
}

const (
	fuzzTagNil = iota
	fuzzTagBool
	fuzzTagInt8
	fuzzTagUint8
	fuzzTagInt16
	fuzzTagUint16
	fuzzTagInt32
	fuzzTagUint32
	fuzzTagInt64
	fuzzTagInt
	fuzzTagFloat32
	fuzzTagFloat64
	fuzzTagString
	fuzzTagBytes
	fuzzTagTime
	fuzzTagArray
	fuzzTagTable
	// A type that is no AMQP field value of this library's, as amqp091-go
	// hands over an AMQP decimal.
	fuzzTagDecimal
	fuzzTags
)

// fuzzMaxDepth and fuzzMaxElems keep one input from growing a table larger
// than the bytes that spell it could justify.
const (
	fuzzMaxDepth = 6
	fuzzMaxElems = 64
)

// fuzzMaxInput bounds the inputs worth trying: a longer one reaches
// nothing a shorter one does not, and the fuzzer's minimizing of every new
// input takes time that grows with the square of its length (a 1 KB input
// kept a worker busy for over a minute).
const fuzzMaxInput = 192

type fuzzReader struct{ b []byte }

func (r *fuzzReader) byte() byte {
	if len(r.b) == 0 {
		return 0
	}
	c := r.b[0]
	r.b = r.b[1:]
	return c
}

func (r *fuzzReader) varint() int64 {
	v, n := binary.Varint(r.b)
	if n <= 0 {
		r.b = nil
		return 0
	}
	r.b = r.b[n:]
	return v
}

func (r *fuzzReader) bytes() []byte {
	n := min(int(r.byte()), len(r.b))
	out := append([]byte{}, r.b[:n]...)
	r.b = r.b[n:]
	return out
}

func (r *fuzzReader) table(depth int) transport.Table {
	t := transport.Table{}
	for n := min(int(r.byte()), fuzzMaxElems); n > 0 && len(r.b) > 0; n-- {
		t[r.key()] = r.value(depth)
	}
	return t
}

func (r *fuzzReader) key() string {
	k := int(r.byte())
	if k < len(fuzzHeaderNames) {
		return fuzzHeaderNames[k]
	}
	return string(r.bytes())
}

func (r *fuzzReader) value(depth int) any {
	switch r.byte() % fuzzTags {
	case fuzzTagBool:
		return r.byte()&1 == 1
	case fuzzTagInt8:
		return int8(r.varint())
	case fuzzTagUint8:
		return uint8(r.varint())
	case fuzzTagInt16:
		return int16(r.varint())
	case fuzzTagUint16:
		return uint16(r.varint())
	case fuzzTagInt32:
		return int32(r.varint())
	case fuzzTagUint32:
		return uint32(r.varint())
	case fuzzTagInt64:
		return r.varint()
	case fuzzTagInt:
		return int(r.varint())
	case fuzzTagFloat32:
		return float32(r.varint())
	case fuzzTagFloat64:
		return math.Float64frombits(uint64(r.varint()))
	case fuzzTagString:
		return string(r.bytes())
	case fuzzTagBytes:
		return r.bytes()
	case fuzzTagTime:
		return time.UnixMilli(r.varint())
	case fuzzTagArray:
		if depth >= fuzzMaxDepth {
			return nil
		}
		n := min(int(r.byte()), fuzzMaxElems)
		arr := make([]any, 0, n)
		for ; n > 0 && len(r.b) > 0; n-- {
			arr = append(arr, r.value(depth+1))
		}
		return arr
	case fuzzTagTable:
		if depth >= fuzzMaxDepth {
			return nil
		}
		return r.table(depth + 1)
	case fuzzTagDecimal:
		return amqp.Decimal{Scale: r.byte(), Value: int32(r.varint())}
	default:
		return nil
	}
}

// Seed builders: the encoding above, written out.
func fuzzEntry(name string, value []byte) []byte {
	if i := slices.Index(fuzzHeaderNames, name); i >= 0 {
		return append([]byte{byte(i)}, value...)
	}
	return append(append([]byte{byte(len(fuzzHeaderNames)), byte(len(name))}, name...), value...)
}

func fuzzInt(tag byte, n int64) []byte { return binary.AppendVarint([]byte{tag}, n) }

func fuzzStr(s string) []byte { return append([]byte{fuzzTagString, byte(len(s))}, s...) }

func fuzzArr(elems ...[]byte) []byte {
	return slices.Concat(append([][]byte{{fuzzTagArray, byte(len(elems))}}, elems...)...)
}

func fuzzHeaders(entries ...[]byte) []byte {
	return slices.Concat(append([][]byte{{byte(len(entries))}}, entries...)...)
}

// fuzzMalformed lists the engine headers of h that the contract's types
// rule out, each with the value the error should name.
func fuzzMalformed(h transport.Table) map[string]any {
	bad := map[string]any{}
	if v, ok := h[HeaderFirstSeen]; ok {
		if _, isInt := transport.Int(v); !isInt {
			bad[HeaderFirstSeen] = v
		}
	}
	if v, ok := h[HeaderAttempt]; ok {
		if n, isInt := transport.Int(v); !isInt || n < 1 {
			bad[HeaderAttempt] = v
		}
	}
	for _, k := range []string{HeaderCausationID, HeaderRunID, HeaderError, HeaderQueue} {
		switch h[k].(type) {
		case nil, string, []byte:
		default:
			bad[k] = h[k]
		}
	}
	if v, ok := h[HeaderRoute]; ok {
		arr, isArr := v.([]any)
		if !isArr || len(arr) == 0 || slices.ContainsFunc(arr, func(e any) bool { _, s := e.(string); return !s }) {
			bad[HeaderRoute] = v
			return bad
		}
		var pos any = int64(0)
		if p, ok := h[HeaderRoutePosition]; ok {
			pos = p
		}
		if n, isInt := transport.Int(pos); !isInt || n < 0 || n >= int64(len(arr)) {
			bad[HeaderRoutePosition] = pos
		}
	}
	return bad
}

// fuzzSame compares header values as their Go syntax: unlike
// reflect.DeepEqual it takes a NaN for itself.
func fuzzSame(a, b any) bool { return fmt.Sprintf("%#v", a) == fmt.Sprintf("%#v", b) }

func fuzzHeaderString(v any) string {
	if b, ok := v.([]byte); ok {
		return string(b)
	}
	s, _ := v.(string)
	return s
}

// FuzzEnvelopeHeaders: whatever headers a delivery carries, reading its
// envelope never panics; it fails exactly when an engine header is present
// with a value the contract rules out (a route position outside the route
// included), and then with a *MalformedHeaderError naming one of them;
// otherwise every typed field is what the header said, and the envelope
// written back reads the same again.
func FuzzEnvelopeHeaders(f *testing.F) {
	seeds := [][]byte{
		{},
		fuzzHeaders(fuzzEntry(HeaderFirstSeen, fuzzInt(fuzzTagInt64, 1764489600123)), fuzzEntry(HeaderAttempt, fuzzInt(fuzzTagInt32, 3)),
			fuzzEntry(HeaderRunID, fuzzStr("run-1")), fuzzEntry(HeaderCausationID, append([]byte{fuzzTagBytes, 2}, "m1"...)),
			fuzzEntry("app", fuzzStr("kept"))),
		fuzzHeaders(fuzzEntry(HeaderRoute, fuzzArr(fuzzStr("validate"), fuzzStr("charge"), fuzzStr("ship"))),
			fuzzEntry(HeaderRoutePosition, fuzzInt(fuzzTagUint8, 2))),
		// The position one past the route's end, and one far below it.
		fuzzHeaders(fuzzEntry(HeaderRoute, fuzzArr(fuzzStr("a"), fuzzStr("b"))), fuzzEntry(HeaderRoutePosition, fuzzInt(fuzzTagInt16, 2))),
		fuzzHeaders(fuzzEntry(HeaderRoute, fuzzArr(fuzzStr("a"))), fuzzEntry(HeaderRoutePosition, fuzzInt(fuzzTagInt64, math.MinInt64))),
		fuzzHeaders(fuzzEntry(HeaderRoute, fuzzArr()), fuzzEntry(HeaderAttempt, fuzzInt(fuzzTagInt, math.MaxInt64))),
		fuzzHeaders(fuzzEntry(HeaderRoute, fuzzArr(fuzzStr("a"), fuzzInt(fuzzTagInt8, 1)))),
		fuzzHeaders(fuzzEntry(HeaderRoute, fuzzStr("a,b"))),
		fuzzHeaders(fuzzEntry(HeaderAttempt, fuzzInt(fuzzTagInt64, 0)), fuzzEntry(HeaderFirstSeen, fuzzInt(fuzzTagInt64, -1))),
		fuzzHeaders(fuzzEntry(HeaderFirstSeen, fuzzStr("1764489600123"))),
		fuzzHeaders(fuzzEntry(HeaderFirstSeen, fuzzInt(fuzzTagTime, 1764489600123))),
		fuzzHeaders(fuzzEntry(HeaderAttempt, fuzzInt(fuzzTagFloat64, int64(math.Float64bits(2))))),
		fuzzHeaders(fuzzEntry(HeaderError, []byte{fuzzTagDecimal, 2, 8})),
		fuzzHeaders(fuzzEntry(HeaderQueue, []byte{fuzzTagTable, 1, byte(len(fuzzHeaderNames)), 1, 'k', fuzzTagNil})),
		fuzzHeaders(fuzzEntry("x-acemq-unknown", fuzzStr("hidden")), fuzzEntry("X-AceMQ-Attempt", fuzzInt(fuzzTagInt64, -5)),
			fuzzEntry("x-death", fuzzArr([]byte{fuzzTagTable, 1, byte(len(fuzzHeaderNames)), 5, 'c', 'o', 'u', 'n', 't', fuzzTagInt64, 2}))),
	}
	for _, s := range seeds {
		f.Add(s, int64(0))
		f.Add(s, int64(1764489600))
	}
	// AMQP timestamps (in seconds) beyond what epoch milliseconds hold: the
	// fuzzer moves an int only a little way from its seeds.
	for _, ts := range []int64{math.MaxInt64, 1e18, math.MaxInt64 / 1000, math.MaxInt64/1000 + 1, math.MinInt64/1000 - 1, math.MinInt64} {
		f.Add([]byte{}, ts)
	}
	now := time.UnixMilli(1764489600123)
	f.Fuzz(func(t *testing.T, data []byte, timestamp int64) {
		if len(data) > fuzzMaxInput {
			return
		}
		m := transport.Message{MessageID: "m"}
		if len(data) > 0 {
			r := fuzzReader{b: data}
			m.Headers = r.table(0)
		}
		if timestamp != 0 {
			m.Timestamp = time.Unix(timestamp, 0)
		}
		orig := maps.Clone(m.Headers)
		before := fmt.Sprintf("%#v", orig)
		bad := fuzzMalformed(orig)

		e, app, err := EnvelopeOf(&m)
		if after := fmt.Sprintf("%#v", m.Headers); after != before {
			t.Fatalf("EnvelopeOf changed the headers: %s, now %s", before, after)
		}
		if len(bad) > 0 {
			var mh *MalformedHeaderError
			if !errors.As(err, &mh) {
				t.Fatalf("malformed %v: got %v, want a *MalformedHeaderError", bad, err)
			}
			want, ok := bad[mh.Header]
			if !ok || !fuzzSame(want, mh.Value) || !strings.Contains(err.Error(), mh.Header) {
				t.Fatalf("error %q names %s = %#v; malformed are %#v", err, mh.Header, mh.Value, bad)
			}
			return
		}
		if err != nil {
			t.Fatalf("well-formed headers %#v refused: %v", orig, err)
		}
		wantApp := transport.Table{}
		for k, v := range orig {
			if !strings.HasPrefix(k, ReservedPrefix) {
				wantApp[k] = v
			}
		}
		if !fuzzSame(wantApp, app) {
			t.Fatalf("application headers %#v, want %#v", app, wantApp)
		}
		wantAttempt := int64(1)
		if v, ok := orig[HeaderAttempt]; ok {
			wantAttempt, _ = transport.Int(v)
		}
		if int64(e.Attempt) != wantAttempt {
			t.Fatalf("attempt %d, want %d", e.Attempt, wantAttempt)
		}
		if v, ok := orig[HeaderFirstSeen]; ok {
			ms, _ := transport.Int(v)
			if e.FirstSeen.UnixMilli() != ms {
				t.Fatalf("first seen %d, want %d", e.FirstSeen.UnixMilli(), ms)
			}
		}
		for k, got := range map[string]string{HeaderCausationID: e.CausationID, HeaderRunID: e.RunID, HeaderError: e.Error, HeaderQueue: e.SourceQueue} {
			if want := fuzzHeaderString(orig[k]); got != want {
				t.Fatalf("%s %q, want %q", k, got, want)
			}
		}
		if v, ok := orig[HeaderRoute]; ok {
			route := v.([]any)
			if len(e.Route) != len(route) || e.RoutePosition < 0 || e.RoutePosition >= len(route) {
				t.Fatalf("route %q position %d from %#v", e.Route, e.RoutePosition, route)
			}
			for i, s := range route {
				if e.Route[i] != s {
					t.Fatalf("route %q from %#v", e.Route, route)
				}
			}
		} else if e.Route != nil {
			t.Fatalf("route %q from no header", e.Route)
		}

		// The envelope written back (as every republish writes it) reads the
		// same.
		written := transport.Message{Headers: transport.Table{}}
		e.encode(&written, written.Headers)
		again, _, err := EnvelopeOf(&written)
		if err != nil {
			t.Fatalf("cannot read the envelope it wrote %#v: %v", written.Headers, err)
		}
		if !reflect.DeepEqual(e.Route, again.Route) || e.RoutePosition != again.RoutePosition || e.Attempt != again.Attempt ||
			e.FirstSeen.UnixMilli() != again.FirstSeen.UnixMilli() || e.RunID != again.RunID || e.CausationID != again.CausationID ||
			e.Error != again.Error || e.SourceQueue != again.SourceQueue {
			t.Fatalf("written back %#v, read %#v", e, again)
		}

		// A consumer writes in the first-seen it works out for a delivery
		// without one, and reads what it wrote.
		consumed, _, err := decodeEnvelope(&m, now)
		if err != nil {
			t.Fatalf("decodeEnvelope refused what EnvelopeOf read: %v", err)
		}
		written1, ok := m.Headers[HeaderFirstSeen]
		if ms, isInt := transport.Int(written1); !ok || !isInt || ms != consumed.FirstSeen.UnixMilli() {
			t.Fatalf("first seen %v written as %#v", consumed.FirstSeen, written1)
		}
		// Without the header: the timestamp property, unless there is none
		// or epoch milliseconds cannot hold it.
		wantFirst := now
		if ts := m.Timestamp; !ts.IsZero() && time.UnixMilli(ts.UnixMilli()).Equal(ts) {
			wantFirst = ts
		}
		if _, had := orig[HeaderFirstSeen]; !had && !consumed.FirstSeen.Equal(wantFirst) {
			t.Fatalf("first seen %v, want %v (timestamp %v)", consumed.FirstSeen, wantFirst, m.Timestamp)
		}
	})
}
