package patterns

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
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
// broker (and their originals acknowledged), Discarded messages
// acknowledged without a copy (ReplayDiscard), Skipped messages the filter
// declined (returned to the queue), and why it stopped ("" when it
// failed).
type ReplayResult struct {
	Moved     int
	Discarded int
	Skipped   int
	Reason    ReplayReason
}

// String reads "moved 37, skipped 463 (drained)", or "discarded 37, ..."
// for a pass that discards.
func (r ReplayResult) String() string {
	s := fmt.Sprintf("moved %d, skipped %d", r.Moved, r.Skipped)
	if r.Discarded > 0 {
		s = fmt.Sprintf("discarded %d, skipped %d", r.Discarded, r.Skipped)
	}
	if r.Reason == "" {
		return s
	}
	return fmt.Sprintf("%s (%s)", s, r.Reason)
}

// Replay moves messages from the queue from (a dead-letter queue, usually)
// back to where they came from, or to ReplayTo's destination, and says what
// it did.
//
// A pass reads, with a consumer, the messages that were ready in the queue
// when it started, and no more: messages that arrive during the pass, and
// those it puts back, wait for the next one.
//
// Each message the filter accepts is copied, published mandatory, and
// acknowledged only once the broker confirmed the copy: a crash in between
// replays it twice rather than losing it. Copies are published several at a
// time (ReplayInFlight), so they may arrive out of order. The copy keeps the message's
// identity (id, correlation, x-acemq-first-seen, run id; a message without
// x-acemq-first-seen gets the one worked out for it, its timestamp or the
// moment the pass read it) and is stamped
// with acemq-replayed-from, acemq-replayed-at (epoch ms) and
// acemq-replay-count; with ReplayRestart (the default) it goes back on
// attempt 1 with x-acemq-error cleared. The broker's x-death headers are
// dropped either way. Messages the filter declines are held unacknowledged
// and returned to the queue in the order they were read: published to the
// queue again, behind everything the pass will read (so they are never
// handed back to it), confirmed, and only then acknowledged, because
// rejecting them would hand them straight back, and a quorum queue does not
// keep the order of rejected messages. They are returned one at a time as
// the pass goes, while it reads on. A pass that stops before the end of the
// queue (limit, deadline, failure) also reads the rest and returns it behind
// them, so that the queue keeps its order. A tool that dies half way through
// loses nothing: the broker still has every message not yet acknowledged,
// though one returned but not yet acknowledged is then there twice, and the
// queue is left rotated at the point it reached.
//
// A copy that cannot be published, or a message with nowhere to go back to
// (neither x-acemq-queue nor, for one the broker dead-lettered itself,
// x-first-death-queue), stops the replay with an error wrapping ErrReplayFailed, leaving
// that message where it was. ctx ending stops it with ctx's error, and what
// was not yet returned goes back as the broker puts rejected messages back:
// nothing is lost, only the order. Either way the result counts what was
// done. It refuses an empty queue name, and a destination that is the queue
// being replayed through the default exchange (it would loop); a queue that
// does not exist is the transport's NotFound error.
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
	if cfg.discard && cfg.destSet {
		return ReplayResult{}, fmt.Errorf("%w: replay from %q: a pass that discards sends nothing anywhere (ReplayTo)", broker.ErrInvalidOption, from)
	}
	if cfg.destSet && cfg.exchange == "" && cfg.key == from {
		return ReplayResult{}, fmt.Errorf("%w: replay from %q back to itself would loop", broker.ErrInvalidOption, from)
	}
	// Inspect first: how many messages are ready is how many the pass reads,
	// so that what it puts back at the tail is never read again.
	st, err := conn.Transport().Inspect(ctx, from)
	if err != nil {
		return ReplayResult{}, fmt.Errorf("replay from %q: %w", from, err)
	}
	p := &replayPass{
		conn: conn, from: from, cfg: cfg, count: st.Messages,
		slots: make(chan struct{}, cfg.inFlight), broken: make(chan struct{}),
	}
	return p.run(ctx)
}

// replayPrefetch is the most deliveries a pass's consumer has unsettled at
// once. It covers the copies in flight with room to spare for declined
// messages waiting their turn to be returned, so that reading never waits
// on the broker; the pass never holds more than this many deliveries.
const replayPrefetch = 1024

// replayIdle is how long a pass waits for a delivery before it asks the
// broker whether any are left: another consumer on the queue, or messages
// expiring, can leave fewer than the pass counted when it started.
const replayIdle = 250 * time.Millisecond

// replayCancelTimeout bounds cancelling the pass's consumer when ctx has
// already ended.
const replayCancelTimeout = 10 * time.Second

