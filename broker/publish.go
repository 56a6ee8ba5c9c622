package broker

import (
	"context"
	"fmt"
	"strconv"
	"sync"
	"time"

	"github.com/acemq/acemq-flow/broker/transport"
)

// PublishOption is a per-call knob of Publish and Prepare.
type PublishOption interface {
	applyPublish(*publishConfig) error
}

type publishConfig struct {
	exchange, key         string
	mandatory             bool
	id, correlation, caus string
	typ                   string
	headers               Table
	codec                 Codec
	replyTo               string
	expiration            string
	runID                 string
	route                 []string
	position              int
	firstSeen             time.Time
	attempt               int
}

type publishOpt func(*publishConfig) error

func (f publishOpt) applyPublish(c *publishConfig) error { return f(c) }

// To sets the routing key (for the default exchange: the queue name).
func To(routingKey string) PublishOption {
	return publishOpt(func(c *publishConfig) error { c.key = routingKey; return nil })
}

// ToExchange sets the exchange (default: the default exchange, "").
func ToExchange(name string) PublishOption {
	return publishOpt(func(c *publishConfig) error { c.exchange = name; return nil })
}

// Mandatory asks the broker to return the message if nothing is bound to
// receive it; Publish then fails with an error matching ErrUnroutable
// instead of the broker confirming and dropping it.
func Mandatory() PublishOption {
	return publishOpt(func(c *publishConfig) error { c.mandatory = true; return nil })
}

// Type sets the message type, e.g. "order.placed.v2".
func Type(t string) PublishOption {
	return publishOpt(func(c *publishConfig) error { c.typ = t; return nil })
}

// MessageID sets the message id instead of generating one.
func MessageID(id string) PublishOption {
	return publishOpt(func(c *publishConfig) error {
		if id == "" {
			return invalid("empty message id")
		}
		c.id = id
		return nil
	})
}

// CorrelationID sets the correlation id instead of carrying it forward from
// the message being handled.
func CorrelationID(id string) PublishOption {
	return publishOpt(func(c *publishConfig) error { c.correlation = id; return nil })
}

// CausedBy records m as the message whose handling produced this one
// (x-acemq-causation-id) and carries its correlation id forward. Publish
// does this by itself inside a handler; CausedBy is for elsewhere.
func CausedBy(m *Message) PublishOption {
	return publishOpt(func(c *publishConfig) error {
		c.caus = m.ID
		if c.correlation == "" {
			c.correlation = m.CorrelationID
		}
		return nil
	})
}

// Header sets one application header. A name in the x-acemq- namespace, or
// a value that is not an AMQP field value, is refused.
func Header(name string, value any) PublishOption {
	return publishOpt(func(c *publishConfig) error {
		if c.headers == nil {
			c.headers = Table{}
		}
		c.headers[name] = value
		return nil
	})
}

// Headers sets several application headers (see Header).
func Headers(h Table) PublishOption {
	return publishOpt(func(c *publishConfig) error {
		if c.headers == nil {
			c.headers = Table{}
		}
		for k, v := range h {
			c.headers[k] = v
		}
		return nil
	})
}

// ReplyTo sets the reply address, both as the acemq-reply-to header and as
// AMQP's reply-to property, as every AceMQ library writes it.
func ReplyTo(queue string) PublishOption {
	return publishOpt(func(c *publishConfig) error { c.replyTo = queue; return nil })
}

// Expires sets the per-message time to live; the broker drops (or
// dead-letters) the message if it is still queued after d. d must be
// positive; it is sent in whole milliseconds, at least one.
func Expires(d time.Duration) PublishOption {
	return publishOpt(func(c *publishConfig) error {
		if d <= 0 {
			return invalid("expiration %s, want a positive duration", d)
		}
		c.expiration = strconv.FormatInt(max(d.Milliseconds(), 1), 10)
		return nil
	})
}

// RunID sets x-acemq-run-id, the pipeline or slip run the message belongs to.
func RunID(id string) PublishOption {
	return publishOpt(func(c *publishConfig) error { c.runID = id; return nil })
}

// Route sets x-acemq-route and x-acemq-route-position: a declared
// pipeline's step names and the index of the step the message goes to.
func Route(steps []string, position int) PublishOption {
	return publishOpt(func(c *publishConfig) error {
		if len(steps) == 0 || position < 0 || position >= len(steps) {
			return invalid("route position %d outside %d steps", position, len(steps))
		}
		c.route = append([]string(nil), steps...)
		c.position = position
		return nil
	})
}

