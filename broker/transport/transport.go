package transport

import (
	"context"
	"time"
)

// Table is an AMQP field table: message headers and declaration arguments.
type Table map[string]any

// Message is one AMQP message as it travels: properties, headers and body.
// The transport always publishes it persistent (delivery mode 2).
type Message struct {
	MessageID     string
	CorrelationID string
	Type          string
	ContentType   string
	ReplyTo       string
	// Expiration is the per-message TTL in milliseconds, as AMQP spells it
	// ("" for none). The transport refuses anything that is not a
	// non-negative decimal integer, because RabbitMQ closes the channel on it
	// while the publish itself reports success.
	Expiration string
	// Timestamp has one-second resolution on the wire.
	Timestamp time.Time
	Headers   Table
	Body      []byte
}

// Publishing is a message addressed to an exchange with a routing key.
type Publishing struct {
	Exchange   string
	RoutingKey string
	// Mandatory asks the broker to return the message when no queue is bound
	// to receive it; Publish then fails with a *ReturnedError.
	Mandatory bool
	Message   Message
}

// Delivery is a message handed to a consumer or fetched with Get.
type Delivery struct {
	Message
	Exchange    string
	RoutingKey  string
	Redelivered bool
	// ConsumerTag is the tag of the subscription that received it ("" for Get).
	ConsumerTag string

	// Settler acknowledges or rejects this delivery. Set by the transport.
	Settler Settler
}

// Ack acknowledges the delivery: the broker forgets the message.
func (d *Delivery) Ack() error { return d.Settler.Ack() }

// Nack rejects the delivery. With requeue the broker puts the message back
// (marked redelivered); without, it is dead-lettered through the queue's
// x-dead-letter-exchange, or dropped when the queue has none.
func (d *Delivery) Nack(requeue bool) error { return d.Settler.Nack(requeue) }

// Settler settles one delivery. Each method may be called once; a second
// settlement returns ErrAlreadySettled.
type Settler interface {
	Ack() error
	Nack(requeue bool) error
}

// ConsumeOptions configures a subscription.
type ConsumeOptions struct {
	// Tag is the consumer tag; empty lets the transport generate one.
	Tag string
	// Prefetch is the maximum number of unsettled deliveries (basic.qos on
	// the subscription's own channel). Must be at least 1.
	Prefetch int
	// Exclusive asks to be the queue's only consumer.
	Exclusive bool
	// Args are the basic.consume arguments (for example x-stream-offset).
	Args Table
	// ResumeArgs, when set, is called for every resubscription after a
	// reconnect and its result replaces Args, so a stream reader can resume
	// from its own position rather than its starting offset.
	ResumeArgs func() Table
	// Stream says the queue is a stream. RabbitMQ closes the whole
	// connection on basic.nack or basic.reject to a stream, so the
	// transport never sends one for this subscription: a delivery it has to
	// give back (one that raced a Cancel) is acknowledged instead, which on
	// a stream only moves this consumer's position.
	Stream bool
}

// Subscription is a running consumer on one queue.
type Subscription interface {
	// Deliveries yields the messages the broker hands this consumer. It is
	// closed when the subscription ends: after Cancel, after Close of the
	// transport, or when the broker cancelled it and resubscribing failed
	// (Err then says why).
	Deliveries() <-chan *Delivery
	// Cancel stops the broker delivering to this consumer (basic.cancel) and
	// closes Deliveries once nothing more can arrive. Deliveries already
	// received can still be settled. Deliveries the broker sent after the
	// cancel raced it are requeued, never dropped. Idempotent.
	Cancel(ctx context.Context) error
	// Err is why the subscription ended on its own, or nil.
	Err() error
}

// QueueState is what a passive declaration reports.
type QueueState struct {
	Name      string
	Messages  int
	Consumers int
}

// Transport is one logical connection to a broker.
type Transport interface {
	// Declare declares every exchange, queue and binding of t, in that
	// order, and remembers them so that a reconnecting transport declares
	// them again. Declaring something that exists with other flags or
	// arguments fails with an *AMQPError of code PreconditionFailed.
	Declare(ctx context.Context, t Topology) error
	// Publish sends p and waits for the broker's confirm (see package doc).
	// While a reconnecting transport is between connections, Publish waits
	// for the next one, bounded by ctx.
	Publish(ctx context.Context, p Publishing) error
	// Consume subscribes to queue. The queue must exist.
	Consume(ctx context.Context, queue string, opts ConsumeOptions) (Subscription, error)
	// Get fetches one message (basic.get, manual acknowledgement), or
	// returns nil and no error when the queue is empty.
	Get(ctx context.Context, queue string) (*Delivery, error)
	// Inspect declares queue passively: an *AMQPError of code NotFound when
	// it does not exist.
	Inspect(ctx context.Context, queue string) (QueueState, error)
	// Purge removes every ready message from queue and says how many.
	Purge(ctx context.Context, queue string) (int, error)
	// DeleteQueue deletes queue (whatever it holds) and says how many
	// messages went with it; deleting a queue that does not exist is not an
	// error. It is also forgotten for redeclaration.
	DeleteQueue(ctx context.Context, queue string) (int, error)
	// DeleteExchange deletes an exchange; a missing one is not an error.
	DeleteExchange(ctx context.Context, exchange string) error
	// Unbind removes a binding and forgets it for redeclaration.
	Unbind(ctx context.Context, b Binding) error
	// Close cancels every subscription, waits for nothing further (the
	// caller settles in-flight deliveries first), and closes the
	// connection. Unsettled deliveries go back to their queues. Idempotent.
	Close(ctx context.Context) error
	// Name says what this transport is connected to, for logs: the URL with
	// any password removed, or "memory://...".
	Name() string
}
