package rabbitmq

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"fmt"
	"log/slog"
	"sync"

	amqp "github.com/rabbitmq/amqp091-go"

	"github.com/acemq/acemq-flow/broker/transport"
)

// Consume subscribes to queue on a channel of its own with basic.qos set to
// opts.Prefetch and manual acknowledgement; the subscription survives
// reconnects (see the package doc). It refuses a prefetch outside 1..65535
// (ErrInvalidPrefetch) and arguments that are not AMQP field values; a queue
// that does not exist is an *transport.AMQPError with code
// transport.NotFound.
func (t *Transport) Consume(ctx context.Context, queue string, opts transport.ConsumeOptions) (transport.Subscription, error) {
	if opts.Prefetch < 1 || opts.Prefetch > 65535 {
		return nil, fmt.Errorf("%w: got %d", ErrInvalidPrefetch, opts.Prefetch)
	}
	if err := opts.Args.Validate(); err != nil {
		return nil, fmt.Errorf("rabbitmq: consume from queue %q: arguments: %w", queue, err)
	}
	opts.Args = opts.Args.Clone()
	if opts.Tag == "" {
		opts.Tag = consumerTag()
	}
	sub := &subscription{
		t:     t,
		queue: queue,
		opts:  opts,
		out:   make(chan *transport.Delivery),
		done:  make(chan struct{}),
		log:   t.log.With(slog.String("queue", queue), slog.String("consumer_tag", opts.Tag)),
	}
	sub.ctx, sub.stop = context.WithCancel(t.ctx)
	c, err := sub.subscribe(ctx, opts.Args, attempt{})
	if err != nil {
		sub.stop()
		return nil, fmt.Errorf("rabbitmq: consume from queue %q: %w", queue, err)
	}
	t.mu.Lock()
	t.subs[sub] = struct{}{}
	t.mu.Unlock()
	if !t.goOwned(func() { sub.run(c) }) {
		// Close came first; finish undoes the registration.
		sub.stop()
		c.h.retire()
		sub.finish()
		return nil, transport.ErrClosed
	}
	return sub, nil
}

// consumerTag generates a tag that cannot collide with another process's.
func consumerTag() string {
	var b [8]byte
	_, _ = rand.Read(b[:]) // crypto/rand.Read never fails
	return "acemq-" + hex.EncodeToString(b[:])
}

// subscription is a consumer that outlives the channels it runs on.
type subscription struct {
	t     *Transport
	queue string
	opts  transport.ConsumeOptions
	out   chan *transport.Delivery
	log   *slog.Logger

	// ctx is cancelled by Cancel and by Close of the transport.
	ctx  context.Context
	stop context.CancelFunc
	done chan struct{} // closed once out is closed

	mu  sync.Mutex
	err error
}

// consumer is one basic.consume on one channel.
type consumer struct {
	s          *session
	h          *heldChannel
	deliveries <-chan amqp.Delivery
	cancels    chan string
	closes     chan *amqp.Error
	closeErr   *amqp.Error
	// probe says the consumer runs at prefetch 1 after the connection was
	// lost to a frame amqp091 could not read, and ends after its first
	// delivery (see run).
	probe bool
}

// Deliveries yields the subscription's messages; it is closed when the
// subscription ends.
func (sub *subscription) Deliveries() <-chan *transport.Delivery { return sub.out }

// Err is why the subscription ended on its own, or nil.
func (sub *subscription) Err() error {
	sub.mu.Lock()
	defer sub.mu.Unlock()
	return sub.err
}

// Cancel sends basic.cancel, requeues whatever the broker sent after it
// raced the cancel, and closes Deliveries. Deliveries already received stay
// settle-able: their channel stays open until they are settled. Cancel is
// idempotent and waits, bounded by ctx, for Deliveries to close.
func (sub *subscription) Cancel(ctx context.Context) error {
	sub.stop()
	select {
	case <-sub.done:
		return nil
	case <-ctx.Done():
		return fmt.Errorf("rabbitmq: cancel consumer %q: %w", sub.opts.Tag, ctx.Err())
	}
}

// attempt says how subscribe consumes.
type attempt struct {
	// resume: the subscription is coming back after its consumer ended; the
	// broker has accepted the same basic.consume before.
	resume bool
	// probe: consume at prefetch 1 and end after the first delivery (see
	// run).
	probe bool
}

