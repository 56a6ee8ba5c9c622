package patterns

import (
	"context"
	"encoding/binary"
	"errors"
	"math"
	"slices"
	"testing"
	"time"

	"github.com/acemq/acemq-flow/broker"
)

// streamArgAllowed is the contract's x-stream-offset (docs/wire.md,
// Streams) written out, less RabbitMQ's intervals, which a reader never
// sends: "first", "last", "next", an offset of 0 or more, a timestamp.
func streamArgAllowed(v any) bool {
	switch o := v.(type) {
	case string:
		return o == "first" || o == "last" || o == "next"
	case int64:
		return o >= 0
	case time.Time:
		return true
	}
	return false
}

// streamOffsetHeader is offset n as a header value of the width (or wrong
// type) that w selects.
func streamOffsetHeader(w byte, n int64) any {
	switch w % 7 {
	case 0:
		return n
	case 1:
		return int32(n)
	case 2:
		return uint32(n)
	case 3:
		return int16(n)
	case 4:
		return uint8(n)
	case 5:
		return float64(n)
	default:
		return "4211"
	}
}

// FuzzStreamOffset: a reader's start position (StreamAt over any int64, or
// a named one) is refused when negative and otherwise sent as the
// contract allows; StreamOffsetOf reads an offset of any integer width
// and nothing else; and whatever offsets the messages a reader handles
// carry, and however they overlap in its handlers, the x-stream-offset it
// would resubscribe with after a reconnect is one the contract allows
// (RabbitMQ closes the whole connection on any other): the oldest offset
// still in a handler, or one past the newest handled (the newest itself
// at math.MaxInt64), or the start; a negative offset is ignored.
//
// The message input is a list of (width, nest, varint offset): nest says
// the next message is handled while this one is still in its handler.
func FuzzStreamOffset(f *testing.F) {
	msgs := func(offsets ...int64) []byte {
		var b []byte
		for i, n := range offsets {
			b = binary.AppendVarint(append(b, 0, byte(i%2)), n)
		}
		return b
	}
	for _, start := range []int64{0, 4211, -1, math.MaxInt64, math.MinInt64} {
		for kind := range uint8(5) {
			f.Add(kind, start, msgs(0, 1, 2))
		}
	}
	f.Add(uint8(1), int64(7), msgs())
	f.Add(uint8(1), int64(7), msgs(9, 3, 5, 3))
	f.Add(uint8(1), int64(7), msgs(math.MaxInt64))
	f.Add(uint8(1), int64(7), msgs(math.MaxInt64-1, math.MaxInt64))
	f.Add(uint8(1), int64(7), msgs(-5, 3))
	f.Add(uint8(1), int64(7), msgs(3, -5))
	f.Add(uint8(1), int64(7), []byte{5, 1, 6, 1, 2, 0, 0xff})
	f.Fuzz(func(t *testing.T, kind uint8, start int64, data []byte) {
		if len(data) > 256 {
			return
		}
		offset := []StreamOffset{StreamAt(start), StreamFirst(), StreamLast(), StreamNext(), StreamSince(time.Unix(start, 0))}[kind%5]
		arg, err := offset.Arg()
		switch {
		case kind%5 == 0 && start < 0:
			if !errors.Is(err, broker.ErrInvalidOption) {
				t.Fatalf("StreamAt(%d): %v, %v; want ErrInvalidOption", start, arg, err)
			}
			return
		case err != nil || !streamArgAllowed(arg):
			t.Fatalf("%s: x-stream-offset %#v, %v", offset, arg, err)
		case kind%5 == 0 && arg != start:
			t.Fatalf("StreamAt(%d) sent as %#v", start, arg)
		}

		p := &streamPosition{start: arg, started: time.Unix(1764489600, 0)}
		var inHandler []int64
		newest, handled := int64(0), false
		check := func() {
			got := p.resume()[broker.HeaderStreamOffset]
			if !streamArgAllowed(got) {
				t.Fatalf("resumes with x-stream-offset %#v (in handlers %v, newest %d)", got, inHandler, newest)
			}
			var want any
			switch {
			case len(inHandler) > 0:
				want = slices.Min(inHandler)
			case handled && newest == math.MaxInt64:
				want = newest
			case handled:
				want = newest + 1
			case arg == "next" || arg == "last":
				want = p.started
			default:
				want = arg
			}
			if got != want {
				t.Fatalf("resumes with %#v, want %#v (in handlers %v)", got, want, inHandler)
			}
		}
		r := data
		var handle func()
		handle = func() {
			if len(r) < 2 {
				check()
				return
			}
			width, nest := r[0], r[1]&1 == 1
			n, size := binary.Varint(r[2:])
			if size <= 0 {
				r = nil
				check()
				return
			}
			r = r[2+size:]
			m := &broker.Message{Headers: broker.Table{broker.HeaderStreamOffset: streamOffsetHeader(width, n)}}
			off, ok := StreamOffsetOf(m)
			if want, isInt := streamOffsetInt(m.Headers[broker.HeaderStreamOffset]); ok != isInt || ok && off != want {
				t.Fatalf("StreamOffsetOf(%#v) = %d, %v", m.Headers, off, ok)
			}
			// A negative offset is no position in a stream: not tracked.
			tracked := ok && off >= 0
			p.track(func(context.Context, *broker.Message) broker.Ack {
				if tracked {
					inHandler = append(inHandler, off)
				}
				if nest {
					handle()
				} else {
					check()
				}
				if tracked {
					inHandler = inHandler[:len(inHandler)-1]
				}
				return broker.Ack{}
			})(context.Background(), m)
			if tracked && (!handled || off > newest) {
				newest, handled = off, true
			}
			if !nest {
				handle()
			}
		}
		handle()
	})
}

// streamOffsetInt is an integer header value of any AMQP width.
func streamOffsetInt(v any) (int64, bool) {
	switch n := v.(type) {
	case int64:
		return n, true
	case int32:
		return int64(n), true
	case uint32:
		return int64(n), true
	case int16:
		return int64(n), true
	case uint8:
		return int64(n), true
	}
	return 0, false
}
