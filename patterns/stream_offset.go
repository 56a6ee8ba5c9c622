package patterns

import (
	"fmt"
	"strconv"
	"time"

	"github.com/acemq/acemq-flow/broker"
	"github.com/acemq/acemq-flow/broker/transport"
)

// streamOffsetKind says which of the five positions a StreamOffset is.
type streamOffsetKind int

const (
	streamNext streamOffsetKind = iota // the zero value: the broker's own default
	streamFirst
	streamLast
	streamAt
	streamSince
)

// StreamOffset is where a stream reader starts: an immutable value, safe to
// build once and share. The zero value is StreamNext.
type StreamOffset struct {
	kind streamOffsetKind
	at   int64
	t    time.Time
}

// StreamFirst starts at the oldest message the stream still holds, which
// after retention has discarded some is not the first one ever written.
func StreamFirst() StreamOffset { return StreamOffset{kind: streamFirst} }

// StreamNext starts with what arrives from now on; what a reader that names
// no position gets, and wrong for a projection, which silently skips its
// history with it.
func StreamNext() StreamOffset { return StreamOffset{kind: streamNext} }

// StreamLast starts at the last chunk the stream wrote: roughly "recently".
func StreamLast() StreamOffset { return StreamOffset{kind: streamLast} }

// StreamAt starts at an exact offset (0 is the first message ever written);
// resume a saved checkpoint with StreamAt(saved+1). ReadStream refuses a
// negative offset.
func StreamAt(offset int64) StreamOffset { return StreamOffset{kind: streamAt, at: offset} }

// StreamSince starts at the first message written at or after t. The broker
// resolves it to a chunk with one-second timestamps, so a reader may also
// see messages from up to a second earlier.
func StreamSince(t time.Time) StreamOffset { return StreamOffset{kind: streamSince, t: t} }

// Arg is the x-stream-offset value for o: "first", "last" or "next", an
// int64, or a time.Time (an AMQP timestamp). It refuses a negative StreamAt
// (broker.ErrInvalidOption): the broker would close the connection on it.
func (o StreamOffset) Arg() (any, error) {
	switch o.kind {
	case streamFirst:
		return "first", nil
	case streamLast:
		return "last", nil
	case streamAt:
		if o.at < 0 {
			return nil, fmt.Errorf("%w: stream offset %d, want 0 or more", broker.ErrInvalidOption, o.at)
		}
		return o.at, nil
	case streamSince:
		return o.t, nil
	default:
		return "next", nil
	}
}

// String reads as the position: "first", "at 4211", "since 2025-...".
func (o StreamOffset) String() string {
	switch o.kind {
	case streamAt:
		return "at " + strconv.FormatInt(o.at, 10)
	case streamSince:
		return "since " + o.t.Format(time.RFC3339)
	case streamFirst:
		return "first"
	case streamLast:
		return "last"
	default:
		return "next"
	}
}

// StreamOffsetOf is the broker's x-stream-offset of a message read from a
// stream, as an int64 whatever integer width it arrived in, and false for a
// message that carries none.
func StreamOffsetOf(m *broker.Message) (int64, bool) {
	v, ok := m.Headers[broker.HeaderStreamOffset]
	if !ok {
		return 0, false
	}
	return transport.Int(v)
}
