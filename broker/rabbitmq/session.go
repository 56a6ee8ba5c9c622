package rabbitmq

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"sync"
	"sync/atomic"
	"time"

	amqp "github.com/rabbitmq/amqp091-go"

	"github.com/acemq/acemq-flow/broker/transport"
)

// session is one connection and everything opened on it. A session is never
// reused: when its connection closes, its channels and the deliveries
// received on them are stale, and the transport builds a new session.
type session struct {
	t    *Transport
	gen  uint64
	conn *amqp.Connection
	// node is the index, in the URL's list, of the node conn is on.
	node int
	// lost is closed once the connection has closed; lostErr (set before)
	// is the broker's or the library's reason, nil for a clean close.
	lost    chan struct{}
	lostErr *amqp.Error
	blocked *gate
	// frameMax is the negotiated frame_max (0: no limit).
	frameMax int

	// pubs are the publish channels; mu serialises replacing one, and a
	// publish reads them without it.
	mu   sync.Mutex
	pubs []atomic.Pointer[pubChannel]
	next atomic.Uint64

	getMu sync.Mutex
	get   *heldChannel
}

// newSession wraps a fresh connection to node (its index in the URL's
// list): it opens the publish channels and starts the goroutines that drain
// the connection's notifications.
func (t *Transport) newSession(conn *amqp.Connection, node int) (*session, error) {
	t.mu.Lock()
	t.gen++
	gen := t.gen
	t.mu.Unlock()
	s := &session{t: t, gen: gen, conn: conn, node: node, lost: make(chan struct{}), blocked: newGate(), frameMax: conn.Config.FrameSize}

	closes := conn.NotifyClose(make(chan *amqp.Error, 1))
	blocks := conn.NotifyBlocked(make(chan amqp.Blocking, 4))
	watchClose := func() {
		for e := range closes {
			s.lostErr = e
		}
		close(s.lost)
	}
	watchBlocked := func() {
		for b := range blocks {
			if b.Active {
				t.log.Warn("rabbitmq blocked the connection; publishes wait", slog.String("reason", b.Reason))
			} else {
				t.log.Info("rabbitmq unblocked the connection")
			}
			s.blocked.set(b.Active)
		}
		s.blocked.set(false)
	}
	if !t.goOwned(watchClose) || !t.goOwned(watchBlocked) {
		return nil, transport.ErrClosed
	}

	s.pubs = make([]atomic.Pointer[pubChannel], t.cfg.PublishChannels)
	for i := range s.pubs {
		pc, err := s.openPublisher()
		if err != nil {
			return nil, err
		}
		s.pubs[i].Store(pc)
	}
	return s, nil
}

// publisher picks the next publish channel round robin, replacing one that a
// channel exception closed while the connection stayed up.
func (s *session) publisher() (*pubChannel, error) {
	i := int(s.next.Add(1) % uint64(len(s.pubs)))
	if pc := s.pubs[i].Load(); !pc.ch.IsClosed() {
		return pc, nil
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	// Another publish may have replaced it meanwhile.
	if pc := s.pubs[i].Load(); !pc.ch.IsClosed() {
		return pc, nil
	}
	pc, err := s.openPublisher()
	if err != nil {
		return nil, err
	}
	s.pubs[i].Store(pc)
	s.t.log.Info("rabbitmq replaced a closed publish channel", slog.Uint64("generation", s.gen))
	return pc, nil
}

// channel opens a channel on this session's connection.
func (s *session) channel() (*amqp.Channel, error) {
	ch, err := s.conn.Channel()
	if err != nil {
		return nil, fmt.Errorf("open channel: %w", err)
	}
	return ch, nil
}

// isLost reports whether the connection has closed, even if the goroutine
// watching it has not yet closed s.lost.
func (s *session) isLost() bool { return s.conn.IsClosed() }

// lostGrace bounds how long lostUnder waits for a connection that failed
// a write to be seen closed.
const lostGrace = 5 * time.Second

// lostUnder reports whether err, from an operation on s, came from s's
// connection going away: it is closed already, or err is not the broker's
// answer to the operation (a write on a socket the broker reset, say) and
// the connection is seen closed within lostGrace. amqp091 marks a
// connection closed only once its reader has seen the end, which can come
// after a write to it failed. A broker's exception (a queue not found, an
// exclusive consumer refused) is the operation's failure, not the
// connection's.
func (s *session) lostUnder(ctx context.Context, err error) bool {
	if s.isLost() {
		return true
	}
	var te *transport.AMQPError
	var ae *amqp.Error
	if errors.As(err, &te) || errors.As(err, &ae) && ae.Server {
		return false
	}
	t := time.NewTimer(lostGrace)
	defer t.Stop()
	select {
	case <-s.lost:
		return true
	case <-t.C:
	case <-ctx.Done():
	}
	return false
}

// nodeAddr is the address (host:port) of the node s is connected to.
func (s *session) nodeAddr() string { return s.t.url.nodes[s.node].addr }

// lostUnreadable reports whether the connection, which has closed, was lost
// because amqp091 could not read a frame the broker sent: a header it
// refuses (a table or array of more than 8,192 elements, nested too deep) or
// a frame beyond frame_max. It waits, bounded by ctx, for the reason to be
// recorded.
func (s *session) lostUnreadable(ctx context.Context) bool {
	select {
	case <-s.lost:
	case <-ctx.Done():
		return false
	}
	e := s.lostErr
	// amqp091 closes the connection with the reader's error as the reason.
	return e != nil && !e.Server && (e.Reason == amqp.ErrSyntax.Error() || e.Reason == amqp.ErrFrameTooLarge.Error())
}
