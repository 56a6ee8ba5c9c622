package rabbitmq

import (
	"context"
	"crypto/tls"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"strings"
	"sync"
	"time"

	amqp "github.com/rabbitmq/amqp091-go"

	"github.com/acemq/acemq-flow/broker/transport"
)

// Dial connects to the broker at url and returns a Transport that keeps
// reconnecting until Close. url is amqp:// or amqps://, naming one node or
// a comma-separated list of the nodes of a cluster, which share the user,
// password, virtual host and query:
//
//	amqp://user:password@rabbit-1:5672,rabbit-2:5672,rabbit-3:5672/vhost
//
// Dial tries the nodes in order until one accepts the connection; a lost
// connection is redialled on the next node of the list, round robin. For
// amqps://, the query parameters cacertfile, certfile, keyfile and
// server_name_indication (or Config's CAFile, CertFile, KeyFile and
// ServerName) configure TLS; a node whose certificate does not verify is a
// *TLSError, never a plain connection.
//
// Dial refuses an invalid url or cfg, and returns the error of every node
// when none accepts the first connection rather than retrying in the
// background. Neither errors, logs nor Name contain the password.
func Dial(ctx context.Context, url string, cfg Config) (*Transport, error) {
	if err := cfg.Validate(); err != nil {
		return nil, err
	}
	u, err := parseURL(url)
	if err != nil {
		return nil, err
	}
	cfg = cfg.withDefaults()
	tlss, err := newTLSSettings(u, cfg)
	if err != nil {
		return nil, err
	}
	t := &Transport{
		cfg:     cfg,
		url:     u,
		tls:     tlss,
		log:     cfg.Logger.With(slog.String("transport", u.redacted)),
		changed: make(chan struct{}),
		subs:    map[*subscription]struct{}{},
	}
	t.ctx, t.cancel = context.WithCancel(context.Background())
	var (
		s    *session
		errs []error
	)
	for i, n := range u.nodes {
		if s, err = t.connectAccepted(ctx, i); err == nil {
			break
		}
		errs = append(errs, err)
		if ctx.Err() != nil {
			break
		}
		if i+1 < len(u.nodes) {
			t.log.Warn("rabbitmq could not connect to a node; trying the next", slog.String("node", n.addr),
				slog.String("next", u.nodes[i+1].addr), slog.Any("error", err))
		}
	}
	if s == nil {
		t.cancel()
		t.wg.Wait()
		if len(errs) == 1 {
			return nil, errs[0]
		}
		return nil, &NodesError{URL: u.redacted, Errs: errs}
	}
	t.setSession(s)
	t.log.Info("rabbitmq connected", slog.String("node", s.nodeAddr()), slog.Uint64("generation", s.gen),
		slog.String("local", s.conn.LocalAddr().String()))
	t.goOwned(func() { t.supervise(s) })
	return t, nil
}

// NodesError is a first connection that no node of the URL's list accepted:
// one error per node, in the order they were tried, each naming its node.
type NodesError struct {
	// URL is the broker URL without its password.
	URL  string
	Errs []error
}

// Error lists every node's error on one line.
func (e *NodesError) Error() string {
	msgs := make([]string, len(e.Errs))
	for i, err := range e.Errs {
		msgs[i] = err.Error()
	}
	return fmt.Sprintf("rabbitmq: no node of %s accepted a connection: %s", e.URL, strings.Join(msgs, "; "))
}

// Unwrap returns every node's error, for errors.Is and errors.As.
func (e *NodesError) Unwrap() []error { return e.Errs }

// acceptedTries is how often a first connection is tried on a node that
// accepted it but closed it before its channels were open.
const acceptedTries = 4

// connectAccepted is connect for the first connection: a node that
// accepted the connection (it answers, the credentials hold) and closed
// it while its channels were being opened (a node restarting, an operator
// closing every connection) is tried again, after 100 ms doubling, before
// the next node, rather than failing the process that opens it; a node
// that refuses the connection fails at once, as before.
func (t *Transport) connectAccepted(ctx context.Context, node int) (*session, error) {
	wait := 100 * time.Millisecond
	for try := 1; ; try++ {
		s, err := t.connect(ctx, node)
		var lost *channelsError
		if err == nil || !errors.As(err, &lost) || try == acceptedTries {
			return s, err
		}
		t.log.Warn("rabbitmq closed the connection while its channels opened; trying again",
			slog.String("node", t.url.nodes[node].addr), slog.Duration("in", wait), slog.Any("error", err))
		select {
		case <-ctx.Done():
			return nil, err
		case <-time.After(wait):
		}
		wait *= 2
	}
}