// subscribe opens a channel, sets its prefetch and starts consuming with
// args, waiting bounded by ctx for a connection and retrying on the next one
// if the connection goes away under it.
//
// A first subscription is not retried when the broker closed the connection
// with a hard error (retryable): the arguments may be what it objected to,
// and the caller should hear so. A resubscription is retried whatever the
// code: the broker took the same consume before, so a connection closed
// under it (by another goroutine's operation, or by an operator) is the
// connection's failure, and ending the subscription would leave its queue
// without a consumer on a connection that comes back.
func (sub *subscription) subscribe(ctx context.Context, args transport.Table, a attempt) (*consumer, error) {
	if err := args.Validate(); err != nil {
		return nil, fmt.Errorf("resume arguments: %w", err)
	}
	for {
		s, err := sub.t.session(ctx)
		if err != nil {
			return nil, err
		}
		c, err := sub.consumeOn(s, args, a.probe)
		if err != nil && (a.resume || retryable(err)) && s.lostUnder(ctx, err) {
			sub.log.Debug("rabbitmq connection lost while subscribing; subscribing on the next one", slog.Any("error", err))
			continue
		}
		return c, err
	}
}

func (sub *subscription) consumeOn(s *session, args transport.Table, probe bool) (*consumer, error) {
	ch, err := s.channel()
	if err != nil {
		return nil, err
	}
	prefetch := sub.opts.Prefetch
	if probe {
		prefetch = 1
	}
	c := &consumer{
		s:     s,
		probe: probe,
		h:     &heldChannel{t: sub.t, ch: ch, coalesce: true},
		// Both are read by the subscription's goroutine; buffered so that
		// amqp091's reader never waits on them.
		closes:  ch.NotifyClose(make(chan *amqp.Error, 1)),
		cancels: ch.NotifyCancel(make(chan string, 4)),
	}
	if err := ch.Qos(prefetch, 0, false); err != nil {
		ch.Close()
		return nil, fmt.Errorf("basic.qos: %w", mapError(err))
	}
	c.deliveries, err = ch.Consume(sub.queue, sub.opts.Tag, false, sub.opts.Exclusive, false, false, toTable(args))
	if err != nil {
		ch.Close()
		return nil, mapError(err)
	}
	return c, nil
}

// run feeds out from one consumer after another until the subscription is
// cancelled, the transport closes, or resubscribing fails.
//
// A connection lost because amqp091 could not read a frame the broker sent
// (a message whose headers it refuses) is lost again as soon as the broker
// redelivers that message, until the queue's delivery limit (an operator's
// policy, or RabbitMQ 4's default; without one, never) dead-letters it.
// Every message delivered together with it is taken back with it and counts
// a delivery too, and would reach the limit at the same time, so after such
// a loss the subscription comes back as a probe with prefetch 1: it receives
// the head of its queue alone, and once one delivery has come through, the
// probe is cancelled and the subscription runs at its own prefetch again.
// Streams, which have no delivery limit and resume from an offset, are
// left as they are.
func (sub *subscription) run(c *consumer) {
	defer sub.finish()
	for {
		why := sub.pump(c)
		c.release()
		if sub.ctx.Err() != nil {
			return
		}
		probe := false
		if why == whyProbed {
			sub.log.Debug("rabbitmq consumer read past an unreadable message; back to its prefetch")
		} else {
			probe = !sub.opts.Stream && (c.probe || c.s.isLost() && c.s.lostUnreadable(sub.ctx))
			sub.log.Info("rabbitmq consumer interrupted; resubscribing", slog.String("reason", why), slog.Bool("probe", probe))
		}
		args := sub.opts.Args
		if sub.opts.ResumeArgs != nil {
			args = sub.opts.ResumeArgs()
		}
		next, err := sub.subscribe(sub.ctx, args, attempt{resume: true, probe: probe})
		if err != nil {
			if sub.ctx.Err() == nil {
				sub.log.Error("rabbitmq could not resubscribe; subscription ends", slog.Any("error", err))
				sub.mu.Lock()
				sub.err = fmt.Errorf("rabbitmq: resubscribe to queue %q: %w", sub.queue, err)
				sub.mu.Unlock()
			}
			return
		}
		sub.log.Info("rabbitmq consumer resubscribed", slog.Uint64("generation", next.s.gen))
		c = next
	}
}

// finish ends the subscription: out is closed, and Cancel and Close stop
// waiting for it.
func (sub *subscription) finish() {
	close(sub.out)
	sub.t.mu.Lock()
	delete(sub.t.subs, sub)
	sub.t.mu.Unlock()
	close(sub.done)
}