// FirstSeen carries x-acemq-first-seen from an earlier message, for a
// message that continues the same piece of work (a pipeline hop).
func FirstSeen(t time.Time) PublishOption {
	return publishOpt(func(c *publishConfig) error { c.firstSeen = t; return nil })
}

// Outgoing is a message ready to send: encoded, with its envelope built by
// the same rules Publish uses. An outbox stores one; Send publishes it.
type Outgoing struct {
	Exchange   string
	RoutingKey string
	Mandatory  bool
	Message    transport.Message
}

// publishConfigs recycles Prepare's option values: handed to options
// through an interface, a publishConfig escapes to the heap, a few hundred
// bytes per publish otherwise.
var publishConfigs = sync.Pool{New: func() any { return new(publishConfig) }}

// Prepare builds the message Publish would send, without sending it. Inside
// a handler (ctx from a consumer) the correlation id is carried forward from
// the message being handled and the causation recorded.
func (c *Conn) Prepare(ctx context.Context, payload any, opts ...PublishOption) (Outgoing, error) {
	pc := publishConfigs.Get().(*publishConfig)
	defer func() {
		*pc = publishConfig{}
		publishConfigs.Put(pc)
	}()
	for _, o := range opts {
		if err := o.applyPublish(pc); err != nil {
			return Outgoing{}, err
		}
	}
	if err := checkApplicationHeaders(pc.headers); err != nil {
		return Outgoing{}, err
	}
	codec := pc.codec
	if codec == nil {
		codec = c.defaultCodec
		if _, isBytes := payload.([]byte); isBytes {
			codec = Raw
		}
	}
	body, err := codec.Encode(payload)
	if err != nil {
		return Outgoing{}, err
	}
	now := c.now()
	env := Envelope{
		ID:            pc.id,
		CorrelationID: pc.correlation,
		CausationID:   pc.caus,
		Type:          pc.typ,
		ContentType:   codec.ContentType(),
		Timestamp:     now,
		FirstSeen:     pc.firstSeen,
		Attempt:       1,
		RunID:         pc.runID,
		Route:         pc.route,
		RoutePosition: pc.position,
		ReplyTo:       pc.replyTo,
		Expiration:    pc.expiration,
	}
	if env.ID == "" {
		env.ID = NewID()
	}
	if m, ok := Handling(ctx); ok {
		if env.CausationID == "" {
			env.CausationID = m.ID
		}
		if env.CorrelationID == "" {
			env.CorrelationID = m.CorrelationID
		}
	}
	if env.CorrelationID == "" {
		env.CorrelationID = env.ID
	}
	if env.FirstSeen.IsZero() {
		env.FirstSeen = now
	}
	headers := pc.headers.Clone()
	if headers == nil {
		headers = Table{}
	}
	if pc.replyTo != "" {
		headers[HeaderReplyTo] = pc.replyTo
	}
	out := Outgoing{Exchange: pc.exchange, RoutingKey: pc.key, Mandatory: pc.mandatory}
	env.encode(&out.Message, headers)
	out.Message.Headers = headers
	out.Message.Body = body
	return out, nil
}

// Publish encodes payload and publishes it, returning once the broker has
// confirmed it. A mandatory publish nothing is bound to receive fails with
// an error matching ErrUnroutable. While the connection is down, Publish
// waits for it to come back, bounded by ctx.
func (c *Conn) Publish(ctx context.Context, payload any, opts ...PublishOption) error {
	out, err := c.Prepare(ctx, payload, opts...)
	if err != nil {
		return fmt.Errorf("publish: %w", err)
	}
	return c.Send(ctx, out)
}

// Send publishes a prepared message and waits for the broker's confirm.
func (c *Conn) Send(ctx context.Context, out Outgoing) error {
	if c.closed.Load() {
		return fmt.Errorf("publish to %s: %w", destination(out.Exchange, out.RoutingKey), ErrClosed)
	}
	return c.send(ctx, out)
}

func destination(exchange, key string) string {
	if exchange == "" {
		return fmt.Sprintf("queue %q", key)
	}
	return fmt.Sprintf("exchange %q key %q", exchange, key)
}