// channelsError is a connection the node accepted and closed before its
// channels were open.
type channelsError struct {
	node string
	err  error
}

func (e *channelsError) Error() string {
	return fmt.Sprintf("rabbitmq: open channels on %s: %v", e.node, e.err)
}

func (e *channelsError) Unwrap() error { return e.err }

// connect dials one connection to the node at index node of the URL's list
// and opens its publish channels. Both ctx and Close abort it, including in
// the middle of the handshake.
func (t *Transport) connect(ctx context.Context, node int) (*session, error) {
	n := t.url.nodes[node]
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	stop := context.AfterFunc(t.ctx, cancel)
	defer stop()

	var tc *tls.Config
	if t.tls != nil {
		var err error
		if tc, err = t.tls.config(n.host); err != nil {
			return nil, fmt.Errorf("rabbitmq: dial %s: %w", n.redacted, err)
		}
	}
	var (
		netMu   sync.Mutex
		netConn net.Conn
		tlsConn *readRecorder
	)
	dialer := &net.Dialer{Timeout: t.cfg.DialTimeout}
	props := amqp.NewConnectionProperties()
	props.SetClientConnectionName(t.cfg.ConnectionName)
	acfg := amqp.Config{
		Heartbeat:  t.cfg.Heartbeat,
		Properties: props,
		Locale:     "en_US",
		// The node's own address: amqp091 is handed an amqp:// URL for an
		// amqps:// node (it would otherwise do the TLS itself), whose
		// default port is not TLS's.
		Dial: func(network, _ string) (net.Conn, error) {
			c, err := dialer.DialContext(ctx, network, n.addr)
			if err != nil {
				return nil, err
			}
			// amqp091 clears this deadline once the handshake is complete.
			if err := c.SetDeadline(time.Now().Add(t.cfg.DialTimeout)); err != nil {
				c.Close()
				return nil, err
			}
			netMu.Lock()
			if ctx.Err() != nil {
				netMu.Unlock()
				c.Close()
				return nil, ctx.Err()
			}
			netConn = c
			netMu.Unlock()
			if tc == nil {
				return newCoalescingConn(c), nil
			}
			tl := tls.Client(c, tc)
			if err := tl.HandshakeContext(ctx); err != nil {
				c.Close()
				return nil, err
			}
			tlsConn = &readRecorder{Conn: tl}
			return newCoalescingConn(tlsConn), nil
		},
	}
	raw := n.raw
	if tc != nil {
		// The TLS is ours (see Dial above): amqp091 speaks AMQP over it.
		_, rest, _ := strings.Cut(raw, "://")
		raw = "amqp://" + rest
	}
	// Closing the socket is the only way to interrupt a handshake in progress.
	abort := context.AfterFunc(ctx, func() {
		netMu.Lock()
		defer netMu.Unlock()
		if netConn != nil {
			netConn.Close()
		}
	})
	conn, err := amqp.DialConfig(raw, acfg)
	aborted := !abort()
	if err == nil && aborted {
		conn.Close()
		err = context.Cause(ctx)
	}
	if err != nil {
		if ctx.Err() != nil && t.ctx.Err() != nil {
			return nil, transport.ErrClosed
		}
		if ctx.Err() != nil {
			err = errors.Join(ctx.Err(), err)
		}
		if tc != nil {
			err = tlsFailure(err, tlsConn.first(), n.addr, tc.ServerName)
		}
		return nil, fmt.Errorf("rabbitmq: dial %s: %w", n.redacted, t.url.scrub(err))
	}
	s, err := t.newSession(conn, node)
	if err != nil {
		conn.Close()
		return nil, &channelsError{node: n.redacted, err: err}
	}
	return s, nil
}
