package loopback

import (
	"strconv"
	"sync"
	"sync/atomic"
	"time"

	"github.com/acemq/acemq-flow/broker/transport"
)

// Broker is an in-memory AMQP broker: exchanges, queues and the connections
// to it. The zero value is not usable; call [New] or [Named].
type Broker struct {
	name string
	// clock expires messages and stamps x-death (nil = the system's).
	clock Clock

	// mu guards everything below and all the state of the exchanges,
	// queues, connections, subscriptions and deliveries of this broker: one
	// lock keeps routing, dispatch and settlement trivially consistent.
	mu        sync.Mutex
	closed    bool
	exchanges map[string]*exchange
	queues    map[string]*queue
	conns     map[*conn]struct{}
	// dirty lists queues whose head changed and must be pumped (expired,
	// dispatched, their timer re-armed) before the lock is released.
	dirty []*queue
	seq   uint64
	// delivered counts the deliveries made, unsettled those not yet
	// settled, over every connection (Stats).
	delivered uint64
	unsettled int
}

// Clock is where a broker reads the time: its TTLs expire, and its x-death
// entries are stamped, on it. Its method set is broker.Clock's, so that a
// connection's clock can be handed straight to the loopback under it.
type Clock interface {
	// Now is the current time.
	Now() time.Time
	// AfterFunc calls f, once, when d has passed on the clock (as
	// time.AfterFunc does, on a goroutine of its own; a clock a test moves
	// by hand may call it on the goroutine that moves it, and wait for
	// it), and returns a function that cancels the call: true if it did,
	// false if f has already been called or cancelled.
	AfterFunc(d time.Duration, f func()) (stop func() bool)
}

// Stats is what a broker holds in flight at one instant.
type Stats struct {
	// Unsettled is the deliveries handed to a consumer or taken with Get
	// and neither acknowledged nor rejected yet, over every connection.
	Unsettled int
	// Delivered is the deliveries made since the broker was created: two
	// Stats with the same Delivered saw no delivery between them.
	Delivered uint64
}

// Stats reports what the broker holds in flight. A broker with nothing
// unsettled has nothing under way: a ready message waits in a queue
// without a consumer that has room (a dead-letter queue, a rung of the
// scheduler ladder), where only a client or an expiry timer moves it. A
// test that skips time waits for that before it moves its clock on.
func (b *Broker) Stats() Stats {
	b.mu.Lock()
	defer b.mu.Unlock()
	return Stats{Unsettled: b.unsettled, Delivered: b.delivered}
}

var (
	anonymous atomic.Uint64

	registryMu sync.Mutex
	registry   = map[string]*Broker{}
)

// New returns an isolated broker named "memory://loopback-<n>", with the
// exchanges RabbitMQ pre-declares: the default exchange, amq.direct,
// amq.topic and amq.fanout.
func New() *Broker { return NewWithClock(nil) }

// NewWithClock is New with its TTLs expiring on c (nil = the system's
// clock): what a test that moves a clock by hand gives the connection it
// wraps the broker in, too (broker.Config.Clock).
func NewWithClock(c Clock) *Broker {
	b := newBroker("memory://loopback-" + strconv.FormatUint(anonymous.Add(1), 10))
	b.clock = c
	return b
}

// now is the time on the broker's clock.
func (b *Broker) now() time.Time {
	if b.clock == nil {
		return time.Now()
	}
	return b.clock.Now()
}

// afterFunc calls f after d on the broker's clock.
func (b *Broker) afterFunc(d time.Duration, f func()) func() bool {
	if b.clock == nil {
		return time.AfterFunc(d, f).Stop
	}
	return b.clock.AfterFunc(d, f)
}

// Named returns the process-wide broker called name, creating it on first
// use, so that every "memory://name" URL in a process reaches the same
// queues. Its Name is "memory://" + name. A broker that was closed is
// replaced by a fresh one.
func Named(name string) *Broker {
	registryMu.Lock()
	defer registryMu.Unlock()
	if b, ok := registry[name]; ok {
		return b
	}
	b := newBroker("memory://" + name)
	registry[name] = b
	return b
}

func newBroker(name string) *Broker {
	b := &Broker{
		name:      name,
		exchanges: map[string]*exchange{},
		queues:    map[string]*queue{},
		conns:     map[*conn]struct{}{},
	}
	b.exchanges[""] = &exchange{name: "", kind: transport.Direct, durable: true, system: true}
	for name, kind := range map[string]string{
		"amq.direct": transport.Direct,
		"amq.topic":  transport.Topic,
		"amq.fanout": transport.Fanout,
	} {
		b.exchanges[name] = &exchange{name: name, kind: kind, durable: true, system: true}
	}
	return b
}

// Name is "memory://" followed by the broker's name.
func (b *Broker) Name() string { return b.name }

// Connect opens a connection to the broker. Exclusive queues it declares
// belong to it; closing it cancels its subscriptions, requeues its unsettled
// deliveries and deletes its exclusive queues. A connection to a closed
// broker is itself closed: every operation returns [transport.ErrClosed].
func (b *Broker) Connect() transport.Transport {
	b.mu.Lock()
	defer b.mu.Unlock()
	c := &conn{
		b:         b,
		subs:      map[*subscription]struct{}{},
		exclusive: map[*queue]struct{}{},
		unsettled: map[*pending]struct{}{},
		closed:    b.closed,
	}
	if !b.closed {
		b.conns[c] = struct{}{}
	}
	return c
}

// Close closes every connection, stops every TTL timer and forgets all
// queues and exchanges; a [Named] broker is removed from the registry, so
// the next Named call with its name starts afresh. Idempotent.
func (b *Broker) Close() {
	registryMu.Lock()
	for name, r := range registry {
		if r == b {
			delete(registry, name)
		}
	}
	registryMu.Unlock()

	b.mu.Lock()
	defer b.mu.Unlock()
	if b.closed {
		return
	}
	b.closed = true
	for c := range b.conns {
		b.closeConn(c)
	}
	for _, q := range b.queues {
		b.deleteQueue(q)
	}
	b.exchanges = map[string]*exchange{}
	b.dirty = nil
}

// next returns a number unique within the broker, for generated names.
func (b *Broker) next() string {
	b.seq++
	return strconv.FormatUint(b.seq, 10)
}

// markDirty queues q for pumping by flush.
func (b *Broker) markDirty(q *queue) {
	if !q.dirty {
		q.dirty = true
		b.dirty = append(b.dirty, q)
	}
}

// flush pumps every dirty queue, including those that dead-lettering made
// dirty on the way. Every operation that changes a queue ends with it.
func (b *Broker) flush(now time.Time) {
	for len(b.dirty) > 0 {
		q := b.dirty[0]
		b.dirty = b.dirty[1:]
		q.dirty = false
		if !q.deleted {
			b.pump(q, now)
		}
	}
	b.dirty = nil
}
