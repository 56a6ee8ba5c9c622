package rabbitmq

import (
	"log/slog"
	"math/rand/v2"
	"time"

	amqp "github.com/rabbitmq/amqp091-go"

	"github.com/acemq/acemq-flow/broker/transport"
)

// supervise watches the current connection and replaces it whenever it is
// lost, until Close.
func (t *Transport) supervise(s *session) {
	for {
		select {
		case <-s.lost:
		case <-t.ctx.Done():
			return
		}
		if t.ctx.Err() != nil {
			return
		}
		// Publishes awaiting a confirm on s fail as amqp091 closes its
		// channels; deliveries received on s are stale from here on.
		t.setSession(nil)
		attrs := []any{slog.String("node", s.nodeAddr()), slog.Uint64("generation", s.gen)}
		if s.lostErr != nil {
			attrs = append(attrs, slog.Int("code", s.lostErr.Code), slog.String("reason", s.lostErr.Reason))
		}
		t.log.Warn("rabbitmq connection lost; reconnecting", attrs...)
		if s = t.reconnect(s.node); s == nil {
			return
		}
	}
}

// reconnect redials with backoff and jitter until a connection is up and the
// recorded topology is declared on it, then makes it current (which resumes
// subscriptions and waiting publishes). Each attempt dials the next node of
// the URL's list, starting with the one after lost (the index of the node
// whose connection was lost): a node that went away is tried last. It
// returns nil once Close is called.
func (t *Transport) reconnect(lost int) *session {
	delay := t.cfg.ReconnectMin
	node := lost
	for attempt := 1; ; attempt++ {
		node = (node + 1) % len(t.url.nodes)
		wait := jitter(delay)
		timer := time.NewTimer(wait)
		select {
		case <-timer.C:
		case <-t.ctx.Done():
			timer.Stop()
			return nil
		}
		delay = min(delay*2, t.cfg.ReconnectMax)

		addr := t.url.nodes[node].addr
		t.log.Info("rabbitmq redialling", slog.String("node", addr), slog.Int("attempt", attempt), slog.Duration("after", wait))
		s, err := t.connect(t.ctx, node)
		if err != nil {
			if t.ctx.Err() != nil {
				return nil
			}
			t.log.Warn("rabbitmq redial failed", slog.String("node", addr), slog.Int("attempt", attempt), slog.Any("error", err))
			continue
		}
		if err := t.redeclare(s, attempt <= lockedRetries); err != nil {
			t.log.Warn("rabbitmq redeclaring topology failed; redialling", slog.String("node", addr), slog.Int("attempt", attempt), slog.Any("error", err))
			s.conn.Close()
			continue
		}
		if !t.setSession(s) {
			s.conn.Close()
			return nil
		}
		attrs := []any{slog.String("node", addr), slog.Uint64("generation", s.gen), slog.Int("attempt", attempt),
			slog.String("local", s.conn.LocalAddr().String())}
		if node != lost {
			attrs = append(attrs, slog.String("previous", t.url.nodes[lost].addr))
		}
		t.log.Info("rabbitmq reconnected", attrs...)
		return s
	}
}

// jitter spreads d over [d/2, 3d/2) so that many clients dropped at once do
// not redial in step.
func jitter(d time.Duration) time.Duration {
	if d <= 1 {
		return d
	}
	return d/2 + rand.N(d)
}

// lockedRetries is how many reconnect attempts a locked exclusive queue may
// fail before it is skipped like any other refused declaration.
const lockedRetries = 5

// redeclare declares the recorded topology on a new connection before
// anything else uses it. An item the broker refuses is logged and skipped,
// since redialling would not change the answer. A lost connection fails the
// attempt, and so does a locked exclusive queue while retryLocked holds
// (405: the broker may not yet have removed the old connection's copy), so
// that the next attempt retries.
func (t *Transport) redeclare(s *session, retryLocked bool) error {
	topo := t.topo.snapshot()
	if len(topo.Exchanges)+len(topo.Queues)+len(topo.Bindings) == 0 {
		return nil
	}
	ch, err := s.channel()
	if err != nil {
		return err
	}
	defer func() { ch.Close() }()
	try := func(declare func(*amqp.Channel) error) error {
		err := declare(ch)
		if err == nil {
			return nil
		}
		if s.isLost() || retryLocked && transport.IsCode(err, transport.ResourceLocked) {
			return err
		}
		t.log.Error("rabbitmq could not redeclare; skipping it", slog.Any("error", err))
		// The exception closed the channel.
		ch.Close()
		ch, err = s.channel()
		return err
	}
	for _, e := range topo.Exchanges {
		if err := try(func(ch *amqp.Channel) error { return declareExchange(ch, e) }); err != nil {
			return err
		}
	}
	for _, q := range topo.Queues {
		if err := try(func(ch *amqp.Channel) error { return declareQueue(ch, q) }); err != nil {
			return err
		}
	}
	for _, b := range topo.Bindings {
		if err := try(func(ch *amqp.Channel) error { return declareBinding(ch, b) }); err != nil {
			return err
		}
	}
	t.log.Info("rabbitmq topology redeclared", slog.Uint64("generation", s.gen),
		slog.Int("exchanges", len(topo.Exchanges)), slog.Int("queues", len(topo.Queues)), slog.Int("bindings", len(topo.Bindings)))
	return nil
}
