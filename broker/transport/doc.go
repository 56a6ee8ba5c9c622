// Package transport is the seam between the broker package and an AMQP
// implementation: the small set of operations the AceMQ core needs from a
// message broker, and the values that cross it.
//
// Two implementations exist: package rabbitmq (RabbitMQ through amqp091-go,
// the reference) and package loopback (the same model in-process, for tests
// and the embedded default). Both pass the shared conformance suite in
// package transporttest; a behaviour the loopback gets wrong is a bug.
//
// # What a Transport promises
//
//   - Publish returns only once the broker has confirmed the message. A
//     mandatory publish that the broker returned is a [*ReturnedError], a
//     negative acknowledgement is [ErrNacked], and a connection lost while
//     waiting for the confirm is [ErrConnectionLost]: never a silent success.
//   - Declare remembers what it declared and, for transports that reconnect,
//     declares it again on every new connection before consumers resume.
//   - A Subscription survives reconnection: the transport resubscribes and
//     keeps feeding the same Deliveries channel. Deliveries received before
//     a reconnect can no longer be settled ([ErrStaleDelivery]); the broker
//     redelivers them.
//   - Every delivery is settled at most once, and settling one settles no
//     other: a transport may carry several acknowledgements in one frame
//     (RabbitMQ's basic.ack with multiple=true) only when every delivery
//     it covers was acknowledged by its holder. Settling is safe from
//     concurrent goroutines.
//
// Header values must be valid AMQP field values: nil, bool, the sized
// integer types, int, float32, float64, string, []byte, time.Time, Table and
// []any of those. Other types (notably []string) are refused with
// [ErrInvalidHeader]; the loopback enforces the same rule so a test cannot
// pass on something RabbitMQ would refuse.
package transport
