package patterns

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"slices"
	"sync"
	"time"

	"github.com/acemq/acemq-flow/broker"
	"github.com/acemq/acemq-flow/broker/transport"
)

// ErrReplayFailed is what Replay's error wraps when a copy could not be
// published (returned unroutable, nacked, or its fate unknown) or had
// nowhere to go. The message it was a copy of stays where it was.
var ErrReplayFailed = errors.New("replay failed")

// ReplayReason says why a replay stopped.
type ReplayReason string

// Why a replay stopped.
const (
	// ReplayReasonDrained: nothing was left to read.
	ReplayReasonDrained ReplayReason = "drained"
	// ReplayReasonLimit: ReplayLimit messages were moved.
	ReplayReasonLimit ReplayReason = "limit"
	// ReplayReasonDeadline: ReplayDeadline passed.
	ReplayReasonDeadline ReplayReason = "deadline"
)

// ReplayResult counts what a replay did: Moved copies confirmed by the
// broker (and their originals acknowledged), Skipped messages the filter
// declined (returned to the queue), and why it stopped ("" when it failed).
type ReplayResult struct {
	Moved   int
	Skipped int
	Reason  ReplayReason
}

// String reads "moved 37, skipped 463 (drained)".
func (r ReplayResult) String() string {
	if r.Reason == "" {
		return fmt.Sprintf("moved %d, skipped %d", r.Moved, r.Skipped)
	}
	return fmt.Sprintf("moved %d, skipped %d (%s)", r.Moved, r.Skipped, r.Reason)
}

// Replay moves messages from the queue from (a dead-letter queue, usually)
// back to where they came from, or to ReplayTo's destination, and says what
// it did.
//
// Each message the filter accepts is copied, published mandatory, and
// acknowledged only once the broker confirmed the copy: a crash in between
// replays it twice rather than losing it. Copies are published several at a
// time (ReplayInFlight), so they may arrive out of order. The copy keeps the message's
// identity (id, correlation, x-acemq-first-seen, run id) and is stamped
// with acemq-replayed-from, acemq-replayed-at (epoch ms) and
// acemq-replay-count; with ReplayRestart (the default) it goes back on
// attempt 1 with x-acemq-error cleared. The broker's x-death headers are
// dropped either way. Messages the filter declines are held unacknowledged
// for the whole pass (returning one at once would hand it straight back)
// and returned at the end in the order they were read: published to the
// queue again, confirmed, and then acknowledged, because a quorum queue
// does not keep the order of rejected messages. A pass that stops before
// the end of the queue (limit, deadline, failure) also reads the rest and
// returns it behind them, so that the queue keeps its order; a pass holds
// everything it read until it ends, so size the limit to memory.
//
// A copy that cannot be published, or a message with no x-acemq-queue to go
// back to, stops the replay with an error wrapping ErrReplayFailed, leaving
// that message where it was. ctx ending stops it with ctx's error. Either
// way the result counts what was done. It refuses an empty queue name, and
// a destination that is the queue being replayed through the default
// exchange (it would loop); a queue that does not exist is the transport's
// NotFound error.
func Replay(ctx context.Context, conn *broker.Conn, from string, opts ...ReplayOption) (ReplayResult, error) {
	if conn == nil || from == "" {
		return ReplayResult{}, fmt.Errorf("%w: replay: need a connection and a queue to replay from", broker.ErrInvalidOption)
	}
	cfg := replayConfig{restart: true, inFlight: DefaultReplayInFlight}
	for _, o := range opts {
		if err := o(&cfg); err != nil {
			return ReplayResult{}, fmt.Errorf("replay from %q: %w", from, err)
		}
	}
	if cfg.destSet && cfg.exchange == "" && cfg.key == from {
		return ReplayResult{}, fmt.Errorf("%w: replay from %q back to itself would loop", broker.ErrInvalidOption, from)
	}
	// Inspect first: a basic.get on a missing queue closes the channel every
	// held message came on.
	if _, err := conn.Transport().Inspect(ctx, from); err != nil {
		return ReplayResult{}, fmt.Errorf("replay from %q: %w", from, err)
	}
	p := &replayPass{conn: conn, from: from, cfg: cfg, slots: make(chan struct{}, cfg.inFlight)}
	return p.run(ctx)
}

// replayPass is one run of Replay.
type replayPass struct {
	conn  *broker.Conn
	from  string
	cfg   replayConfig
	slots chan struct{}
	wg    sync.WaitGroup

	mu       sync.Mutex
	result   ReplayResult
	seq      int // read order of the next message
	reserved int // moved plus in flight, for the limit
	failure  error
	held     []replayHeld
}

