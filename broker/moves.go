package broker

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"time"

	"github.com/acemq/acemq-flow/broker/transport"
)

// moveTimeout bounds one move of a message (publish and confirm). A move
// that does not finish leaves the delivery unsettled: the broker redelivers
// it, which costs a duplicate rather than a message.
const moveTimeout = 30 * time.Second

// movable is a copy of d's message to publish elsewhere: same identity,
// properties and body, headers cloned, and the broker's own dead-lettering
// headers dropped (RabbitMQ silently drops a message whose x-death shows it
// cycling through queues with no rejection in the loop). A consumer's
// delivery carries x-acemq-first-seen even when its publisher wrote none
// (decodeEnvelope wrote the value worked out for it), so every move of it
// writes that value.
func movable(d *transport.Delivery) transport.Message {
	m := d.Message
	m.Headers = d.Headers.Clone()
	if m.Headers == nil {
		m.Headers = Table{}
	}
	StripBrokerHeaders(m.Headers)
	return m
}

// Refused reports a publish the broker answered and said no to (returned,
// nacked, refused by a channel exception) or that could never be sent (an
// invalid header or expiration, a message too large for AMQP), as opposed to
// one whose fate is unknown (connection lost, deadline): the first can be
// dealt with now, the second only by trying again or by redelivery.
func Refused(err error) bool {
	if errors.Is(err, transport.ErrUnroutable) || errors.Is(err, transport.ErrNacked) ||
		errors.Is(err, transport.ErrInvalidHeader) || errors.Is(err, transport.ErrInvalidExpiration) ||
		errors.Is(err, transport.ErrTooLarge) {
		return true
	}
	var ae *transport.AMQPError
	return errors.As(err, &ae)
}

func (k *Consumer) moveContext() (context.Context, context.CancelFunc) {
	return context.WithTimeout(k.handlerCtx, moveTimeout)
}

// setAside publishes a copy of d to queue+suffix with the reason, then acks
// d. If the broker refuses the copy, d is rejected without requeue, which
// the queue's own dead-letter arguments route to queue.dlq.
func (k *Consumer) setAside(d *transport.Delivery, suffix, reason, outcome string) string {
	msg := movable(d)
	msg.Headers[HeaderError] = reason
	msg.Headers[HeaderQueue] = k.queue
	ctx, cancel := k.moveContext()
	defer cancel()
	err := k.conn.send(ctx, Outgoing{RoutingKey: k.queue + suffix, Mandatory: true, Message: msg})
	// Built only when a line is written: With allocates, and a move that
	// goes well writes at most one line, at a level often disabled.
	log := func() *slog.Logger {
		return k.log.With(slog.String("queue", k.queue), slog.String("message_id", d.MessageID), runID(d), slog.String("reason", reason))
	}
	switch {
	case err == nil:
		if err := d.Ack(); err != nil {
			log().Warn("set aside, but the ack failed: the message will be redelivered as well", slog.Any("error", err))
		}
		if level := k.cfg.setAsideLogLevel(); k.log.Enabled(ctx, level) {
			log().Log(ctx, level, "message set aside", slog.String("to", k.queue+suffix))
		}
		return outcome
	case Refused(err) && k.cfg.stream:
		// Never nack a stream: the position moves on, and this log line and
		// the "skipped" outcome are the only record of the gap.
		log().Error("stream message could not be set aside; skipping it", slog.Any("offset", d.Headers[HeaderStreamOffset]), slog.Any("error", err))
		if err := d.Ack(); err != nil {
			return OutcomeLabelUnsettled
		}
		return OutcomeLabelSkipped
	case Refused(err):
		log().Warn("set-aside refused; rejecting to the queue's dead-letter exchange", slog.Any("error", err))
		if err := d.Nack(false); err != nil {
			log().Warn("reject failed: the message will be redelivered", slog.Any("error", err))
			return OutcomeLabelUnsettled
		}
		return outcome
	default:
		log().Warn("set-aside did not complete: the message will be redelivered", slog.Any("error", err))
		return OutcomeLabelUnsettled
	}
}

