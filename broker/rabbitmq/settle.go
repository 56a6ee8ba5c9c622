package rabbitmq

import (
	"fmt"
	"log/slog"
	"sync"
	"time"

	amqp "github.com/rabbitmq/amqp091-go"

	"github.com/acemq/acemq-flow/broker/transport"
)

// heldChannel is a channel that deliveries arrived on (a subscription's, or
// the get channel). It stays open while any of them is unsettled: closing it
// would hand them back to the broker under the feet of whoever holds them.
type heldChannel struct {
	t  *Transport
	ch *amqp.Channel

	mu        sync.Mutex
	unsettled int
	retired   bool // no more deliveries will arrive; close when settled
	closed    bool
}

// received counts a delivery handed out on this channel.
func (h *heldChannel) received() {
	h.mu.Lock()
	h.unsettled++
	h.mu.Unlock()
}

// settled counts one delivery settled, closing a retired channel that has
// none left.
func (h *heldChannel) settled() {
	h.mu.Lock()
	h.unsettled--
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

// Ack acknowledges the delivery (multiple=false). It returns
// transport.ErrAlreadySettled after an earlier settlement,
// transport.ErrStaleDelivery when the channel it arrived on is gone (the
// broker redelivers it) and transport.ErrClosed after Close.
func (s *settler) Ack() error {
	return s.settle("ack", func() error { return s.h.ch.Ack(s.tag, false) })
}

// Nack rejects the delivery (multiple=false), requeued or dead-lettered; it
// fails as Ack does.
func (s *settler) Nack(requeue bool) error {
	return s.settle("nack", func() error { return s.h.ch.Nack(s.tag, false, requeue) })
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
	s.h.t.lastSettle.Store(time.Now().UnixNano())
	s.h.settled()
	return nil
}
