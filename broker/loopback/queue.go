package loopback

import (
	"fmt"
	"slices"
	"sort"
	"time"

	"github.com/acemq/acemq-flow/broker/transport"
)

// queue is a declared queue: its configuration, ready messages and
// consumers. Every field is guarded by the broker's lock.
type queue struct {
	name                           string
	durable, exclusive, autoDelete bool
	args                           transport.Table
	cfg                            queueConfig
	// owner is the connection an exclusive queue belongs to.
	owner *conn

	ready      deque
	readyBytes int
	// seq numbers the messages enqueued, in queue order (message.pos).
	seq uint64
	// returned counts the messages at the head of a quorum queue's ready
	// deque that came back from a closed connection: RabbitMQ serves them
	// before everything else, in the order they were delivered.
	returned int

	consumers []*subscription
	next      int // round-robin position in consumers

	deleted bool
	dirty   bool

	// stopTimer stops the timer that fires when the head message expires
	// (nil when none is armed). timerGen tells a timer that fired late,
	// after being replaced or stopped, to do nothing.
	stopTimer func() bool
	timerAt   time.Time
	timerGen  uint64
}

// enqueue adds m at the tail of q, applying the queue's TTL and length
// limit. It reports false when the queue refused the message (x-overflow
// reject-publish or reject-publish-dlx), which the publisher sees as a nack.
func (b *Broker) enqueue(q *queue, m *message, now time.Time) bool {
	ttl, ok, _ := transport.ParseExpiration(m.msg.Expiration)
	if q.cfg.ttl >= 0 && (!ok || q.cfg.ttl < ttl) {
		ttl, ok = q.cfg.ttl, true
	}
	if ok {
		m.expiresAt = now.Add(ttl)
	}
	if q.cfg.overflow != overflowDropHead && q.full(m.size()) {
		if q.cfg.overflow == overflowRejectPublishDLX {
			b.deadLetter(q, m, "maxlen", now)
		}
		return false
	}
	q.seq++
	m.pos = q.seq
	q.ready.pushBack(m)
	q.readyBytes += m.size()
	for q.overLimit() {
		head := q.take()
		b.deadLetter(q, head, "maxlen", now)
	}
	b.markDirty(q)
	return true
}

// full reports whether q cannot take a message of size more bytes without
// exceeding x-max-length or x-max-length-bytes.
func (q *queue) full(size int) bool {
	return (q.cfg.maxLength >= 0 && int64(q.ready.len()) >= q.cfg.maxLength) ||
		(q.cfg.maxBytes >= 0 && int64(q.readyBytes+size) > q.cfg.maxBytes)
}

func (q *queue) overLimit() bool {
	return q.ready.len() > 0 && ((q.cfg.maxLength >= 0 && int64(q.ready.len()) > q.cfg.maxLength) ||
		(q.cfg.maxBytes >= 0 && int64(q.readyBytes) > q.cfg.maxBytes))
}

// take removes the head message.
func (q *queue) take() *message {
	m := q.ready.popFront()
	if m != nil {
		q.readyBytes -= m.size()
		if q.returned > 0 {
			q.returned--
		}
	}
	return m
}

// clearReady drops every ready message and says how many there were.
func (q *queue) clearReady() int {
	n := q.ready.clear()
	q.readyBytes = 0
	q.returned = 0
	return n
}

// backReason is why an unsettled delivery goes back to its queue.
type backReason int

const (
	// requeued: the client rejected it with requeue (basic.nack or
	// basic.reject).
	requeued backReason = iota
	// returned: the connection holding it closed.
	returned
)

