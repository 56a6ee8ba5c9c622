package broker

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"sync"
	"sync/atomic"
	"time"

	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/codes"
	"go.opentelemetry.io/otel/trace"

	"github.com/acemq/acemq-flow/broker/transport"
)

// Consumer is a running subscription with its handlers. Cancel it, or close
// its Conn, to stop it.
type Consumer struct {
	conn    *Conn
	queue   string
	cfg     consumeConfig
	handler Handler
	// handle processes one delivery and settles it exactly once.
	handle func(d *transport.Delivery)
	// log receives the consumer's lines: LogTo's logger, or the
	// connection's.
	log *slog.Logger

	// metrics are the consumer's span name and metric options.
	metrics *consumerMetrics

	sub        transport.Subscription
	handlerCtx context.Context
	abort      context.CancelFunc
	stopping   atomic.Bool
	done       chan struct{}
	// inFlight counts the deliveries this consumer holds (InFlight).
	inFlight atomic.Int64
	// settling counts the deliveries waiting in BeforeSettle's function
	// off their handler's slot.
	settling sync.WaitGroup

	cancelOnce sync.Once
	cancelErr  error
}

// Consume declares queue (a quorum queue dead-lettering to queue.dlq, with
// queue.dlq and queue.parked beside it, unless Existing is given) and starts
// handling its messages with h. ctx bounds the setup only; the consumer
// runs until Cancel or Close.
//
// Whatever h decides is settled exactly once: Accept acknowledges; Retry
// republishes through the ladder with the attempt increased, or gives up
// when the policy is spent; Reject gives up into queue.dlq with the reason;
// InProgress puts the message back with its attempt unchanged. A body the
// consumer cannot decode, or an unknown content type, is parked in
// queue.parked. Every move is confirmed by the broker before the delivery is
// acknowledged.
func (c *Conn) Consume(ctx context.Context, queue string, h Handler, opts ...ConsumeOption) (*Consumer, error) {
	if queue == "" {
		return nil, invalid("consume: empty queue name")
	}
	if h == nil {
		return nil, invalid("consume %q: nil handler", queue)
	}
	cfg := consumeConfig{
		prefetch:        c.cfg.Prefetch,
		concurrency:     1,
		retry:           *c.cfg.Retry,
		codecs:          c.codecs,
		declare:         true,
		inProgressDelay: c.cfg.InProgressDelay,
	}
	for _, o := range opts {
		if err := o.applyConsume(&cfg); err != nil {
			return nil, fmt.Errorf("consume %q: %w", queue, err)
		}
	}
	if cfg.stream && !cfg.retrySet {
		cfg.retry = NoRetry()
	}
	if c.closed.Load() {
		return nil, fmt.Errorf("consume %q: %w", queue, ErrClosed)
	}
	if cfg.declare {
		if err := c.Declare(ctx, ConsumerTopology(queue)); err != nil {
			return nil, fmt.Errorf("consume %q: %w", queue, err)
		}
	}
	if cfg.retry.Retries() {
		if err := c.ladder.run(ctx); err != nil {
			return nil, fmt.Errorf("consume %q: %w", queue, err)
		}
	}
	for i := len(cfg.middleware) - 1; i >= 0; i-- {
		h = cfg.middleware[i](h)
	}
	k := c.newConsumer(queue, cfg)
	k.handler = h
	k.handle = k.process
	if err := k.subscribe(ctx); err != nil {
		return nil, err
	}
	return k, nil
}

func (c *Conn) newConsumer(queue string, cfg consumeConfig) *Consumer {
	hctx, abort := context.WithCancel(context.Background())
	log := cfg.logger
	if log == nil {
		log = c.log
	}
	return &Consumer{conn: c, queue: queue, cfg: cfg, log: log, metrics: c.tel.consumerMetrics(queue), handlerCtx: hctx, abort: abort,
		done: make(chan struct{})}
}

func (k *Consumer) subscribe(ctx context.Context) error {
	sub, err := k.conn.transport.Consume(ctx, k.queue, transport.ConsumeOptions{
		Tag:        k.cfg.tag,
		Prefetch:   k.cfg.prefetch,
		Exclusive:  k.cfg.exclusive,
		Args:       k.cfg.args,
		ResumeArgs: k.cfg.resumeArgs,
		Stream:     k.cfg.stream,
	})
	if err != nil {
		k.abort()
		return fmt.Errorf("consume %q: %w", k.queue, err)
	}
	k.sub = sub
	var workers sync.WaitGroup
	if k.cfg.orderBy != nil {
		k.startOrdered(&workers)
	} else {
		for range k.cfg.concurrency {
			workers.Go(k.work)
		}
	}
	go func() {
		workers.Wait()
		k.settling.Wait()
		if err := sub.Err(); err != nil {
			k.log.Error("consumer ended: nothing consumes its queue on this connection any more",
				slog.String("queue", k.queue), slog.Any("error", err))
			k.conn.tel.endedOnItsOwn(k, err)
		}
		k.abort()
		k.conn.untrack(k)
		close(k.done)
	}()
	if err := k.conn.track(k); err != nil {
		_ = k.Cancel(ctx)
		return fmt.Errorf("consume %q: %w", k.queue, err)
	}
	return nil
}

