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
}

var (
	anonymous atomic.Uint64

	registryMu sync.Mutex
	registry   = map[string]*Broker{}
)

// New returns an isolated broker named "memory://loopback-<n>", with the
// exchanges RabbitMQ pre-declares: the default exchange, amq.direct,
// amq.topic and amq.fanout.
func New() *Broker {
	return newBroker("memory://loopback-" + strconv.FormatUint(anonymous.Add(1), 10))
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