// putBack gives m back to q, marked redelivered, where RabbitMQ 3.10 puts
// it. A classic queue restores it to its original position, so the ready
// messages stay in the order they were enqueued however they come back. A
// quorum queue appends a requeued message at the tail, behind everything
// ready, and serves a returned one first, behind the messages returned
// before it. A quorum queue dead-letters instead once x-delivery-limit is
// exhausted.
func (b *Broker) putBack(q *queue, m *message, why backReason, now time.Time) {
	m.redelivered = true
	var at int
	switch {
	case !q.cfg.quorum:
		at = sort.Search(q.ready.len(), func(i int) bool { return q.ready.at(i).pos > m.pos })
	case why == returned:
		at = q.returned
	default:
		at = q.ready.len()
	}
	if q.cfg.quorum {
		m.returns++
		if q.cfg.deliveryLimit >= 0 && m.returns > q.cfg.deliveryLimit {
			b.deadLetter(q, m, "delivery_limit", now)
			return
		}
		if why == returned {
			q.returned++
		}
	}
	q.ready.insert(at, m)
	q.readyBytes += m.size()
	b.markDirty(q)
}

// expireHead dead-letters expired messages at the head of q. Like RabbitMQ
// it never looks past the head: a message with a long TTL holds back the
// expiry of everything behind it.
func (b *Broker) expireHead(q *queue, now time.Time) {
	for m := q.ready.front(); m != nil && !m.expiresAt.IsZero() && now.After(m.expiresAt); m = q.ready.front() {
		b.deadLetter(q, q.take(), "expired", now)
	}
}

// pump expires and dispatches from the head of q for as long as a consumer
// has room, then arms the expiry timer for whatever is left at the head.
func (b *Broker) pump(q *queue, now time.Time) {
	for {
		b.expireHead(q, now)
		if q.ready.len() == 0 {
			break
		}
		s := q.nextConsumer()
		if s == nil {
			break
		}
		b.deliver(s, q.take())
	}
	b.arm(q, now)
}

// nextConsumer picks the next consumer in turn with room under its
// prefetch; with x-single-active-consumer only the first may receive.
func (q *queue) nextConsumer() *subscription {
	n := len(q.consumers)
	if q.cfg.singleActive {
		n = min(n, 1)
	}
	for i := range n {
		k := (q.next + i) % n
		if s := q.consumers[k]; s.unsettled < s.prefetch {
			q.next = (k + 1) % n
			return s
		}
	}
	return nil
}

// arm sets q's timer for the expiry of its head message, or stops it when
// the head does not expire.
func (b *Broker) arm(q *queue, now time.Time) {
	head := q.ready.front()
	if head == nil || head.expiresAt.IsZero() {
		b.disarm(q)
		return
	}
	if q.stopTimer != nil && q.timerAt.Equal(head.expiresAt) {
		return
	}
	b.disarm(q)
	q.timerAt = head.expiresAt
	gen := q.timerGen
	// The extra millisecond makes the timer fire strictly after the
	// deadline, so that one firing always expires the head.
	q.stopTimer = b.afterFunc(head.expiresAt.Sub(now)+time.Millisecond, func() { b.expired(q, gen) })
}

func (b *Broker) disarm(q *queue) {
	q.timerGen++
	if q.stopTimer != nil {
		q.stopTimer()
		q.stopTimer = nil
	}
}

// expired runs on q's timer.
func (b *Broker) expired(q *queue, gen uint64) {
	b.mu.Lock()
	defer b.mu.Unlock()
	if q.deleted || q.timerGen != gen {
		return
	}
	q.stopTimer = nil
	b.markDirty(q)
	b.flush(b.now())
}

// deleteQueue removes q: its consumers are cancelled (their Err says why),
// its bindings removed and its ready messages dropped. Deliveries still
// unsettled can be settled, to no effect.
func (b *Broker) deleteQueue(q *queue) {
	if q.deleted {
		return
	}
	q.deleted = true
	b.disarm(q)
	gone := fmt.Errorf("queue %q was deleted: %w", q.name,
		amqpError(transport.NotFound, "no queue '%s' in vhost '/'", q.name))
	for _, s := range slices.Clone(q.consumers) {
		b.endSubscription(s, gone)
	}
	for _, ex := range b.exchanges {
		for _, bd := range slices.Clone(ex.bindings) {
			if bd.queue == q {
				b.unbind(ex, bd)
			}
		}
	}
	if q.owner != nil {
		delete(q.owner.exclusive, q)
	}
	if b.queues[q.name] == q {
		delete(b.queues, q.name)
	}
	q.clearReady()
}