// runID is d's x-acemq-run-id as a log attribute (run_id), "" when it
// has none or one that cannot be read.
func runID(d *transport.Delivery) slog.Attr {
	id, _ := stringHeader(d.Headers, HeaderRunID)
	return slog.String("run_id", id)
}

func (k *Consumer) giveUp(d *transport.Delivery, reason string) string {
	return k.setAside(d, DeadLetterSuffix, reason, OutcomeLabelDeadLettered)
}

func (k *Consumer) park(d *transport.Delivery, reason string) string {
	return k.setAside(d, ParkedSuffix, reason, OutcomeLabelParked)
}

// retry republishes d through the ladder back to its queue with the attempt
// increased, then acks it.
func (k *Consumer) retry(d *transport.Delivery, m *Message, cause error) string {
	msg := movable(d)
	msg.Headers[HeaderAttempt] = int64(m.Attempt + 1)
	delete(msg.Headers, HeaderError)
	delay := k.cfg.retry.Delay(m.Attempt)
	ctx, cancel := k.moveContext()
	defer cancel()
	err := k.conn.ladder.schedule(ctx, k.conn.now().Add(delay), "", k.queue, msg)
	log := func() *slog.Logger {
		return k.log.With(slog.String("queue", k.queue), slog.String("message_id", m.ID), slog.String("run_id", m.RunID), slog.Int("attempt", m.Attempt))
	}
	switch {
	case err == nil:
		if err := d.Ack(); err != nil {
			log().Warn("retry scheduled, but the ack failed: the message will be redelivered as well", slog.Any("error", err))
		}
		if k.log.Enabled(ctx, slog.LevelDebug) {
			log().Debug("retry scheduled", slog.Duration("delay", delay), slog.Any("cause", cause))
		}
		return OutcomeLabelRetried
	case Refused(err):
		return k.giveUp(d, fmt.Sprintf("%v (the retry could not be scheduled: %v)", cause, err))
	default:
		log().Warn("retry did not complete: the message will be redelivered", slog.Any("error", err))
		return OutcomeLabelUnsettled
	}
}

// putBack returns d to its queue through the ladder after delay with its
// attempt unchanged; if the ladder refuses it the broker requeues it instead.
func (k *Consumer) putBack(d *transport.Delivery, delay time.Duration) string {
	if delay <= 0 {
		delay = k.cfg.inProgressDelay
	}
	ctx, cancel := k.moveContext()
	defer cancel()
	log := func() *slog.Logger {
		return k.log.With(slog.String("queue", k.queue), slog.String("message_id", d.MessageID), runID(d))
	}
	err := k.conn.ladder.run(ctx)
	if err == nil {
		err = k.conn.ladder.schedule(ctx, k.conn.now().Add(delay), "", k.queue, movable(d))
	}
	switch {
	case err == nil:
		if err := d.Ack(); err != nil {
			log().Warn("put back, but the ack failed: the message will be redelivered as well", slog.Any("error", err))
		}
		return OutcomeLabelInProgress
	case Refused(err):
		log().Warn("put-back refused; requeueing to the broker", slog.Any("error", err))
		if err := d.Nack(true); err != nil {
			return OutcomeLabelUnsettled
		}
		return OutcomeLabelInProgress
	default:
		log().Warn("put-back did not complete: the message will be redelivered", slog.Any("error", err))
		return OutcomeLabelUnsettled
	}
}

// send publishes without the closed check of Send: moves made while the
// connection is closing must still complete.
func (c *Conn) send(ctx context.Context, out Outgoing) error {
	ps := c.tel.startPublish(ctx, &out)
	err := c.transport.Publish(ps.ctx, transport.Publishing{
		Exchange: out.Exchange, RoutingKey: out.RoutingKey, Mandatory: out.Mandatory, Message: out.Message,
	})
	ps.end(err)
	if err != nil {
		return fmt.Errorf("publish to %s: %w", destination(out.Exchange, out.RoutingKey), err)
	}
	return nil
}
