package rabbitmq

import (
	"cmp"
	"fmt"
	"log/slog"
	"runtime"
	"slices"
	"sync"
	"time"

	amqp "github.com/rabbitmq/amqp091-go"

	"github.com/acemq/acemq-flow/broker/transport"
)

// heldChannel is a channel that deliveries arrived on (a subscription's, or
// the get channel). It stays open while any of them is unsettled: closing it
// would hand them back to the broker under the feet of whoever holds them.
//
// It also writes the channel's acknowledgements. On a subscription's
// channel an Ack is taken at once and written by a flush running beside
// the caller (one at a time per channel), so that acks taken
// while one is being written go out together: as one basic.ack with
// multiple=true when they are every delivery up to the last of them that is
// still held, each on its own otherwise. A multiple ack therefore only ever
// covers deliveries whose holders acknowledged them, never one still being
// handled or rejected, and the broker parses, and a quorum queue commits,
// one settlement for the lot instead of one per message.
type heldChannel struct {
	t  *Transport
	ch *amqp.Channel
	// coalesce: acks go through the flush. Off on the get channel, where a
	// basic.get on a queue that does not exist closes the channel with an
	// exception, which would take back acks not written yet.
	coalesce bool

	mu sync.Mutex
	// held are the deliveries received on the channel whose settlement is
	// not on the wire yet, in delivery order, which is tag order: at most
	// the prefetch, however long one of them is held.
	held      []heldTag
	unsettled int  // deliveries not settled on the wire
	acked     int  // held deliveries acked and not yet written
	flushing  bool // a flush is writing the acks
	retired   bool // no more deliveries will arrive; close when settled
	closed    bool
}

// heldTag is one delivery of a heldChannel and how far it is settled.
type heldTag struct {
	tag   uint64
	state tagState
}

type tagState uint8

const (
	tagHeld  tagState = iota // with its holder
	tagAcked                 // acked, waiting for the flush to write it
)

// received counts a delivery handed out on this channel.
func (h *heldChannel) received(tag uint64) {
	h.mu.Lock()
	h.held = append(h.held, heldTag{tag: tag})
	h.unsettled++
	h.mu.Unlock()
}

// find is where tag is in held, and whether it is there (it is, until
// its settlement is written: a settler settles once); the caller holds mu.
func (h *heldChannel) find(tag uint64) (int, bool) {
	return slices.BinarySearchFunc(h.held, tag, func(x heldTag, t uint64) int { return cmp.Compare(x.tag, t) })
}

// ack acknowledges tag: on a coalescing channel it takes it for the flush,
// starting one if none is running; on another it writes it at once.
func (h *heldChannel) ack(tag uint64) error {
	if !h.coalesce {
		return h.writeNow(tag, func() error { return h.ch.Ack(tag, false) })
	}
	h.mu.Lock()
	if i, ok := h.find(tag); ok {
		h.held[i].state = tagAcked
		h.acked++
	}
	start := !h.flushing
	h.flushing = true
	h.mu.Unlock()
	if start && !h.t.goAcking(h.flush) {
		// Close is draining the acks: this one is written now, by its caller.
		h.flush()
	}
	return nil
}

// nack writes a nack of tag at once; it is never combined with acks.
func (h *heldChannel) nack(tag uint64, requeue bool) error {
	return h.writeNow(tag, func() error { return h.ch.Nack(tag, false, requeue) })
}

// writeNow writes the settlement of tag with write and counts it.
func (h *heldChannel) writeNow(tag uint64, write func() error) error {
	if err := write(); err != nil {
		return err
	}
	h.t.lastSettle.Store(time.Now().UnixNano())
	h.mu.Lock()
	if i, ok := h.find(tag); ok {
		h.held = slices.Delete(h.held, i, i+1)
	}
	h.written(1)
	return nil
}

// flush writes the acks taken until none is waiting. A write that fails
// means the channel is going away: the broker redelivers what it held, so
// the flush goes on counting them settled, for the channel to be let go.
func (h *heldChannel) flush() {
	// Let the handlers that are running acknowledge what they hold first:
	// their acks go out in the same write, a single multiple ack when
	// they are in order.
	runtime.Gosched()
	h.mu.Lock()
	for h.acked > 0 {
		upTo, singles, n := h.takeAcks()
		h.mu.Unlock()
		var err error
		if upTo != 0 {
			err = h.ch.Ack(upTo, true)
		}
		for _, tag := range singles {
			if err == nil {
				err = h.ch.Ack(tag, false)
			}
		}
		if err != nil {
			h.t.log.Debug("rabbitmq ack not written; the broker redelivers", slog.Any("error", err))
		}
		h.t.lastSettle.Store(time.Now().UnixNano())
		h.mu.Lock()
		h.unsettled -= n
	}
	h.flushing = false
	h.written(0)
}

