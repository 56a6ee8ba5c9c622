package rabbitmq

import (
	"context"
	"fmt"

	amqp "github.com/rabbitmq/amqp091-go"

	"github.com/acemq/acemq-flow/broker/transport"
)

// Get fetches one message from queue with basic.get and manual
// acknowledgement, or returns nil and no error when the queue is empty. All
// gets of a connection share one long-lived channel, so that a caller can
// hold many fetched messages unsettled (a replay pass) and settle them
// later. A queue that does not exist is an *transport.AMQPError with code
// transport.NotFound; that exception closes the shared channel, which makes
// every message fetched on it and still unsettled stale (the broker
// redelivers them).
func (t *Transport) Get(ctx context.Context, queue string) (*transport.Delivery, error) {
	for {
		s, err := t.session(ctx)
		if err != nil {
			return nil, err
		}
		d, err := s.basicGet(queue)
		if err != nil && s.isLost() && retryable(err) {
			// A message fetched on a lost connection goes back to the queue.
			continue
		}
		if err != nil {
			return nil, fmt.Errorf("rabbitmq: get from queue %q: %w", queue, mapError(err))
		}
		return d, nil
	}
}

// basicGet runs basic.get on the session's get channel, opening a new one if
// an exception closed the last.
func (s *session) basicGet(queue string) (*transport.Delivery, error) {
	s.getMu.Lock()
	defer s.getMu.Unlock()
	if s.get == nil || s.get.ch.IsClosed() {
		ch, err := s.channel()
		if err != nil {
			return nil, err
		}
		s.get = &heldChannel{t: s.t, ch: ch}
	}
	// Concurrent calls on one amqp091 channel could take each other's
	// replies, hence getMu around the round trip.
	msg, ok, err := s.get.ch.Get(queue, false)
	if err != nil || !ok {
		return nil, err
	}
	return delivery(s.get, &msg), nil
}

// heldDelivery is a delivery and its settler, allocated together: one
// allocation per message rather than two.
type heldDelivery struct {
	transport.Delivery
	settler settler
}

// delivery converts msg and attaches a settler for it on h.
func delivery(h *heldChannel, msg *amqp.Delivery) *transport.Delivery {
	d := &heldDelivery{Delivery: fromDelivery(msg)}
	h.received(msg.DeliveryTag)
	d.settler.h, d.settler.tag = h, msg.DeliveryTag
	d.Settler = &d.settler
	return &d.Delivery
}
