// Package broker is the AMQP core of acemq-flow: the Go member of the AceMQ
// family of libraries, speaking exactly the wire the Java, .NET, Python and
// Ruby members speak (docs/wire.md).
//
// # Connecting
//
// [Open] takes a URL: amqp:// or amqps:// is RabbitMQ (through amqp091-go),
// memory:// the in-process loopback used by tests and by the embedded
// default. Long-lived settings go in a [Config] (zero value = defaults);
// per-call knobs are functional options ([PublishOption], [ConsumeOption]).
//
//	conn, err := broker.Open(ctx, "amqp://guest:guest@127.0.0.1:5672/")
//	defer conn.Close(ctx)
//
// # Publishing
//
// [Conn.Publish] encodes a payload (JSON unless [WithCodec] says otherwise,
// raw bytes for a []byte), builds the envelope (message id, correlation id
// carried forward from the message being handled, causation, type,
// x-acemq-first-seen) and returns once the broker has confirmed the message.
// A [Mandatory] publish that nothing is bound to receive is an error
// matching [ErrUnroutable], never a silent drop.
//
// # Consuming
//
// [Conn.Consume] declares the queue with its .dlq and .parked
// ([ConsumerTopology]: exactly the arguments every AceMQ library declares,
// so that any of them can declare the queue too; its delivery limit is the
// operator's policy, [DeliveryLimitPolicy]), and runs a [Handler]. The handler's [Ack] is settled exactly once: accepted, retried
// through the scheduler ladder (attempt + 1), given up into .dlq with
// x-acemq-error, or put back with the attempt unchanged. Every move of a
// message is published mandatory and confirmed before the original delivery
// is acknowledged, so a crash at any point costs a duplicate, never a
// message.
//
// # The scheduler ladder
//
// Retries, put-backs and scheduled messages ride one ladder of uniform-TTL
// queues ([LadderTopology]); the control consumer hops each message down the
// rungs until it is due and then delivers it ([Conn.Schedule]).
//
// # Time
//
// A connection reads the time from its [Clock] (Config.Clock; nil =
// [SystemClock]) wherever a time decides what happens: due times and
// rungs, retry delays and max ages, put-backs, and the timestamps of what
// it publishes. A clock the test moves (package engine/flowtest) works on
// the loopback only, whose TTLs expire on it too; RabbitMQ is refused.
// [Conn.InFlight] says how many deliveries the consumers hold: what such a
// test waits to see at zero before it moves the clock.
//
// # Errors
//
// Errors wrap sentinels and typed errors for errors.Is and errors.As:
// [ErrInvalidOption], [ErrInvalidURL], [ErrReservedHeader], [ErrClosed],
// [ErrUnroutable], [ErrUnreadableEnvelope], [*FatalError], [*DecodeError],
// [*MalformedHeaderError], [*QueueTypeError], [*ConsumerEndedError], and
// the transport's errors (package transport: ErrTooLarge,
// ErrConnectionLost, *ReturnedError, ...). [Refused] tells a publish the
// broker said no to from one whose fate is unknown.
package broker
