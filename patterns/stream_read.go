package patterns

import (
	"context"
	"fmt"
	"math"
	"sync"
	"time"

	"github.com/acemq/acemq-flow/broker"
)

// DefaultStreamPrefetch is the prefetch a stream reader gets when none is
// given (docs/wire.md). It is this library's choice, not the contract: the
// Java and .NET libraries use 100.
const DefaultStreamPrefetch = 10

// ReadStream starts reading the stream name from offset with h, and returns
// the running consumer (cancel it, or close conn, to stop). ctx bounds the
// setup only.
//
// The consumer tag is the stream's name unless opts give one with
// broker.Tag: give every reader a stable tag. The prefetch is always set
// (DefaultStreamPrefetch unless broker.Prefetch says otherwise), because
// RabbitMQ refuses a stream consumer without one. The reader consumes with
// broker.OnStream: no retry policy unless broker.WithRetry names one (a
// retry would append a second copy to the stream), never an automatic
// acknowledgement, nack or reject, and InProgress dead-letters instead of
// putting back. Other consume options (Concurrency, WithCodec, Use) pass
// through. StreamOffsetOf reads a message's offset.
//
// After a reconnect the reader resumes from its in-process position, not
// from offset: the oldest message it had in a handler, or one past the
// newest it handled, so nothing appended meanwhile is skipped and only what
// was in a handler is read again. Before anything arrived it resumes from
// offset, except that "next" and "last" become the time the reader started.
// A restarted process starts from offset again: save StreamOffsetOf and
// resume with StreamAt(saved+1).
//
// It refuses a negative StreamAt (broker.ErrInvalidOption) and the
// loopback transport, which does not implement streams
// (transport.ErrNotSupported).
func ReadStream(ctx context.Context, conn *broker.Conn, name string, offset StreamOffset, h broker.Handler, opts ...broker.ConsumeOption) (*broker.Consumer, error) {
	if conn == nil || name == "" || h == nil {
		return nil, fmt.Errorf("%w: read stream: need a connection, a stream name and a handler", broker.ErrInvalidOption)
	}
	arg, err := offset.Arg()
	if err != nil {
		return nil, fmt.Errorf("read stream %q: %w", name, err)
	}
	pos := &streamPosition{start: arg, started: time.Now()}
	all := append([]broker.ConsumeOption{
		broker.Tag(name),
		broker.Prefetch(DefaultStreamPrefetch),
	}, opts...)
	all = append(all,
		broker.OnStream(),
		broker.ConsumeArgs(broker.Table{broker.HeaderStreamOffset: arg}, pos.resume),
	)
	k, err := conn.Consume(ctx, name, pos.track(h), all...)
	if err != nil {
		return nil, fmt.Errorf("read stream %q from %s: %w", name, offset, err)
	}
	return k, nil
}

// streamPosition is a reader's in-process position: the offsets in a
// handler right now, and the newest one handled.
type streamPosition struct {
	start   any
	started time.Time

	mu         sync.Mutex
	inHandler  map[int64]int
	newest     int64
	hasHandled bool
}

// track wraps h to record the offset of every message it handles.
func (p *streamPosition) track(h broker.Handler) broker.Handler {
	return func(ctx context.Context, m *broker.Message) broker.Ack {
		off, ok := StreamOffsetOf(m)
		if !ok || off < 0 {
			// The broker writes no negative offset: such a header is not a
			// position to resume from (RabbitMQ closes the connection on it).
			return h(ctx, m)
		}
		p.mu.Lock()
		if p.inHandler == nil {
			p.inHandler = map[int64]int{}
		}
		p.inHandler[off]++
		p.mu.Unlock()
		// Deferred so that a panicking handler (recovered by the consumer)
		// still leaves the handler.
		defer p.handled(off)
		return h(ctx, m)
	}
}

func (p *streamPosition) handled(off int64) {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.inHandler[off]--; p.inHandler[off] <= 0 {
		delete(p.inHandler, off)
	}
	if !p.hasHandled || off > p.newest {
		p.newest, p.hasHandled = off, true
	}
}

// resume is the x-stream-offset to resubscribe from after a reconnect.
func (p *streamPosition) resume() broker.Table {
	p.mu.Lock()
	defer p.mu.Unlock()
	var arg any
	switch {
	case len(p.inHandler) > 0:
		oldest := int64(-1)
		for off := range p.inHandler {
			if oldest < 0 || off < oldest {
				oldest = off
			}
		}
		arg = oldest
	case p.hasHandled && p.newest == math.MaxInt64:
		// There is no offset past it; reading it again beats wrapping round
		// to a negative one.
		arg = p.newest
	case p.hasHandled:
		arg = p.newest + 1
	case p.start == "next" || p.start == "last":
		// Nothing arrived yet; "next" again would skip whatever was
		// appended while the reader was away.
		arg = p.started
	default:
		arg = p.start
	}
	return broker.Table{broker.HeaderStreamOffset: arg}
}