func (k *Consumer) work() {
	for d := range k.sub.Deliveries() {
		k.hold(1)
		if !k.requeueIfStopping(d) {
			k.handle(d)
		}
		k.hold(-1)
	}
}

// hold counts n more (or, negative, fewer) deliveries held by the consumer
// and by its connection.
func (k *Consumer) hold(n int64) {
	k.conn.inFlight.Add(n)
	k.inFlight.Add(n)
}

// InFlight is how many deliveries the consumer holds now: taken off the
// transport and not yet done with (its handler running, or its
// settlement), as Conn.InFlight counts them for the whole connection.
func (k *Consumer) InFlight() int { return int(k.inFlight.Load()) }

// requeueIfStopping hands back a delivery that arrived after Cancel began,
// rather than starting a handler the deadline may not let finish. A stream
// delivery is left unsettled instead: nothing can be put back on a stream,
// and the reader's position does not move.
func (k *Consumer) requeueIfStopping(d *transport.Delivery) bool {
	if !k.stopping.Load() {
		return false
	}
	if !k.cfg.stream {
		if err := d.Nack(true); err != nil {
			k.log.Debug("requeue on cancel", slog.String("queue", k.queue), slog.Any("error", err))
		}
	}
	return true
}

// Queue is the queue the consumer reads.
func (k *Consumer) Queue() string { return k.queue }

// Done is closed once the consumer has stopped, by Cancel, by Close of its
// connection or on its own (Err then says why), and every handler returned.
func (k *Consumer) Done() <-chan struct{} { return k.done }

// Err says why the consumer ended on its own: the broker would not let it
// resubscribe after it lost its consumer (its queue was deleted, or
// refuses it). A lost connection is not such an end: the consumer
// resubscribes once the connection is back. Err is nil while the consumer
// runs and when Cancel or Close stopped it, and set before Done is closed;
// the connection's Health and the acemq.consumer.ended metric report the
// same.
func (k *Consumer) Err() error { return k.sub.Err() }

// Cancel stops taking deliveries, lets in-flight handlers finish and
// settles them, bounded by ctx (or the connection's CloseTimeout when ctx has
// no deadline). Deliveries not yet handled go back to the queue. At the
// deadline the handlers' contexts are cancelled and Cancel returns an error;
// their deliveries are never acknowledged unhandled. Idempotent.
func (k *Consumer) Cancel(ctx context.Context) error {
	k.cancelOnce.Do(func() {
		ctx, cancel := k.conn.bounded(ctx)
		defer cancel()
		err := k.sub.Cancel(ctx)
		k.stopping.Store(true)
		select {
		case <-k.done:
		case <-ctx.Done():
			k.abort()
			err = errors.Join(err, fmt.Errorf("cancel consumer of %q: handlers still running at the deadline: %w", k.queue, ctx.Err()))
		}
		k.cancelErr = err
	})
	return k.cancelErr
}

// process handles one delivery of an ordinary consumer.
func (k *Consumer) process(d *transport.Delivery) {
	start := k.conn.now()
	m, err := k.message(d, start)
	k.processMessage(d, m, err, start, false)
}

// processMessage handles a delivery already turned into a message (or that
// could not be: err says why, and it is parked). With inline, a
// BeforeSettle function runs on the calling goroutine, which then returns
// only once the delivery is settled.
func (k *Consumer) processMessage(d *transport.Delivery, m *Message, err error, start time.Time, inline bool) {
	s := Settlement{Queue: k.queue, Message: m, MessageID: d.MessageID, Started: start}
	if err != nil {
		s.RunID, _ = stringHeader(d.Headers, HeaderRunID)
		s.Err, s.Reason = err, err.Error()
		s.Outcome = k.park(d, s.Reason)
		k.settled(k.handlerCtx, &s, s.Outcome)
		return
	}
	s.RunID = m.RunID
	if reason := k.cfg.retry.spent(m.Attempt, m.FirstSeen, start); reason != "" {
		s.Err, s.Reason = errors.New(reason), reason
		s.Outcome = k.giveUp(d, reason)
		k.settled(k.handlerCtx, &s, s.Outcome)
		return
	}
	ctx, span := k.conn.tel.startProcess(k.handlerCtx, k.metrics, m, d.Headers)
	ctx = WithHandling(ctx, m)
	ack := safely(ctx, k.handler, m)
	if k.cfg.beforeSettle != nil {
		if !inline {
			// Copies, so that s and ack themselves stay on the stack when
			// there is no BeforeSettle.
			later, handled := s, ack
			k.settling.Add(1)
			k.hold(1)
			go func() {
				defer k.settling.Done()
				defer k.hold(-1)
				k.finish(ctx, span, d, m, k.beforeSettle(ctx, m, handled), &later)
			}()
			return
		}
		ack = k.beforeSettle(ctx, m, ack)
	}
	k.finish(ctx, span, d, m, ack, &s)
}

