package broker

import (
	"context"
	"fmt"
	"log/slog"
	"sync"
	"sync/atomic"
	"time"

	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/metric"

	"github.com/acemq/acemq-flow/broker/transport"
)

// controlPrefetch and controlConcurrency size the control consumer: hops
// are publish-and-confirm round trips, so several run at once.
const (
	controlPrefetch    = 64
	controlConcurrency = 8
)

// LadderStats counts what the ladder has done on this connection.
type LadderStats struct {
	// Scheduled is messages put into the ladder (scheduled messages,
	// retries and in-progress put-backs).
	Scheduled int64
	// Delivered is messages that reached their destination.
	Delivered int64
	// Hops is times a message moved between rungs; Hops/Delivered is the
	// average number of hops.
	Hops int64
	// Malformed is messages in the control queue without the schedule
	// headers, dropped: not zero only when something other than a scheduler
	// publishes into the ladder.
	Malformed int64
	// Unstuck is messages the rung watch moved on because the broker kept
	// them in a rung past their due time instead of expiring them.
	Unstuck int64
	// LastLateness is how late past its due time the last message
	// delivered was (zero before the first).
	LastLateness time.Duration
	// Late counts the messages delivered by how late they were: Late[i]
	// those at most LatenessBounds()[i] late (and later than the bound
	// before), the last those later than every bound. LatenessQuantile
	// reads a quantile of the deliveries between two LadderStats.
	Late [LatenessBuckets]int64
}

type ladder struct {
	conn *Conn
	name string
	// latenessAttrs label acemq.schedule.lateness, built once rather than
	// per delivered message.
	latenessAttrs []metric.RecordOption

	mu       sync.Mutex
	declared bool
	control  *Consumer
	// stopWatch stops the rung watch; watched is closed once it returned.
	stopWatch context.CancelFunc
	watched   chan struct{}

	scheduledN, delivered, hops, malformed, unstuck atomic.Int64
	// late counts the deliveries by lateness, for LadderStats.
	late lateness
}

func newLadder(c *Conn, name string) *ladder {
	return &ladder{conn: c, name: name,
		latenessAttrs: []metric.RecordOption{metric.WithAttributeSet(attribute.NewSet(attribute.String("ladder", name)))}}
}

// Ladder is the name of the connection's scheduler ladder.
func (c *Conn) Ladder() string { return c.ladder.name }

// LadderStats reports the ladder counters of this connection.
func (c *Conn) LadderStats() LadderStats {
	l := c.ladder
	s := LadderStats{
		Scheduled: l.scheduledN.Load(), Delivered: l.delivered.Load(),
		Hops: l.hops.Load(), Malformed: l.malformed.Load(), Unstuck: l.unstuck.Load(),
	}
	l.late.read(&s)
	return s
}

// DeclareLadder declares the ladder's exchange and queues without starting
// its control consumer, for a deployment that applies topology up front.
func (c *Conn) DeclareLadder(ctx context.Context) error { return c.ladder.declare(ctx) }

// RunLadder declares the ladder and starts this connection's control
// consumer, which moves due messages on to their destinations. Consume
// starts it for any consumer whose policy retries; a scheduler starts it
// too. Idempotent.
func (c *Conn) RunLadder(ctx context.Context) error { return c.ladder.run(ctx) }

// Schedule publishes out into the ladder, to be delivered to its exchange
// and routing key at due (at once when due has passed): never early, and
// with a running control consumer and no backlog at most about a second
// late. The message is carried as encoded bytes; its content type is put
// back on delivery and nothing of the ladder's headers reaches the handler.
func (c *Conn) Schedule(ctx context.Context, due time.Time, out Outgoing) error {
	if c.closed.Load() {
		return ErrClosed
	}
	return c.ladder.schedule(ctx, due, out.Exchange, out.RoutingKey, out.Message)
}

func (l *ladder) declare(ctx context.Context) error {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.declareLocked(ctx)
}

func (l *ladder) declareLocked(ctx context.Context) error {
	if l.declared {
		return nil
	}
	if err := l.conn.transport.Declare(ctx, LadderTopology(l.name)); err != nil {
		return fmt.Errorf("declare ladder %q: %w", l.name, err)
	}
	l.declared = true
	return nil
}

func (l *ladder) run(ctx context.Context) error {
	l.mu.Lock()
	defer l.mu.Unlock()
	if l.control != nil {
		return nil
	}
	if err := l.declareLocked(ctx); err != nil {
		return err
	}
	k := l.conn.newConsumer(l.name+DueSuffix, consumeConfig{prefetch: controlPrefetch, concurrency: controlConcurrency})
	k.handle = func(d *transport.Delivery) { l.process(k, d) }
	if err := k.subscribe(ctx); err != nil {
		return fmt.Errorf("start ladder control consumer: %w", err)
	}
	l.control = k
	if l.conn.cfg.Clock != nil {
		// The watch compares the clock's time with the ticks of the
		// system's, and guards against a broker that keeps messages past
		// their TTL: the loopback, the only transport such a clock runs
		// on, never does.
		return nil
	}
	wctx, stopWatch := context.WithCancel(context.Background())
	l.stopWatch, l.watched = stopWatch, make(chan struct{})
	go func() {
		defer close(l.watched)
		l.watch(wctx)
	}()
	return nil
}

// stop cancels the control consumer; Conn.Close calls it after the
// ordinary consumers, whose last retries it may still be carrying.
func (l *ladder) stop(ctx context.Context) error {
	l.mu.Lock()
	k, stopWatch, watched := l.control, l.stopWatch, l.watched
	l.mu.Unlock()
	if k == nil {
		return nil
	}
	if stopWatch != nil {
		stopWatch()
		select {
		case <-watched:
		case <-ctx.Done():
		}
	}
	return k.Cancel(ctx)
}

