package rabbitmq

import (
	"context"
	"fmt"
	"log/slog"
	"net"
	"sync"
	"sync/atomic"

	"github.com/acemq/acemq-flow/broker/transport"
)

// Transport is a transport.Transport over one RabbitMQ connection at a time,
// replaced by a new one whenever it is lost. It is safe for concurrent use.
type Transport struct {
	cfg Config
	url brokerURL
	tls *tlsSettings // nil for amqp://
	log *slog.Logger

	// ctx is cancelled by Close; every background goroutine and every wait
	// for a connection ends with it.
	ctx    context.Context
	cancel context.CancelFunc
	wg     sync.WaitGroup

	topo topologyRecord

	mu sync.Mutex
	// closed is set, under mu, by Close; read without mu where a lock per
	// message would be contended (a settlement's check).
	closed atomic.Bool
	cur    *session // nil while between connections
	// live is cur while the transport is open, nil once Close began: what
	// session hands out without taking mu, which every publish would
	// otherwise contend for.
	live    atomic.Pointer[session]
	changed chan struct{} // closed and replaced whenever cur changes
	gen     uint64
	subs    map[*subscription]struct{}

	// lastSettle is when a delivery was last acked or nacked on the wire
	// (unix nanos), so that Close can give the broker SettleGrace to apply
	// it.
	lastSettle atomic.Int64
	// acks counts the flushes writing acknowledgements (heldChannel), which
	// Close waits for; once draining is set (under mu) no flush starts, and
	// an ack is written by its caller instead.
	acks     sync.WaitGroup
	draining bool
}

var _ transport.Transport = (*Transport)(nil)

// Name returns the broker URL, with every node of its list, without its
// password and query.
func (t *Transport) Name() string { return t.url.redacted }

// Node returns the address (host:port) of the node the transport is
// connected to, or "" while it is between connections or closed.
func (t *Transport) Node() string {
	t.mu.Lock()
	defer t.mu.Unlock()
	if t.cur == nil {
		return ""
	}
	return t.url.nodes[t.cur.node].addr
}

// Nodes returns the address (host:port) of every node of the URL's list,
// in the order they are dialled.
func (t *Transport) Nodes() []string { return t.url.addrs() }

// LocalAddr returns the local address of the current connection, which is
// how the broker names it ("127.0.0.1:PORT -> 127.0.0.1:5672"), or nil while
// the transport is between connections or closed.
func (t *Transport) LocalAddr() net.Addr {
	t.mu.Lock()
	defer t.mu.Unlock()
	if t.cur == nil {
		return nil
	}
	return t.cur.conn.LocalAddr()
}

// session waits, bounded by ctx, for a connection that is still open. It
// returns transport.ErrClosed once the transport is closed.
func (t *Transport) session(ctx context.Context) (*session, error) {
	if s := t.live.Load(); s != nil && !s.conn.IsClosed() {
		return s, nil
	}
	for {
		t.mu.Lock()
		if t.closed.Load() {
			t.mu.Unlock()
			return nil, transport.ErrClosed
		}
		s, changed := t.cur, t.changed
		t.mu.Unlock()
		if s != nil && !s.conn.IsClosed() {
			return s, nil
		}
		select {
		case <-changed:
		case <-ctx.Done():
			return nil, fmt.Errorf("rabbitmq: waiting for a connection to %s: %w", t.Name(), ctx.Err())
		case <-t.ctx.Done():
			return nil, transport.ErrClosed
		}
	}
}

// setSession makes s the current connection (nil: none) and wakes everyone
// waiting for a change. It refuses a new connection once the transport is
// closed, so that a redial racing Close cannot leave one open.
func (t *Transport) setSession(s *session) bool {
	t.mu.Lock()
	defer t.mu.Unlock()
	if s != nil && t.closed.Load() {
		return false
	}
	t.cur = s
	if !t.closed.Load() {
		t.live.Store(s)
	}
	close(t.changed)
	t.changed = make(chan struct{})
	return true
}

// isClosed reports whether Close has been called.
func (t *Transport) isClosed() bool { return t.closed.Load() }

// goAcking runs flush as a goroutine Close waits for before it closes
// anything, or refuses (false) once Close began waiting for them.
func (t *Transport) goAcking(flush func()) bool {
	return t.spawn(&t.acks, func() bool { return t.draining }, flush)
}

// drainAcks waits, bounded by ctx, for the acknowledgements taken so far to
// be written.
func (t *Transport) drainAcks(ctx context.Context) {
	t.mu.Lock()
	t.draining = true
	t.mu.Unlock()
	done := make(chan struct{})
	if !t.goOwned(func() {
		t.acks.Wait()
		close(done)
	}) {
		return
	}
	select {
	case <-done:
	case <-ctx.Done():
	}
}

// goOwned runs f as a goroutine the transport owns, which Close waits for.
// Once the transport is closed it refuses (false) without running f, so that
// no Add races Close's Wait.
func (t *Transport) goOwned(f func()) bool { return t.spawn(&t.wg, t.closed.Load, f) }

// spawn runs f as a goroutine counted in wg, unless refused says no (asked
// under mu, which whoever waits for wg takes to set what refused reads).
func (t *Transport) spawn(wg *sync.WaitGroup, refused func() bool, f func()) bool {
	t.mu.Lock()
	defer t.mu.Unlock()
	if refused() {
		return false
	}
	wg.Add(1)
	go func() {
		defer wg.Done()
		f()
	}()
	return true
}