// beforeSettle runs the BeforeSettle function on a handled delivery, a
// panic retrying it as a handler's does.
func (k *Consumer) beforeSettle(ctx context.Context, m *Message, ack Ack) Ack {
	return safely(ctx, func(ctx context.Context, m *Message) Ack { return k.cfg.beforeSettle(ctx, m, ack) }, m)
}

// finish settles a handled delivery as ack says, ends its span and reports
// it.
func (k *Consumer) finish(ctx context.Context, span trace.Span, d *transport.Delivery, m *Message, ack Ack, s *Settlement) {
	s.HandlerRan, s.Err, s.Label, s.Note = true, ack.err, ack.label, ack.note
	k.settle(d, m, ack, s)
	label := s.Outcome
	if s.Label != "" && s.Outcome != OutcomeLabelUnsettled && s.Outcome != OutcomeLabelSkipped {
		label = s.Label
	}
	// Only a recording span keeps attributes: built for one that does not,
	// they are allocations per delivery for nothing.
	if span.IsRecording() {
		span.SetAttributes(attribute.String("acemq.outcome", label))
		if ack.err != nil {
			span.RecordError(ack.err)
			span.SetStatus(codes.Error, ack.err.Error())
			span.SetAttributes(attribute.String("error.type", fmt.Sprintf("%T", ack.err)))
		}
	}
	span.End()
	k.settled(ctx, s, label)
}

// settled reports a settled delivery on the metrics, under label, and to
// the consumer's settle hook.
func (k *Consumer) settled(ctx context.Context, s *Settlement, label string) {
	s.Duration = k.conn.now().Sub(s.Started)
	k.conn.tel.settled(ctx, k.metrics, label, s.Duration)
	if k.cfg.onSettle != nil {
		k.cfg.onSettle(ctx, *s)
	}
}

// message turns a delivery into what a handler sees, or says why it cannot.
func (k *Consumer) message(d *transport.Delivery, now time.Time) (*Message, error) {
	env, app, err := decodeEnvelope(&d.Message, now)
	if err != nil {
		return nil, err
	}
	codec, ok := k.cfg.codecs[d.ContentType]
	if !ok {
		return nil, &DecodeError{ContentType: d.ContentType, Err: errors.New("unknown content type")}
	}
	if ch, ok := codec.(Checker); ok {
		if err := ch.Check(d.Body); err != nil {
			return nil, err
		}
	}
	return &Message{
		Envelope:    env,
		Headers:     app,
		Body:        d.Body,
		Queue:       k.queue,
		Exchange:    d.Exchange,
		RoutingKey:  d.RoutingKey,
		Redelivered: d.Redelivered,
		codec:       codec,
		delivery:    d,
	}, nil
}

// settle carries out the handler's decision and writes what became of the
// delivery into s.
func (k *Consumer) settle(d *transport.Delivery, m *Message, ack Ack, s *Settlement) {
	switch ack.outcome {
	case OutcomeAccept:
		s.Outcome = OutcomeLabelAccepted
		if err := d.Ack(); err != nil {
			k.log.Warn("ack failed; the message will be redelivered", slog.String("queue", k.queue),
				slog.String("message_id", m.ID), slog.String("run_id", m.RunID), slog.Any("error", err))
			s.Outcome = OutcomeLabelUnsettled
		}
	case OutcomeRetry, OutcomeReject:
		// Declared here, not for every outcome: errors.As moves it to the
		// heap, which an accepted delivery need not pay for.
		var decodeErr *DecodeError
		switch {
		case errors.As(ack.err, &decodeErr):
			s.Reason = ack.err.Error()
			s.Outcome = k.park(d, s.Reason)
		case ack.outcome == OutcomeReject:
			s.Reason = ack.err.Error()
			s.Outcome = k.giveUp(d, s.Reason)
		default:
			if reason := k.cfg.retry.giveUp(m.Attempt, m.FirstSeen, k.conn.now()); reason != "" {
				s.Reason = fmt.Sprintf("%v (%s)", ack.err, reason)
				s.Outcome = k.giveUp(d, s.Reason)
				return
			}
			s.Outcome = k.retry(d, m, ack.err)
			if s.Outcome == OutcomeLabelRetried {
				s.Delay, s.NextAttempt = k.cfg.retry.Delay(m.Attempt), m.Attempt+1
			}
		}
	case OutcomeInProgress:
		if k.cfg.stream {
			// Putting it back would append a second copy to the log.
			s.Reason = "in progress elsewhere; a stream message cannot be put back"
			s.Outcome = k.giveUp(d, s.Reason)
			return
		}
		s.Outcome = k.putBack(d, ack.delay)
		s.Delay, s.NextAttempt = ack.delay, m.Attempt
		if s.Delay <= 0 {
			s.Delay = k.cfg.inProgressDelay
		}
	default:
		s.Reason = fmt.Sprintf("unknown handler outcome %d", ack.outcome)
		s.Outcome = k.giveUp(d, s.Reason)
	}
}