// schedule puts msg into the rung for due, addressed to exchange and key.
func (l *ladder) schedule(ctx context.Context, due time.Time, exchange, key string, msg transport.Message) error {
	if err := l.declare(ctx); err != nil {
		return err
	}
	if err := l.conn.send(ctx, l.scheduled(due, exchange, key, msg)); err != nil {
		return err
	}
	l.scheduledN.Add(1)
	return nil
}

// scheduled is msg addressed to the rung for due, carrying the schedule
// headers that take it to exchange and key.
func (l *ladder) scheduled(due time.Time, exchange, key string, msg transport.Message) Outgoing {
	h := msg.Headers.Clone()
	if h == nil {
		h = Table{}
	}
	h[HeaderScheduleExchange] = exchange
	h[HeaderScheduleRoutingKey] = key
	h[HeaderScheduleDueAt] = DueMillis(due)
	h[HeaderScheduleContentType] = msg.ContentType
	msg.Headers = h
	return Outgoing{Exchange: l.name, RoutingKey: l.name + RungFor(due.Sub(l.conn.now())), Mandatory: true, Message: msg}
}

// Scheduled returns out as Schedule would put it into the ladder: to the
// ladder's exchange, addressed to the rung for due, with the schedule
// headers. It is for a message that is sent later by something else (an
// outbox relay): the rung is chosen for the time left now, so the message
// is as late as it is sent late, never early. The ladder must exist when
// it is sent (DeclareLadder, or any connection that ran it).
func (c *Conn) Scheduled(due time.Time, out Outgoing) Outgoing {
	return c.ladder.scheduled(due, out.Exchange, out.RoutingKey, out.Message)
}

func (l *ladder) hop(ctx context.Context, rung string, msg transport.Message) error {
	return l.conn.send(ctx, Outgoing{Exchange: l.name, RoutingKey: l.name + rung, Mandatory: true, Message: msg})
}

// process is the control consumer: deliver what is due, hop the rest down
// the ladder. Every publish is mandatory and confirmed before the ack.
func (l *ladder) process(k *Consumer, d *transport.Delivery) { l.move(k.handlerCtx, d) }

// move delivers d if it is due or hops it down the ladder, then
// acknowledges it.
func (l *ladder) move(parent context.Context, d *transport.Delivery) {
	// Built only when a line is written: With allocates, and a move that
	// goes well writes none.
	log := func() *slog.Logger {
		return l.conn.log.With(slog.String("ladder", l.name), slog.String("message_id", d.MessageID))
	}
	exchange, okE := d.Headers[HeaderScheduleExchange].(string)
	key, okK := d.Headers[HeaderScheduleRoutingKey].(string)
	dueMs, okD := transport.Int(d.Headers[HeaderScheduleDueAt])
	if !okE || !okK || !okD {
		l.malformed.Add(1)
		log().Warn("dropping a message without schedule headers from the control queue")
		if err := d.Ack(); err != nil {
			log().Debug("ack malformed", slog.Any("error", err))
		}
		return
	}
	contentType, _ := d.Headers[HeaderScheduleContentType].(string)
	ctx, cancel := context.WithTimeout(parent, moveTimeout)
	defer cancel()
	remaining := time.UnixMilli(dueMs).Sub(l.conn.now())
	var err error
	if remaining <= 0 {
		out := movable(d)
		for _, h := range []string{HeaderScheduleExchange, HeaderScheduleRoutingKey, HeaderScheduleDueAt, HeaderScheduleContentType} {
			delete(out.Headers, h)
		}
		out.ContentType = contentType
		err = l.conn.send(ctx, Outgoing{Exchange: exchange, RoutingKey: key, Mandatory: true, Message: out})
		if err == nil {
			l.delivered.Add(1)
			l.late.add(-remaining)
			l.conn.tel.lateness.Record(ctx, -remaining.Seconds(), l.latenessAttrs...)
		} else if Refused(err) {
			// The target refused it (nothing bound yet, a full queue, a
			// missing exchange): try again a second later rather than
			// spinning through the control queue, and keep the rung-refusal
			// handling below for the ladder's own queues.
			log().Debug("scheduled target refused the message; retrying in 1s", slog.String("exchange", exchange),
				slog.String("key", key), slog.Any("error", err))
			err = l.hop(ctx, rungs[len(rungs)-1].Suffix, movable(d))
			if err == nil {
				l.hops.Add(1)
			}
		}
	} else {
		err = l.hop(ctx, RungFor(remaining), movable(d))
		if err == nil {
			l.hops.Add(1)
		}
	}
	switch {
	case err == nil:
		if err := d.Ack(); err != nil {
			log().Debug("ladder ack failed; the message will be redelivered", slog.Any("error", err))
		}
	case Refused(err):
		// A rung refused it (deleted, or full): declare the ladder again
		// and hand the message back to the control queue.
		log().Warn("ladder rung refused a message; redeclaring and requeueing", slog.Any("error", err))
		l.mu.Lock()
		l.declared = false
		derr := l.declareLocked(ctx)
		l.mu.Unlock()
		if derr != nil {
			log().Warn("redeclare ladder", slog.Any("error", derr))
		}
		if err := d.Nack(true); err != nil {
			log().Debug("ladder requeue failed", slog.Any("error", err))
		}
	default:
		log().Warn("ladder move did not complete; the message will be redelivered", slog.Any("error", err))
	}
}