// takeAcks takes off held what the next write acknowledges: upTo, the
// last of the acked deliveries at the front of held (0: none), to be acked
// with multiple=true, which also covers the deliveries before it already
// settled on the wire (harmless: the broker no longer holds them for the
// channel), and singles, the acked deliveries behind a delivery still
// held, one ack each; n is how many deliveries that settles. The caller
// holds mu.
func (h *heldChannel) takeAcks() (upTo uint64, singles []uint64, n int) {
	for n < len(h.held) && h.held[n].state == tagAcked {
		upTo = h.held[n].tag
		n++
	}
	if n == h.acked {
		h.held = h.held[:copy(h.held, h.held[n:])]
	} else {
		kept := h.held[:0]
		for _, x := range h.held[n:] {
			if x.state == tagAcked {
				singles = append(singles, x.tag)
			} else {
				kept = append(kept, x)
			}
		}
		h.held = kept
		n += len(singles)
	}
	h.acked -= n
	return upTo, singles, n
}

// written counts n deliveries settled on the wire and closes a retired
// channel that has none left. The caller holds mu, which written releases.
func (h *heldChannel) written(n int) {
	h.unsettled -= n
	closeNow := h.retired && h.unsettled == 0 && !h.closed
	h.closed = h.closed || closeNow
	h.mu.Unlock()
	if closeNow {
		h.close()
	}
}

// retire says nothing more will arrive on the channel: it closes now if
// every delivery is settled, otherwise when the last one is.
func (h *heldChannel) retire() {
	h.mu.Lock()
	closeNow := h.unsettled == 0 && !h.closed
	h.retired = true
	h.closed = h.closed || closeNow
	h.mu.Unlock()
	if closeNow {
		h.close()
	}
}

// close closes the channel SettleGrace after now, the last settlement on
// it: closing at once lets a quorum queue undo acknowledgements it has not
// applied yet. Close of the transport cuts the wait short, after waiting
// out the grace itself.
func (h *heldChannel) close() {
	t := h.t
	later := func() {
		select {
		case <-time.After(t.cfg.SettleGrace):
		case <-t.ctx.Done():
		}
		h.closeNow()
	}
	if !t.goOwned(later) {
		h.closeNow()
	}
}

func (h *heldChannel) closeNow() {
	if err := h.ch.Close(); err != nil && !h.ch.IsClosed() {
		h.t.log.Warn("rabbitmq could not close a consumer channel", slog.Any("error", err))
	}
}

// settler settles one delivery by its tag on the channel it arrived on.
type settler struct {
	h   *heldChannel
	tag uint64

	mu      sync.Mutex
	settled bool
}

// Ack acknowledges the delivery, and no other. On a subscription's channel
// the acknowledgement is written just after Ack returns, together with any
// others taken meanwhile (see heldChannel); if the channel is lost before it
// is written, the broker redelivers the message, as it does for an ack lost
// on its way. A delivery from Get is acknowledged before Ack returns.
// It returns transport.ErrAlreadySettled after an earlier settlement,
// transport.ErrStaleDelivery when the channel it arrived on is gone (the
// broker redelivers it) and transport.ErrClosed after Close.
func (s *settler) Ack() error {
	return s.settle("ack", func() error { return s.h.ack(s.tag) })
}

// Nack rejects the delivery (multiple=false), requeued or dead-lettered,
// written before Nack returns; it fails as Ack does.
func (s *settler) Nack(requeue bool) error {
	return s.settle("nack", func() error { return s.h.nack(s.tag, requeue) })
}

func (s *settler) settle(op string, send func() error) error {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.settled {
		return transport.ErrAlreadySettled
	}
	if s.h.t.isClosed() {
		return transport.ErrClosed
	}
	// amqp091 never reopens a closed *amqp.Channel (its recovery is off), so
	// a tag can only ever reach the channel it was delivered on.
	if s.h.ch.IsClosed() {
		return transport.ErrStaleDelivery
	}
	if err := send(); err != nil {
		// amqp091 returns an error from Ack or Nack only when it cannot
		// write the frame (the channel or the connection is going away; a
		// bad tag would come back later as a channel close), so the
		// delivery is stale whatever IsClosed says yet: the broker
		// redelivers it.
		return fmt.Errorf("%w: %s delivery %d: %v", transport.ErrStaleDelivery, op, s.tag, err)
	}
	s.settled = true
	return nil
}
