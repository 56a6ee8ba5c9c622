package rabbitmq

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"sync"
	"time"

	amqp "github.com/rabbitmq/amqp091-go"

	"github.com/acemq/acemq-flow/broker/transport"
)

// Dial connects to the broker at url (amqp:// or amqps://) and returns a
// Transport that keeps reconnecting until Close. It refuses an invalid url
// or cfg, and returns the error of a failed first connection rather than
// retrying it in the background. Neither errors nor Name contain the
// password.
func Dial(ctx context.Context, url string, cfg Config) (*Transport, error) {
	if err := cfg.Validate(); err != nil {
		return nil, err
	}
	u, err := parseURL(url)
	if err != nil {
		return nil, err
	}
	cfg = cfg.withDefaults()
	t := &Transport{
		cfg:     cfg,
		url:     u,
		log:     cfg.Logger.With(slog.String("transport", u.redacted)),
		changed: make(chan struct{}),
		subs:    map[*subscription]struct{}{},
	}
	t.ctx, t.cancel = context.WithCancel(context.Background())
	s, err := t.connect(ctx)
	if err != nil {
		t.cancel()
		t.wg.Wait()
		return nil, err
	}
	t.setSession(s)
	t.log.Info("rabbitmq connected", slog.Uint64("generation", s.gen), slog.String("local", s.conn.LocalAddr().String()))
	t.goOwned(func() { t.supervise(s) })
	return t, nil
}

// connect dials one connection and opens its publish channels. Both ctx and
// Close abort it, including in the middle of the handshake.
func (t *Transport) connect(ctx context.Context) (*session, error) {
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	stop := context.AfterFunc(t.ctx, cancel)
	defer stop()

	var (
		netMu   sync.Mutex
		netConn net.Conn
	)
	dialer := &net.Dialer{Timeout: t.cfg.DialTimeout}
	props := amqp.NewConnectionProperties()
	props.SetClientConnectionName(t.cfg.ConnectionName)
	acfg := amqp.Config{
		Heartbeat:  t.cfg.Heartbeat,
		Properties: props,
		Locale:     "en_US",
		Dial: func(network, addr string) (net.Conn, error) {
			c, err := dialer.DialContext(ctx, network, addr)
			if err != nil {
				return nil, err
			}
			// amqp091 clears this deadline once the handshake is complete.
			if err := c.SetDeadline(time.Now().Add(t.cfg.DialTimeout)); err != nil {
				c.Close()
				return nil, err
			}
			netMu.Lock()
			defer netMu.Unlock()
			if ctx.Err() != nil {
				c.Close()
				return nil, ctx.Err()
			}
			netConn = c
			return c, nil
		},
	}
	if t.cfg.TLS != nil {
		// amqp091 writes ServerName into the config it is given.
		acfg.TLSClientConfig = t.cfg.TLS.Clone()
	}
	// Closing the socket is the only way to interrupt a handshake in progress.
	abort := context.AfterFunc(ctx, func() {
		netMu.Lock()
		defer netMu.Unlock()
		if netConn != nil {
			netConn.Close()
		}
	})
	conn, err := amqp.DialConfig(t.url.raw, acfg)
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
		return nil, fmt.Errorf("rabbitmq: dial %s: %w", t.url.redacted, t.url.scrub(err))
	}
	s, err := t.newSession(conn)
	if err != nil {
		conn.Close()
		return nil, fmt.Errorf("rabbitmq: open channels on %s: %w", t.url.redacted, err)
	}
	return s, nil
}
