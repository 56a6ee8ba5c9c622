package patterns

import (
	"context"
	"fmt"
	"time"

	"github.com/acemq/acemq-flow/broker"
)

// Stream queue arguments (docs/wire.md).
const (
	streamArgType        = "x-queue-type"
	streamArgMaxAge      = "x-max-age"
	streamArgMaxBytes    = "x-max-length-bytes"
	streamArgSegmentSize = "x-stream-max-segment-size-bytes"
)

// StreamDeclarer is what DeclareStream declares through: a *broker.Conn, or
// a transport.Transport for a topology tool with no connection in hand.
type StreamDeclarer interface {
	Declare(ctx context.Context, t broker.Topology) error
}

// StreamRetention is how much a stream keeps. The zero value keeps
// everything until the disk is full, which is legal and almost always a
// mistake: set MaxAge or MaxBytes on anything that runs for long.
type StreamRetention struct {
	// MaxAge discards messages older than this (x-max-age), in whole
	// seconds, rendered in the largest whole unit of D, h, m and s (0 =
	// no limit).
	MaxAge time.Duration
	// MaxBytes caps the stream's size on disk (x-max-length-bytes; 0 = no
	// limit).
	MaxBytes int64
	// SegmentBytes is the size of each segment file
	// (x-stream-max-segment-size-bytes), sent only when set: retention
	// discards whole segments, so this is the granularity of the other two.
	// Leaving it out keeps the declaration identical to the other AceMQ
	// libraries' (0 = the broker's default).
	SegmentBytes int64
}

// Args are the queue arguments declaring a stream with this retention. It
// refuses negative values and a MaxAge that is not a whole number of
// seconds (broker.ErrInvalidOption).
func (r StreamRetention) Args() (broker.Table, error) {
	switch {
	case r.MaxAge < 0, r.MaxBytes < 0, r.SegmentBytes < 0:
		return nil, fmt.Errorf("%w: negative stream retention %+v", broker.ErrInvalidOption, r)
	case r.MaxAge%time.Second != 0:
		return nil, fmt.Errorf("%w: stream max age %s is not a whole number of seconds", broker.ErrInvalidOption, r.MaxAge)
	}
	args := broker.Table{streamArgType: "stream"}
	if r.MaxAge > 0 {
		args[streamArgMaxAge] = streamMaxAge(r.MaxAge)
	}
	if r.MaxBytes > 0 {
		args[streamArgMaxBytes] = r.MaxBytes
	}
	if r.SegmentBytes > 0 {
		args[streamArgSegmentSize] = r.SegmentBytes
	}
	return args, nil
}

// streamMaxAge renders a whole number of seconds in the largest unit that
// divides it ("7D", "36h", "90s"): the broker refuses a bare number, and
// this reads on the queue the way whoever set it was thinking.
func streamMaxAge(d time.Duration) string {
	s := int64(d / time.Second)
	for _, u := range []struct {
		secs int64
		unit string
	}{{86400, "D"}, {3600, "h"}, {60, "m"}} {
		if s%u.secs == 0 {
			return fmt.Sprintf("%d%s", s/u.secs, u.unit)
		}
	}
	return fmt.Sprintf("%ds", s)
}

// DeclareStream declares name as a stream: durable, neither exclusive nor
// auto-delete (fixed here rather than left to fail at the broker), with the
// retention's arguments. Declaring it again with the same retention is a
// no-op; with a different one it is the broker's PRECONDITION_FAILED. The
// loopback refuses it with transport.ErrNotSupported.
func DeclareStream(ctx context.Context, to StreamDeclarer, name string, r StreamRetention) error {
	if to == nil || name == "" {
		return fmt.Errorf("%w: declare stream: need a connection or transport and a name", broker.ErrInvalidOption)
	}
	args, err := r.Args()
	if err != nil {
		return fmt.Errorf("declare stream %q: %w", name, err)
	}
	err = to.Declare(ctx, broker.Topology{Queues: []broker.Queue{{Name: name, Durable: true, Args: args}}})
	if err != nil {
		return fmt.Errorf("declare stream %q: %w", name, err)
	}
	return nil
}