// replayHeld is a delivery to return to the queue at the end of the pass,
// with its place in the order it was read.
type replayHeld struct {
	seq int
	d   *transport.Delivery
}

func (p *replayPass) run(ctx context.Context) (ReplayResult, error) {
	var stopErr error
	reason := p.read(ctx, &stopErr)
	p.wg.Wait()
	if reason != ReplayReasonDrained && ctx.Err() == nil {
		stopErr = errors.Join(stopErr, p.rotate(ctx))
	}
	returnErr := p.returnHeld(ctx)
	p.mu.Lock()
	defer p.mu.Unlock()
	res := p.result
	err := errors.Join(p.failure, stopErr, returnErr)
	if err == nil {
		res.Reason = reason
	}
	return res, err
}

// read fetches and dispatches messages until a stop condition, and says
// which; a stop that is an error is put in *stopErr.
func (p *replayPass) read(ctx context.Context, stopErr *error) ReplayReason {
	t := p.conn.Transport()
	for ; ; p.seq++ {
		seq := p.seq
		if reason, stop := p.stopping(); stop {
			return reason
		}
		if err := ctx.Err(); err != nil {
			*stopErr = fmt.Errorf("replay from %q interrupted: %w", p.from, err)
			return ""
		}
		d, err := t.Get(ctx, p.from)
		if err != nil {
			*stopErr = fmt.Errorf("replay from %q: read: %w", p.from, err)
			return ""
		}
		if d == nil {
			return ReplayReasonDrained
		}
		env := replayEnvelope(&d.Message)
		if p.cfg.filter != nil && !p.cfg.filter(env, d.Body) {
			p.hold(seq, d, true)
			continue
		}
		out, err := p.copyOf(d, env)
		if err != nil {
			p.hold(seq, d, false)
			p.fail(err)
			continue
		}
		select {
		case p.slots <- struct{}{}:
		case <-ctx.Done():
			p.hold(seq, d, false)
			continue
		}
		p.mu.Lock()
		p.reserved++
		p.mu.Unlock()
		p.wg.Go(func() {
			defer func() { <-p.slots }()
			p.move(ctx, seq, d, out)
		})
	}
}

// rotate reads, without moving them, the messages the pass stopped short
// of, so that they are returned behind the held ones: the held ones go back
// at the tail, and returning the rest too keeps the whole queue in its
// original order. It reads at most as many as were ready when it started,
// so a queue still being written to cannot keep it going.
func (p *replayPass) rotate(ctx context.Context) error {
	t := p.conn.Transport()
	st, err := t.Inspect(ctx, p.from)
	if err != nil {
		return fmt.Errorf("replay from %q: the rest of the queue could not be put behind the returned messages: %w", p.from, err)
	}
	for range st.Messages {
		d, err := t.Get(ctx, p.from)
		if err != nil {
			return fmt.Errorf("replay from %q: the rest of the queue could not be put behind the returned messages: %w", p.from, err)
		}
		if d == nil {
			return nil
		}
		p.hold(p.seq, d, false)
		p.seq++
	}
	return nil
}

// stopping reports whether the limit, the deadline or a failure ends the
// pass before the next read.
func (p *replayPass) stopping() (ReplayReason, bool) {
	p.mu.Lock()
	defer p.mu.Unlock()
	switch {
	case p.failure != nil:
		return "", true
	case p.cfg.limit > 0 && p.reserved >= p.cfg.limit:
		return ReplayReasonLimit, true
	case !p.cfg.deadline.IsZero() && !time.Now().Before(p.cfg.deadline):
		return ReplayReasonDeadline, true
	}
	return "", false
}

