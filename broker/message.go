package broker

import (
	"context"

	"github.com/acemq/acemq-flow/broker/transport"
)

// Message is a delivery as a handler sees it: the envelope's typed fields,
// the application headers (nothing in the x-acemq- namespace) and the body,
// still encoded.
type Message struct {
	Envelope
	// Headers are the application headers only.
	Headers Table
	// Body is the payload as it arrived; Decode reads it with the codec the
	// consumer chose for its content type.
	Body []byte
	// Queue is the queue the message was consumed from.
	Queue       string
	Exchange    string
	RoutingKey  string
	Redelivered bool

	codec    Codec
	delivery *transport.Delivery
}

// Decode decodes the body into v with the codec for the message's content
// type. A failure is a *DecodeError, which a handler can return as it is:
// the consumer parks the message rather than retrying it.
func (m *Message) Decode(v any) error {
	c := m.codec
	if c == nil {
		c = JSON
	}
	return c.Decode(m.Body, v)
}

// Decode decodes a message's body into a new T.
func Decode[T any](m *Message) (T, error) {
	var v T
	err := m.Decode(&v)
	return v, err
}

// Raw is the delivery with its engine headers, as the transport handed it
// but for x-acemq-first-seen, which the consumer writes in when the
// message arrived without one (so that every move of it carries the value
// worked out for it): for patterns that move a message verbatim (a
// replay, a stream reader reading x-stream-offset). Nil for a message not
// received from a broker.
func (m *Message) Raw() *transport.Delivery { return m.delivery }

type handlingKey struct{}

// Handling returns the message whose handler ctx belongs to. Publish reads
// it to carry the correlation id forward and record the causation.
func Handling(ctx context.Context) (*Message, bool) {
	m, ok := ctx.Value(handlingKey{}).(*Message)
	return m, ok
}

// WithHandling returns a ctx in which m is the message being handled, for
// code that handles a message outside a consumer (a test, a saga step).
func WithHandling(ctx context.Context, m *Message) context.Context {
	return context.WithValue(ctx, handlingKey{}, m)
}

// Again is a copy of m to send back to the queue it was consumed from,
// through the default exchange, as a put-back moves it: the same identity,
// properties, body and headers, the broker's own dead-lettering headers
// dropped. ok is false for a message not received from a broker.
func (m *Message) Again() (out Outgoing, ok bool) {
	if m.delivery == nil || m.Queue == "" {
		return Outgoing{}, false
	}
	return Outgoing{RoutingKey: m.Queue, Mandatory: true, Message: movable(m.delivery)}, true
}