// whyProbed is why pump ends a probe that handed out its delivery.
const whyProbed = "probe delivered"

// pump hands c's deliveries to out until c ends, and says why it ended. When
// the subscription is stopped it cancels the consumer first, and so it does
// a probe once it has handed out one delivery.
func (sub *subscription) pump(c *consumer) string {
	for {
		d, ok := sub.receive(c)
		if !ok && sub.ctx.Err() != nil {
			sub.cancel(c)
			return "cancelled"
		}
		if !ok {
			return c.why()
		}
		td := delivery(c.h, &d)
		if !sub.hand(td) {
			// Never handed out: back to the queue (or, on a stream,
			// where a nack closes the connection, acknowledged: the
			// message stays in the stream either way).
			if sub.opts.Stream {
				_ = td.Settler.Ack()
			} else {
				_ = td.Settler.Nack(true)
			}
			sub.cancel(c)
			return "cancelled"
		}
		if c.probe {
			sub.cancel(c)
			return whyProbed
		}
	}
}

// receive waits for c's next delivery, recording c's notifications
// meanwhile; false when c's deliveries closed or the subscription was
// stopped. Under load a delivery is usually waiting already: single-case
// selects, which take no lock on a channel with nothing for them, take it
// without the select that locks all four channels for every message. The
// look at ctx comes first so that a steady stream of deliveries cannot hold
// up a cancel.
func (sub *subscription) receive(c *consumer) (amqp.Delivery, bool) {
	done := sub.ctx.Done()
	select {
	case <-done:
		return amqp.Delivery{}, false
	default:
	}
	select {
	case d, ok := <-c.deliveries:
		return d, ok
	default:
	}
	for {
		select {
		case <-done:
			return amqp.Delivery{}, false
		case _, ok := <-c.cancels:
			// The delivery channel closes right after; keep reading it.
			if !ok {
				c.cancels = nil
			}
		case e, ok := <-c.closes:
			if !ok {
				c.closes = nil
			} else if c.closeErr == nil {
				c.closeErr = e
			}
		case d, ok := <-c.deliveries:
			return d, ok
		}
	}
}

// hand gives td to a worker; false if the subscription was stopped first.
func (sub *subscription) hand(td *transport.Delivery) bool {
	select {
	case sub.out <- td:
		// A worker was waiting for it: no need for the select below.
		return true
	default:
	}
	select {
	case sub.out <- td:
		return true
	case <-sub.ctx.Done():
		return false
	}
}

// cancel stops the broker delivering to c and requeues what it sent before
// the cancel reached it (acknowledges it, on a stream). The channel stays open for what was handed out.
func (sub *subscription) cancel(c *consumer) {
	if err := c.h.ch.Cancel(sub.opts.Tag, false); err != nil {
		// The channel is gone, and with it everything unsettled on it.
		return
	}
	for d := range c.deliveries {
		settle := func() error { return c.h.ch.Nack(d.DeliveryTag, false, true) }
		if sub.opts.Stream {
			settle = func() error { return c.h.ch.Ack(d.DeliveryTag, false) }
		}
		if err := settle(); err != nil {
			return
		}
	}
}

// release is the end of c as the subscription's consumer: its channel closes
// once every delivery handed out on it is settled, and until then an owned
// goroutine keeps reading its notifications, which amqp091 closes with the
// channel.
func (c *consumer) release() {
	c.h.retire()
	closes, cancels := c.closes, c.cancels
	if closes == nil && cancels == nil {
		return
	}
	c.h.t.goOwned(func() {
		for closes != nil || cancels != nil {
			select {
			case _, ok := <-closes:
				if !ok {
					closes = nil
				}
			case _, ok := <-cancels:
				if !ok {
					cancels = nil
				}
			}
		}
	})
}

// why says why c's delivery channel closed.
func (c *consumer) why() string {
	// amqp091 queues a channel's close reason before it closes the
	// deliveries, so a reason not read yet is already buffered.
	if c.closeErr == nil && c.closes != nil {
		select {
		case e := <-c.closes:
			c.closeErr = e
		default:
		}
	}
	switch {
	case !c.h.ch.IsClosed():
		return "the broker cancelled the consumer"
	case c.s.isLost():
		return "connection lost"
	case c.closeErr != nil:
		return "channel closed: " + (&transport.AMQPError{Code: c.closeErr.Code, Reason: c.closeErr.Reason}).Error()
	default:
		return "channel closed"
	}
}