// replayPass is one run of Replay.
//
// It reads with a consumer (basic.consume with a prefetch) rather than
// basic.get, which on a quorum queue costs a round trip through the
// replication log per message. The reader dispatches each delivery in the
// order read: a copy to publish (several at a time), or a message to return
// (declined by the filter, read after the pass stopped, or whose copy
// failed). One returner goroutine walks the deliveries in that same order,
// waits for each one's fate, and returns those that go back by publishing
// them to the queue's tail, confirmed, one at a time (which keeps their
// order), and then acknowledging them.
//
// Returning as it goes rather than at the end is what keeps the pass from
// stalling: a delivery held unsettled counts against the prefetch, so a pass
// that held every declined message would stop being sent any once it held
// a prefetch's worth of them. What it returns goes behind the messages the
// pass has still to read, and the pass reads only the count it started
// with, so a returned message is never read again, and the queue ends in
// its original order. Messages the pass returns, and any that arrive
// during the pass, are in the queue behind that count; to be sure the
// broker never sends the consumer one of them (which cancelling would then
// reject back, possibly out of order), the pass settles at most count -
// prefetch deliveries while it is subscribed: the broker sends a consumer
// at most its prefetch beyond what it settled, so it sends no more than
// count. Acknowledgements past that wait for the consumer to be cancelled,
// and are sent straight after.
type replayPass struct {
	conn  *broker.Conn
	from  string
	cfg   replayConfig
	count int // messages ready when the pass started: how many it reads
	// prefetch is the consumer's: at most count, so that settling nothing
	// while subscribed still lets the broker send every message.
	prefetch int
	slots    chan struct{}
	wg       sync.WaitGroup // copies in flight

	// broken is closed when returning a message failed (or ctx ended), so
	// that reading stops rather than waits for deliveries the prefetch no
	// longer lets the broker send.
	broken chan struct{}

	mu       sync.Mutex
	result   ReplayResult
	reserved int // moved, discarded, and in flight, for the limit
	failure  error
	// live is true while the consumer is subscribed; settled counts the
	// acknowledgements sent meanwhile, deferred those held back (see
	// replayPass).
	live     bool
	settled  int
	deferred []replayAck
}

// replayItem is one delivery, in the order read, on its way to the returner.
// done is closed once its fate is known; back then says it is to be
// returned to the queue.
type replayItem struct {
	d    *transport.Delivery
	done chan struct{}
	back bool
}

// replayAck is an acknowledgement held back until the consumer is
// cancelled, with what to log if it fails.
type replayAck struct {
	d      *transport.Delivery
	failed string
}

func (p *replayPass) run(ctx context.Context) (ReplayResult, error) {
	if p.count == 0 {
		return ReplayResult{Reason: ReplayReasonDrained}, nil
	}
	// Nothing read yet: a pass stopped now has nothing to put back.
	if reason, stop := p.stopping(); stop {
		return ReplayResult{Reason: reason}, nil
	}
	// The most RabbitMQ takes, and no more than the pass reads.
	p.prefetch = min(p.count, max(replayPrefetch, 2*p.cfg.inFlight), 65535)
	sub, err := p.conn.Transport().Consume(ctx, p.from, transport.ConsumeOptions{Prefetch: p.prefetch})
	if err != nil {
		return ReplayResult{}, fmt.Errorf("replay from %q: read: %w", p.from, err)
	}
	p.mu.Lock()
	p.live = true
	p.mu.Unlock()
	items := make(chan *replayItem, p.prefetch)
	type returned struct {
		left []*replayItem
		err  error
	}
	returnerDone := make(chan returned, 1)
	go func() {
		left, err := p.returner(ctx, items)
		returnerDone <- returned{left, err}
	}()

	reason, stopErr := p.read(ctx, sub, items)
	close(items)
	cancelErr := p.cancel(ctx, sub)
	p.wg.Wait()
	r := <-returnerDone
	requeueErr := p.requeue(r.left)

	p.mu.Lock()
	defer p.mu.Unlock()
	res := p.result
	err = errors.Join(p.failure, stopErr, r.err, requeueErr, cancelErr)
	if err == nil {
		res.Reason = reason
	}
	return res, err
}