// copyOf builds the copy of d to publish, or says why it has nowhere to go.
func (p *replayPass) copyOf(d *transport.Delivery, env broker.Envelope) (broker.Outgoing, error) {
	msg := d.Message
	msg.Headers = d.Headers.Clone()
	if msg.Headers == nil {
		msg.Headers = broker.Table{}
	}
	broker.StripBrokerHeaders(msg.Headers)
	if p.cfg.restart {
		msg.Headers[broker.HeaderAttempt] = int64(1)
		delete(msg.Headers, broker.HeaderError)
	}
	count, _ := transport.Int(msg.Headers[broker.HeaderReplayCount])
	msg.Headers[broker.HeaderReplayedFrom] = p.from
	msg.Headers[broker.HeaderReplayedAt] = time.Now().UnixMilli()
	msg.Headers[broker.HeaderReplayCount] = count + 1
	out := broker.Outgoing{Exchange: p.cfg.exchange, RoutingKey: p.cfg.key, Mandatory: true, Message: msg}
	if !p.cfg.destSet {
		switch env.SourceQueue {
		case "":
			return out, fmt.Errorf("%w: message %s from %q has no %s to go back to; name a destination with ReplayTo",
				ErrReplayFailed, d.MessageID, p.from, broker.HeaderQueue)
		case p.from:
			return out, fmt.Errorf("%w: message %s from %q names that queue itself as its %s; replaying it there would loop",
				ErrReplayFailed, d.MessageID, p.from, broker.HeaderQueue)
		}
		out.RoutingKey = env.SourceQueue
	}
	return out, nil
}

// move publishes one copy and acknowledges its original once confirmed;
// an unconfirmed copy fails the pass and the original is returned.
func (p *replayPass) move(ctx context.Context, seq int, d *transport.Delivery, out broker.Outgoing) {
	if err := p.conn.Send(ctx, out); err != nil {
		p.hold(seq, d, false)
		p.fail(fmt.Errorf("%w: message %s from %q: %w", ErrReplayFailed, d.MessageID, p.from, err))
		return
	}
	if err := d.Ack(); err != nil {
		// The copy is on its way; the original will be delivered again,
		// which costs a duplicate rather than a message.
		p.conn.Logger().Warn("replayed, but the original could not be acknowledged and will be replayed again",
			slog.String("queue", p.from), slog.String("message_id", d.MessageID), slog.Any("error", err))
	}
	p.mu.Lock()
	defer p.mu.Unlock()
	p.result.Moved++
	p.report()
}

// hold keeps d to return at the end of the pass; skipped counts it as
// declined by the filter rather than failed.
func (p *replayPass) hold(seq int, d *transport.Delivery, skipped bool) {
	p.mu.Lock()
	defer p.mu.Unlock()
	p.held = append(p.held, replayHeld{seq: seq, d: d})
	if skipped {
		p.result.Skipped++
		p.report()
	}
}

// fail records the first failure; it stops the pass.
func (p *replayPass) fail(err error) {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.failure == nil {
		p.failure = err
	}
}

// report calls the progress callback; p.mu is held, which keeps the calls
// one at a time.
func (p *replayPass) report() {
	if p.cfg.progress != nil {
		p.cfg.progress(p.result)
	}
}

// returnHeld gives every held message back to the queue, in the order it
// was read, by publishing it again (mandatory, confirmed one at a time,
// which keeps the order) and then acknowledging it. Rejecting with requeue
// would not keep it: RabbitMQ's quorum queues put a requeued message
// fetched with basic.get at their tail, and reorder a burst of rejects. If
// a publish fails (or ctx ended), the rest is rejected with requeue
// instead: nothing is lost, only the order.
func (p *replayPass) returnHeld(ctx context.Context) error {
	p.mu.Lock()
	held := p.held
	p.held = nil
	p.mu.Unlock()
	slices.SortFunc(held, func(a, b replayHeld) int { return a.seq - b.seq })
	var errs []error
	for i, h := range held {
		if ctx.Err() != nil {
			errs = append(errs, p.requeue(held[i:])...)
			break
		}
		err := p.conn.Send(ctx, broker.Outgoing{RoutingKey: p.from, Mandatory: true, Message: h.d.Message})
		if err != nil {
			errs = append(errs, fmt.Errorf("replay from %q: could not return message %s in order; returning the rest as the broker will: %w",
				p.from, h.d.MessageID, err))
			errs = append(errs, p.requeue(held[i:])...)
			break
		}
		if err := h.d.Ack(); err != nil {
			p.conn.Logger().Warn("returned, but the original could not be acknowledged and will be there twice",
				slog.String("queue", p.from), slog.String("message_id", h.d.MessageID), slog.Any("error", err))
		}
	}
	return errors.Join(errs...)
}

// requeue rejects held with requeue, in order. A stale delivery (its
// channel is gone) went back on its own.
func (p *replayPass) requeue(held []replayHeld) []error {
	var errs []error
	for _, h := range held {
		if err := h.d.Nack(true); err != nil && !errors.Is(err, transport.ErrStaleDelivery) {
			errs = append(errs, fmt.Errorf("replay from %q: return message %s: %w (the broker returns it when the connection closes)",
				p.from, h.d.MessageID, err))
		}
	}
	return errs
}
