package rabbitmq

import (
	"context"
	"errors"
	"fmt"

	amqp "github.com/rabbitmq/amqp091-go"

	"github.com/acemq/acemq-flow/broker/transport"
)

// errResend says a publish never left the client because its channel was
// already closed: it is safe to send again on another channel.
var errResend = errors.New("rabbitmq: publish channel closed before sending")

// Publish sends p persistent and returns once the broker confirmed it (see
// the package doc for what each failure looks like). It refuses, before
// sending anything, an Expiration that is not a non-negative decimal integer
// (transport.ErrInvalidExpiration), header values that are not AMQP field
// values (transport.ErrInvalidHeader), and anything transport.CheckPublishing
// refuses for the connection's negotiated frame_max
// (transport.ErrTooLarge): RabbitMQ would close the channel on the first
// while the publish itself reports success, and the connection on the last.
// ctx bounds every wait:
// for a connection, for the broker to unblock it, for a free in-flight slot
// and for the confirm.
func (t *Transport) Publish(ctx context.Context, p transport.Publishing) error {
	msg, err := toPublishing(p.Message)
	if err != nil {
		return fmt.Errorf("rabbitmq: publish to %s: %w", destination(p), err)
	}
	for {
		s, err := t.session(ctx)
		if err != nil {
			return err
		}
		if err := transport.CheckPublishing(p, s.frameMax); err != nil {
			// Sent, it would take the whole connection down.
			return fmt.Errorf("rabbitmq: publish to %s: %w", destination(p), err)
		}
		if err := s.blocked.wait(ctx, s.lost); err != nil {
			return fmt.Errorf("rabbitmq: publish to %s: waiting for the broker to unblock the connection: %w", destination(p), err)
		}
		pc, err := s.publisher()
		if err != nil {
			if s.isLost() {
				continue
			}
			return fmt.Errorf("rabbitmq: publish to %s: %w", destination(p), err)
		}
		err = pc.publish(ctx, p, msg)
		switch {
		case err == nil:
			return nil
		case errors.Is(err, errResend):
			continue
		}
		// Declared here, not above: errors.As moves it to the heap, which
		// a confirmed publish need not pay for.
		var returned *transport.ReturnedError
		if errors.As(err, &returned) {
			// It already names the exchange and routing key.
			return err
		}
		return fmt.Errorf("rabbitmq: publish to %s: %w", destination(p), err)
	}
}

// publish sends one message on pc and waits for its confirm.
func (pc *pubChannel) publish(ctx context.Context, p transport.Publishing, msg amqp.Publishing) error {
	// Single-case selects first: a select over several channels locks
	// them all, per message, and a slot is usually free.
	select {
	case pc.slots <- struct{}{}:
	default:
		select {
		case pc.slots <- struct{}{}:
		case <-pc.dead:
			return errResend
		case <-ctx.Done():
			return fmt.Errorf("waiting for an in-flight slot: %w", ctx.Err())
		}
	}
	if err := pc.flow.wait(ctx, pc.dead); err != nil {
		<-pc.slots
		return fmt.Errorf("waiting for the broker to resume the channel: %w", err)
	}
	dc, err := pc.ch.PublishWithDeferredConfirmWithContext(ctx, p.Exchange, p.RoutingKey, p.Mandatory, false, msg)
	if err != nil {
		<-pc.slots
		if errors.Is(err, amqp.ErrClosed) {
			// amqp091 checks the channel before writing the first frame.
			return errResend
		}
		if ctx.Err() != nil {
			return ctx.Err()
		}
		return fmt.Errorf("%w: %w", transport.ErrConnectionLost, err)
	}
	var key *returnKey
	if p.Mandatory {
		key = &returnKey{messageID: msg.MessageId, exchange: p.Exchange, routingKey: p.RoutingKey}
	}
	if done := ctx.Done(); done == nil {
		// A context that never ends (context.Background): nothing to
		// select between.
		<-dc.Done()
	} else {
		select {
		case <-dc.Done():
		case <-done:
			pc.abandon(abandoned{dc: dc, key: key})
			return fmt.Errorf("waiting for the confirm: %w", ctx.Err())
		}
	}
	defer func() { <-pc.slots }()
	acked := dc.Acked()
	var ret *amqp.Return
	if key != nil {
		// Claimed even after a nack, so that no return is left behind to be
		// mistaken for another publish's.
		ret = pc.claimReturn(*key)
	}
	switch {
	case acked && ret != nil:
		return &transport.ReturnedError{
			Exchange: p.Exchange, RoutingKey: p.RoutingKey,
			ReplyCode: int(ret.ReplyCode), ReplyText: ret.ReplyText,
		}
	case acked:
		return nil
	case !pc.ch.IsClosed():
		return transport.ErrNacked
	}
	// amqp091 resolves the confirms of a closing channel as nacks; the loop
	// records why it closed.
	<-pc.dead
	return pc.lostError()
}

// lostError says why a publish on a closed channel was never confirmed. A
// channel exception (such as 404 for a missing exchange) is an
// *transport.AMQPError as well as transport.ErrConnectionLost: the broker may
// have taken other messages in flight on the channel before it closed.
func (pc *pubChannel) lostError() error {
	e := pc.closeErr
	if e != nil && e.Server && e.Recover {
		return fmt.Errorf("%w: channel closed by the broker: %w", transport.ErrConnectionLost, &transport.AMQPError{Code: e.Code, Reason: e.Reason})
	}
	if e != nil {
		return fmt.Errorf("%w: %s", transport.ErrConnectionLost, e.Reason)
	}
	return transport.ErrConnectionLost
}

// destination names where a publish goes, for errors.
func destination(p transport.Publishing) string {
	if p.Exchange == "" {
		return fmt.Sprintf("the default exchange with routing key %q", p.RoutingKey)
	}
	return fmt.Sprintf("exchange %q with routing key %q", p.Exchange, p.RoutingKey)
}