// read receives deliveries and dispatches them in order until it has read
// p.count, and says why the pass stopped; a stop that is an error is
// returned as one. Once the limit, the deadline or a failure stopped the
// pass it reads on, to p.count, and sends the rest back behind what it
// returned. It stops early when ctx ends, when the subscription ends, when
// returning failed, or when the queue has nothing more for it.
func (p *replayPass) read(ctx context.Context, sub transport.Subscription, items chan<- *replayItem) (ReplayReason, error) {
	reason, stopped := ReplayReason(""), false
	idle := time.NewTimer(replayIdle)
	defer idle.Stop()
	for seq := 0; seq < p.count; {
		if err := ctx.Err(); err != nil {
			return reason, fmt.Errorf("replay from %q interrupted: %w", p.from, err)
		}
		// The idle timer measures only the wait for a delivery, never time
		// spent on the last one (a slow filter or progress callback, a
		// wait for a copy slot): Reset discards a tick that came meanwhile.
		idle.Reset(replayIdle)
		var d *transport.Delivery
		select {
		case got, ok := <-sub.Deliveries():
			if !ok {
				return reason, fmt.Errorf("replay from %q: read: the consumer ended: %w", p.from, sub.Err())
			}
			d = got
		case <-ctx.Done():
			return reason, fmt.Errorf("replay from %q interrupted: %w", p.from, ctx.Err())
		case <-p.broken:
			return reason, nil // the returner says why
		case <-idle.C:
			if got, ok := p.ready(sub); ok {
				d = got
				break
			}
			st, err := p.conn.Transport().Inspect(ctx, p.from)
			if err != nil {
				return reason, fmt.Errorf("replay from %q: read: %w", p.from, err)
			}
			if st.Messages == 0 {
				// Someone else took the rest; a delivery that raced this
				// goes back when the consumer is cancelled.
				if !stopped {
					reason = ReplayReasonDrained
				}
				return reason, nil
			}
			continue
		}
		seq++
		it := &replayItem{d: d, done: make(chan struct{})}
		if !stopped {
			reason, stopped = p.stopping()
		}
		if stopped {
			p.giveBack(it, items, false)
			continue
		}
		env := replayEnvelope(&d.Message)
		if p.cfg.filter != nil && !p.cfg.filter(env, d.Body) {
			p.giveBack(it, items, true)
			continue
		}
		if p.cfg.discard {
			p.discard(it, items)
			continue
		}
		out, err := p.copyOf(d, env)
		if err != nil {
			p.fail(err)
			p.giveBack(it, items, false)
			continue
		}
		select {
		case p.slots <- struct{}{}:
		case <-ctx.Done():
			p.giveBack(it, items, false)
			continue
		}
		p.mu.Lock()
		p.reserved++
		p.mu.Unlock()
		items <- it
		p.wg.Go(func() {
			defer func() { <-p.slots }()
			p.move(ctx, it, out)
		})
	}
	if !stopped {
		reason = ReplayReasonDrained
	}
	return reason, nil
}

// ready takes a delivery that is already waiting, if there is one; ok is
// false when none is (or the subscription ended).
func (p *replayPass) ready(sub transport.Subscription) (*transport.Delivery, bool) {
	select {
	case d, ok := <-sub.Deliveries():
		return d, ok && d != nil
	default:
		return nil, false
	}
}

// giveBack sends it to be returned to the queue; skipped counts it as
// declined by the filter.
func (p *replayPass) giveBack(it *replayItem, items chan<- *replayItem, skipped bool) {
	it.back = true
	close(it.done)
	if skipped {
		p.mu.Lock()
		p.result.Skipped++
		p.report()
		p.mu.Unlock()
	}
	items <- it
}

// discard acknowledges it without a copy, in its turn among the items.
func (p *replayPass) discard(it *replayItem, items chan<- *replayItem) {
	p.ack(it.d, "discarded, but could not be acknowledged and will be there still")
	close(it.done)
	p.mu.Lock()
	p.reserved++
	p.result.Discarded++
	p.report()
	p.mu.Unlock()
	items <- it
}

// stopping reports whether the limit, the deadline or a failure ends the
// pass before the next message.
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
	if _, ok := msg.Headers[broker.HeaderFirstSeen]; !ok {
		// A foreign publisher's message: the copy carries the first-seen
		// worked out for it, so that every reader after it sees that one.
		msg.Headers[broker.HeaderFirstSeen] = env.FirstSeen.UnixMilli()
	}
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
		source := env.SourceQueue
		if source == "" {
			// Dead-lettered by the broker itself (expired, rejected by a
			// length limit, a broker-side reject): it names the queue.
			source, _ = d.Headers["x-first-death-queue"].(string)
		}
		switch source {
		case "":
			return out, fmt.Errorf("%w: message %s from %q has no %s to go back to; name a destination with ReplayTo",
				ErrReplayFailed, d.MessageID, p.from, broker.HeaderQueue)
		case p.from:
			return out, fmt.Errorf("%w: message %s from %q names that queue itself as its %s; replaying it there would loop",
				ErrReplayFailed, d.MessageID, p.from, broker.HeaderQueue)
		}
		out.RoutingKey = source
	}
	return out, nil
}

