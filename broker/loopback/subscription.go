package loopback

import (
	"context"
	"fmt"
	"slices"
	"time"

	"github.com/acemq/acemq-flow/broker/transport"
)

// subscription is a consumer on one queue. Its channel is buffered to the
// prefetch, and the broker never has more than prefetch deliveries
// unsettled on it, so sending under the broker's lock never blocks.
type subscription struct {
	b         *Broker
	c         *conn
	q         *queue
	tag       string
	prefetch  int
	exclusive bool
	unsettled int
	ch        chan *transport.Delivery
	ended     bool
	err       error
}

// Deliveries yields the messages handed to this consumer; it is closed when
// the subscription ends.
func (s *subscription) Deliveries() <-chan *transport.Delivery { return s.ch }

// Cancel stops deliveries and closes the Deliveries channel; deliveries
// already received can still be settled. It deletes an auto-delete queue
// that loses its last consumer. Idempotent.
func (s *subscription) Cancel(ctx context.Context) error {
	s.b.mu.Lock()
	defer s.b.mu.Unlock()
	if !s.ended {
		s.b.endSubscription(s, nil)
		s.b.flush(s.b.now())
	}
	return nil
}

// Err says why the subscription ended on its own (its queue was deleted),
// or nil.
func (s *subscription) Err() error {
	s.b.mu.Lock()
	defer s.b.mu.Unlock()
	return s.err
}

// endSubscription removes s from its queue and closes its channel. An
// auto-delete queue that had consumers and now has none is deleted.
func (b *Broker) endSubscription(s *subscription, err error) {
	if s.ended {
		return
	}
	s.ended, s.err = true, err
	close(s.ch)
	delete(s.c.subs, s)
	q := s.q
	q.consumers = slices.DeleteFunc(q.consumers, func(x *subscription) bool { return x == s })
	q.next = 0
	if len(q.consumers) == 0 && q.autoDelete && !q.deleted {
		b.deleteQueue(q)
		return
	}
	// With a single active consumer, the next one takes over.
	b.markDirty(q)
}

// deliver hands m to s.
func (b *Broker) deliver(s *subscription, m *message) {
	s.unsettled++
	s.ch <- b.delivery(s.c, s.q, m, s)
}

// delivery records m as unsettled on c and returns the receiver's copy.
// Quorum queues add x-delivery-count as RabbitMQ 3.10 does: on basic.get
// always, on a consumer once the message has been returned.
func (b *Broker) delivery(c *conn, q *queue, m *message, s *subscription) *transport.Delivery {
	c.seq++
	p := &pending{b: b, c: c, q: q, m: m, sub: s, seq: c.seq}
	c.unsettled[p] = struct{}{}
	b.delivered++
	b.unsettled++
	d := &transport.Delivery{
		Message:     copyMessage(m.msg),
		Exchange:    m.exchange,
		RoutingKey:  m.routingKey,
		Redelivered: m.redelivered,
		Settler:     p,
	}
	if s != nil {
		d.ConsumerTag = s.tag
	}
	if q.cfg.quorum && (s == nil || m.returns > 0) {
		if d.Headers == nil {
			d.Headers = transport.Table{}
		}
		d.Headers["x-delivery-count"] = m.returns
	}
	return d
}

// pending is an unsettled delivery; it is the Delivery's Settler.
type pending struct {
	b       *Broker
	c       *conn
	q       *queue
	m       *message
	sub     *subscription // nil for Get
	seq     uint64        // delivery order on c, to requeue in order on close
	settled bool
}

// Ack acknowledges the delivery. It returns transport.ErrAlreadySettled
// when it was settled before and transport.ErrClosed when its connection
// is closed (the message went back to its queue).
func (p *pending) Ack() error { return p.settle("ack", func(time.Time) {}) }

// Nack rejects the delivery: requeued, marked redelivered (to its original
// position in a classic queue, to the tail of a quorum queue), or
// dead-lettered with reason "rejected". It fails like Ack.
func (p *pending) Nack(requeue bool) error {
	return p.settle("nack", func(now time.Time) {
		if requeue {
			p.b.putBack(p.q, p.m, requeued, now)
		} else {
			p.b.deadLetter(p.q, p.m, "rejected", now)
		}
	})
}

func (p *pending) settle(op string, then func(now time.Time)) error {
	b := p.b
	b.mu.Lock()
	defer b.mu.Unlock()
	if p.settled {
		return fmt.Errorf("%s delivery from %q: %w", op, p.q.name, transport.ErrAlreadySettled)
	}
	if p.c.closed {
		return fmt.Errorf("%s delivery from %q: %w", op, p.q.name, transport.ErrClosed)
	}
	p.settled = true
	delete(p.c.unsettled, p)
	b.unsettled--
	if p.sub != nil {
		p.sub.unsettled--
	}
	if p.q.deleted {
		return nil
	}
	// A freed prefetch slot may let the queue deliver again.
	b.markDirty(p.q)
	now := b.now()
	then(now)
	b.flush(now)
	return nil
}
