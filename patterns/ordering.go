package patterns

import (
	"context"
	"fmt"
	"strconv"
	"sync"

	"github.com/acemq/acemq-flow/broker"
)

// OrderKey says which key a message is ordered by; messages with the same
// key are handled one at a time, in the order they reach the handler. An
// empty key means no ordering.
type OrderKey func(m *broker.Message) string

// OrderingKey is what Ordered and WithOrdering take as a key: the name of
// an application header (a string), an OrderKey, or a plain function of
// the message.
type OrderingKey interface {
	string | OrderKey | func(m *broker.Message) string
}

// ByCorrelation orders by correlation id: one business action, in
// sequence.
func ByCorrelation() OrderKey {
	return func(m *broker.Message) string { return m.CorrelationID }
}

// ByHeader orders by the value of the application header name (a string,
// bytes or an integer; "" when the header is absent).
func ByHeader(name string) OrderKey {
	return func(m *broker.Message) string {
		switch v := m.Headers[name].(type) {
		case nil:
			return ""
		case string:
			return v
		case []byte:
			return string(v)
		case int64:
			return strconv.FormatInt(v, 10)
		default:
			return fmt.Sprint(v)
		}
	}
}

// orderKeyOf turns any OrderingKey into an OrderKey, nil for a nil
// function.
func orderKeyOf[K OrderingKey](key K) OrderKey {
	switch k := any(key).(type) {
	case string:
		return ByHeader(k)
	case OrderKey:
		return k
	case func(*broker.Message) string:
		return k
	default:
		return nil
	}
}

// Ordered wraps h so that messages with the same key are handled one at a
// time, in the order they reach it, while messages with different keys
// run concurrently (give the consumer broker.Concurrency above one). A
// message whose key is empty is handled at once, with no ordering.
//
// It orders the handling of messages as they reach it, which at a
// concurrency above one is not quite the order they were delivered in: two
// deliveries of one key taken back to back by two workers can reach it in
// either order. For strict delivery order per key, let the consumer do the
// ordering with OrderedBy, which sees the deliveries in queue order.
//
// It cannot reorder what the broker delivered out of order, and with
// several consumers on one queue it orders only within each. Ordering
// across processes is a routing decision: see Partition. A message that
// is still waiting for its turn when the consumer's context ends (Cancel
// at its deadline) is put back with broker.InProgress, its attempt
// unchanged. Nothing is kept for a key once no message with it is waiting.
//
// Ordered returns nil (which Consume refuses) for a nil h or key function.
func Ordered[K OrderingKey](key K, h broker.Handler) broker.Handler {
	k := orderKeyOf(key)
	if h == nil || k == nil {
		return nil
	}
	locks := &orderingLocks{keys: map[string]*orderingSlot{}}
	return func(ctx context.Context, m *broker.Message) broker.Ack {
		key := k(m)
		if key == "" {
			return h(ctx, m)
		}
		slot, err := locks.acquire(ctx, key)
		if err != nil {
			return broker.InProgress(0)
		}
		defer locks.release(key, slot)
		return h(ctx, m)
	}
}

// OrderedBy is a consume option that has the consumer itself hand messages
// with the same key to its handlers one at a time and in the order the
// queue delivered them, while messages with different keys run
// concurrently; an empty key is not ordered. It takes the same keys as
// Ordered and is the one to use when a later message about the same thing
// must never overtake an earlier one at a concurrency above one:
//
//	conn.Consume(ctx, "orders.new", h, broker.Concurrency(16), patterns.OrderedBy("x-order-id"))
//
// Like Ordered it orders within one consumer; across consumers and
// processes ordering is a routing decision (Partition). A nil key function
// is refused by Consume.
func OrderedBy[K OrderingKey](key K) broker.ConsumeOption {
	k := orderKeyOf(key)
	if k == nil {
		return broker.OrderBy(nil)
	}
	return broker.OrderBy(k)
}

// WithOrdering is Ordered as a middleware, for when ordering belongs in a
// chain. Each handler it wraps is ordered on its own. It returns nil
// (which Use refuses) for a nil key function.
func WithOrdering[K OrderingKey](key K) broker.Middleware {
	if orderKeyOf(key) == nil {
		return nil
	}
	return func(h broker.Handler) broker.Handler { return Ordered(key, h) }
}

// orderingLocks serialises handling per key without a goroutine: a
// handler waits on its key's turn channel, whose blocked senders the
// runtime wakes first come, first served.
type orderingLocks struct {
	mu   sync.Mutex
	keys map[string]*orderingSlot
}

type orderingSlot struct {
	turn chan struct{}
	refs int
}

func (l *orderingLocks) acquire(ctx context.Context, key string) (*orderingSlot, error) {
	l.mu.Lock()
	slot := l.keys[key]
	if slot == nil {
		slot = &orderingSlot{turn: make(chan struct{}, 1)}
		l.keys[key] = slot
	}
	slot.refs++
	l.mu.Unlock()
	select {
	case slot.turn <- struct{}{}:
		return slot, nil
	case <-ctx.Done():
		l.forget(key, slot)
		return nil, ctx.Err()
	}
}

func (l *orderingLocks) release(key string, slot *orderingSlot) {
	<-slot.turn
	l.forget(key, slot)
}

// forget drops one reference to the key's slot, and the slot itself when
// nothing is waiting on it, so idle keys cost nothing.
func (l *orderingLocks) forget(key string, slot *orderingSlot) {
	l.mu.Lock()
	slot.refs--
	if slot.refs == 0 {
		delete(l.keys, key)
	}
	l.mu.Unlock()
}