// move publishes one copy and acknowledges its original once confirmed;
// an unconfirmed copy fails the pass and the original is returned.
func (p *replayPass) move(ctx context.Context, it *replayItem, out broker.Outgoing) {
	defer close(it.done)
	if err := p.conn.Send(ctx, out); err != nil {
		it.back = true
		p.fail(fmt.Errorf("%w: message %s from %q: %w", ErrReplayFailed, it.d.MessageID, p.from, err))
		return
	}
	// The copy is on its way; should the acknowledgement fail, the original
	// will be delivered again, which costs a duplicate rather than a message.
	p.ack(it.d, "replayed, but the original could not be acknowledged and will be replayed again")
	p.mu.Lock()
	defer p.mu.Unlock()
	p.result.Moved++
	p.report()
}

// returner returns, in the order read, the items that go back to the queue:
// published again (mandatory, confirmed one at a time, which keeps the
// order) and then acknowledged. Rejecting with requeue would not keep it:
// RabbitMQ's quorum queues reorder a burst of rejects. Once a publish fails
// (or ctx ended) it closes p.broken and returns what it did not return, to
// be rejected with requeue once the consumer is cancelled: nothing is lost,
// only the order.
func (p *replayPass) returner(ctx context.Context, items <-chan *replayItem) ([]*replayItem, error) {
	var left []*replayItem
	var failed error
	for it := range items {
		<-it.done
		if !it.back {
			continue
		}
		if failed == nil && ctx.Err() != nil {
			failed = fmt.Errorf("replay from %q: could not return message %s in order; returning the rest as the broker will: %w",
				p.from, it.d.MessageID, ctx.Err())
			close(p.broken)
		}
		if failed != nil {
			left = append(left, it)
			continue
		}
		err := p.conn.Send(ctx, broker.Outgoing{RoutingKey: p.from, Mandatory: true, Message: it.d.Message})
		if err != nil {
			failed = fmt.Errorf("replay from %q: could not return message %s in order; returning the rest as the broker will: %w",
				p.from, it.d.MessageID, err)
			close(p.broken)
			left = append(left, it)
			continue
		}
		p.ack(it.d, "returned, but the original could not be acknowledged and will be there twice")
	}
	return left, failed
}

// ack acknowledges d now, or once the consumer is cancelled when settling
// it now could let the broker send more than the pass's count (see
// replayPass); failed is what to log if the acknowledgement fails.
func (p *replayPass) ack(d *transport.Delivery, failed string) {
	p.mu.Lock()
	if p.live && p.settled >= p.count-p.prefetch {
		p.deferred = append(p.deferred, replayAck{d: d, failed: failed})
		p.mu.Unlock()
		return
	}
	if p.live {
		p.settled++
	}
	p.mu.Unlock()
	p.sendAck(d, failed)
}

// sendAck acknowledges d, logging failed with the error if that fails.
func (p *replayPass) sendAck(d *transport.Delivery, failed string) {
	if err := d.Ack(); err != nil {
		p.conn.Logger().Warn(failed, slog.String("queue", p.from), slog.String("message_id", d.MessageID), slog.Any("error", err))
	}
}

// cancel stops the consumer, rejects with requeue any delivery still
// buffered (only possible when the pass stopped before its count), and then
// sends the acknowledgements held back while it was subscribed.
func (p *replayPass) cancel(ctx context.Context, sub transport.Subscription) error {
	cctx, stop := context.WithTimeout(context.WithoutCancel(ctx), replayCancelTimeout)
	defer stop()
	err := sub.Cancel(cctx)
	if err != nil {
		err = fmt.Errorf("replay from %q: cancel the consumer: %w", p.from, err)
	} else {
		// Deliveries is closed now; anything left in it came after the
		// pass's last read.
		for d := range sub.Deliveries() {
			if nerr := d.Nack(true); nerr != nil && !errors.Is(nerr, transport.ErrStaleDelivery) {
				err = errors.Join(err, fmt.Errorf("replay from %q: return message %s: %w (the broker returns it when the connection closes)",
					p.from, d.MessageID, nerr))
			}
		}
	}
	p.mu.Lock()
	p.live = false
	deferred := p.deferred
	p.deferred = nil
	p.mu.Unlock()
	for _, a := range deferred {
		p.sendAck(a.d, a.failed)
	}
	return err
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

// requeue rejects the items left with requeue, in order. A stale delivery
// (its channel is gone) went back on its own.
func (p *replayPass) requeue(left []*replayItem) error {
	var errs []error
	for _, it := range left {
		if err := it.d.Nack(true); err != nil && !errors.Is(err, transport.ErrStaleDelivery) {
			errs = append(errs, fmt.Errorf("replay from %q: return message %s: %w (the broker returns it when the connection closes)",
				p.from, it.d.MessageID, err))
		}
	}
	return errors.Join(errs...)
}
