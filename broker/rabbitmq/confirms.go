package rabbitmq

import (
	"fmt"
	"sync"
	"time"

	amqp "github.com/rabbitmq/amqp091-go"

	"github.com/acemq/acemq-flow/broker/transport"
)

// reapInterval is how often a publish channel looks at the confirms of
// publishes whose caller stopped waiting, to free their in-flight slot.
const reapInterval = 50 * time.Millisecond

// returnKey is what matches a basic.return to its publish: the broker echoes
// the message's properties, exchange and routing key, but no delivery tag.
type returnKey struct {
	messageID  string
	exchange   string
	routingKey string
}

// pubChannel is one confirm-mode channel shared by concurrent publishers.
// Its loop goroutine is the only reader of the channel's notifications; it
// moves basic.return messages into pending, where each mandatory publish
// claims one after its confirm.
type pubChannel struct {
	ch    *amqp.Channel
	slots chan struct{} // one token per publish awaiting a confirm
	flow  *gate

	returns  chan amqp.Return
	closes   chan *amqp.Error
	flows    chan bool
	claims   chan claim
	abandons chan abandoned

	mu      sync.Mutex
	pending map[returnKey][]amqp.Return

	// dead is closed once the loop has seen the channel close and drained
	// every notification; closeErr (set before) says why.
	dead     chan struct{}
	closeErr *amqp.Error
}

// claim asks the loop for the return of one mandatory publish.
type claim struct {
	key   returnKey
	reply chan *amqp.Return
}

// abandoned is a publish whose caller gave up waiting for the confirm: its
// slot is freed, and its return (if any) discarded, once the confirm comes.
type abandoned struct {
	dc  *amqp.DeferredConfirmation
	key *returnKey // nil unless mandatory
}

// openPublisher opens a confirm-mode channel and starts its loop.
func (s *session) openPublisher() (*pubChannel, error) {
	ch, err := s.channel()
	if err != nil {
		return nil, err
	}
	if err := ch.Confirm(false); err != nil {
		ch.Close()
		return nil, fmt.Errorf("confirm.select: %w", err)
	}
	n := s.t.cfg.MaxInFlight
	pc := &pubChannel{
		ch:    ch,
		slots: make(chan struct{}, n),
		flow:  newGate(),
		// A return is pushed synchronously by amqp091's reader before it
		// processes the ack of the same publish, so the buffer must hold as
		// many returns as there can be publishes in flight.
		returns:  ch.NotifyReturn(make(chan amqp.Return, n)),
		closes:   ch.NotifyClose(make(chan *amqp.Error, 1)),
		flows:    ch.NotifyFlow(make(chan bool, 4)),
		claims:   make(chan claim),
		abandons: make(chan abandoned),
		pending:  map[returnKey][]amqp.Return{},
		dead:     make(chan struct{}),
	}
	if !s.t.goOwned(pc.loop) {
		ch.Close()
		return nil, transport.ErrClosed
	}
	return pc, nil
}

// loop drains every notification of the channel until amqp091 closes them
// all, which it does when the channel closes.
func (pc *pubChannel) loop() {
	returns, closes, flows := pc.returns, pc.closes, pc.flows
	var (
		waiting []abandoned
		ticker  *time.Ticker
		tick    <-chan time.Time
	)
	// drain moves every return already buffered into pending. After a
	// confirm has been observed, its return (which amqp091 delivered before
	// the ack) is therefore in pending.
	drain := func() {
		for returns != nil {
			select {
			case r, ok := <-returns:
				if !ok {
					returns = nil
					return
				}
				pc.addReturn(r)
			default:
				return
			}
		}
	}
	for returns != nil || closes != nil || flows != nil {
		select {
		case r, ok := <-returns:
			if !ok {
				returns = nil
				continue
			}
			pc.addReturn(r)
		case e, ok := <-closes:
			if !ok {
				closes = nil
				continue
			}
			if pc.closeErr == nil {
				pc.closeErr = e
			}
		case active, ok := <-flows:
			if !ok {
				flows = nil
				pc.flow.set(false)
				continue
			}
			pc.flow.set(!active)
		case c := <-pc.claims:
			drain()
			c.reply <- pc.take(c.key)
		case a := <-pc.abandons:
			waiting = append(waiting, a)
			if ticker == nil {
				ticker = time.NewTicker(reapInterval)
				tick = ticker.C
			}
		case <-tick:
			waiting = pc.reap(waiting, drain)
			if len(waiting) == 0 {
				ticker.Stop()
				ticker, tick = nil, nil
			}
		}
	}
	if ticker != nil {
		ticker.Stop()
	}
	// The channel is closed: amqp091 has resolved every outstanding confirm
	// (as a nack) and closed the return channel, so this frees every slot.
	pc.reap(waiting, drain)
	close(pc.dead)
}

// reap frees the slot of every abandoned publish whose confirm has arrived
// and drops its return, keeping the ones still waiting.
func (pc *pubChannel) reap(waiting []abandoned, drain func()) []abandoned {
	var done, still []abandoned
	for _, a := range waiting {
		select {
		case <-a.dc.Done():
			done = append(done, a)
		default:
			still = append(still, a)
		}
	}
	if len(done) == 0 {
		return still
	}
	drain()
	for _, a := range done {
		if a.key != nil {
			pc.take(*a.key)
		}
		<-pc.slots
	}
	return still
}

func (pc *pubChannel) addReturn(r amqp.Return) {
	k := returnKey{messageID: r.MessageId, exchange: r.Exchange, routingKey: r.RoutingKey}
	pc.mu.Lock()
	defer pc.mu.Unlock()
	pc.pending[k] = append(pc.pending[k], r)
}

// take removes and returns one pending return for k, or nil.
func (pc *pubChannel) take(k returnKey) *amqp.Return {
	pc.mu.Lock()
	defer pc.mu.Unlock()
	rs := pc.pending[k]
	if len(rs) == 0 {
		return nil
	}
	r := rs[0]
	if len(rs) == 1 {
		delete(pc.pending, k)
	} else {
		pc.pending[k] = rs[1:]
	}
	return &r
}

// claimReturn returns the basic.return of a mandatory publish whose confirm
// has arrived, or nil if the broker routed it.
func (pc *pubChannel) claimReturn(k returnKey) *amqp.Return {
	c := claim{key: k, reply: make(chan *amqp.Return, 1)}
	select {
	case pc.claims <- c:
		return <-c.reply
	case <-pc.dead:
		// The loop has drained everything into pending and stopped.
		return pc.take(k)
	}
}

// abandon hands a publish whose caller stopped waiting to the loop.
func (pc *pubChannel) abandon(a abandoned) {
	select {
	case pc.abandons <- a:
	case <-pc.dead:
		if a.key != nil {
			pc.take(*a.key)
		}
		<-pc.slots
	}
}
