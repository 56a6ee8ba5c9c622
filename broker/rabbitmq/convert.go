package rabbitmq

import (
	"fmt"

	amqp "github.com/rabbitmq/amqp091-go"

	"github.com/acemq/acemq-flow/broker/transport"
)

// toPublishing validates m and converts it to what amqp091 sends,
// persistent.
func toPublishing(m transport.Message) (amqp.Publishing, error) {
	if !validExpiration(m.Expiration) {
		return amqp.Publishing{}, fmt.Errorf("%w: %q", transport.ErrInvalidExpiration, m.Expiration)
	}
	if err := m.Headers.Validate(); err != nil {
		return amqp.Publishing{}, fmt.Errorf("header: %w", err)
	}
	return amqp.Publishing{
		Headers:       toTable(m.Headers),
		ContentType:   m.ContentType,
		DeliveryMode:  amqp.Persistent,
		CorrelationId: m.CorrelationID,
		ReplyTo:       m.ReplyTo,
		Expiration:    m.Expiration,
		MessageId:     m.MessageID,
		Timestamp:     m.Timestamp,
		Type:          m.Type,
		Body:          m.Body,
	}, nil
}

// validExpiration accepts what RabbitMQ accepts as a per-message TTL: empty,
// or a non-negative decimal integer that fits its 64-bit parser.
func validExpiration(s string) bool {
	if len(s) > 18 {
		return false
	}
	for _, c := range s {
		if c < '0' || c > '9' {
			return false
		}
	}
	return true
}

// toTable converts a validated transport.Table for amqp091: a Go int becomes
// int64 (amqp091 would write it as a 32-bit integer and truncate it) and
// nested maps become amqp.Table, recursively. A table with none of those
// (a message's usual headers) is handed over as it is, not copied: it is
// the same map type, and amqp091 only reads it while it writes the frame.
func toTable(t transport.Table) amqp.Table {
	if t == nil {
		return nil
	}
	if !needsConversion(t) {
		return amqp.Table(t)
	}
	out := make(amqp.Table, len(t))
	for k, v := range t {
		out[k] = toValue(v)
	}
	return out
}

// needsConversion reports whether t holds a value toValue would change.
func needsConversion(t transport.Table) bool {
	for _, v := range t {
		switch v.(type) {
		case int, transport.Table, map[string]any, []any:
			return true
		}
	}
	return false
}

func toValue(v any) any {
	switch x := v.(type) {
	case int:
		return int64(x)
	case transport.Table:
		return toTable(x)
	case map[string]any:
		return toTable(x)
	case []any:
		out := make([]any, len(x))
		for i, e := range x {
			out[i] = toValue(e)
		}
		return out
	default:
		return v
	}
}

// fromTable converts a table amqp091 read off the wire to a transport.Table,
// nested tables included. A table without nested tables or arrays is taken
// over as it is: amqp091 made it for this one delivery and keeps no
// reference to it.
func fromTable(t amqp.Table) transport.Table {
	if t == nil {
		return nil
	}
	if !holdsContainers(t) {
		return transport.Table(t)
	}
	out := make(transport.Table, len(t))
	for k, v := range t {
		out[k] = fromValue(v)
	}
	return out
}

// holdsContainers reports whether t holds a value fromValue would change.
func holdsContainers(t amqp.Table) bool {
	for _, v := range t {
		switch v.(type) {
		case amqp.Table, []any:
			return true
		}
	}
	return false
}

func fromValue(v any) any {
	switch x := v.(type) {
	case amqp.Table:
		return fromTable(x)
	case []any:
		out := make([]any, len(x))
		for i, e := range x {
			out[i] = fromValue(e)
		}
		return out
	default:
		return v
	}
}

// fromDelivery converts a delivery or basic.get result; the caller sets the
// Settler.
func fromDelivery(d *amqp.Delivery) transport.Delivery {
	return transport.Delivery{
		Message: transport.Message{
			MessageID:     d.MessageId,
			CorrelationID: d.CorrelationId,
			Type:          d.Type,
			ContentType:   d.ContentType,
			ReplyTo:       d.ReplyTo,
			Expiration:    d.Expiration,
			Timestamp:     d.Timestamp,
			Headers:       fromTable(d.Headers),
			Body:          d.Body,
		},
		Exchange:    d.Exchange,
		RoutingKey:  d.RoutingKey,
		Redelivered: d.Redelivered,
		ConsumerTag: d.ConsumerTag,
	}
}
