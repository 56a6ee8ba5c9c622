// Package loopback is an in-process implementation of [transport.Transport]:
// the AMQP model the AceMQ core uses, kept in memory, for tests and for the
// embedded default that runs without a broker.
//
// # What it models
//
// A [Broker] holds exchanges and queues; [Broker.Connect] opens a
// connection to it. Like RabbitMQ 3.10 it pre-declares the default exchange
// "" (every queue bound by its own name) and amq.direct, amq.topic and
// amq.fanout, and it implements direct, topic and fanout routing, the
// alternate-exchange argument, mandatory returns, immediate publisher
// confirms, per-subscription prefetch with round-robin dispatch and
// x-single-active-consumer, ack/nack/requeue, exclusive and auto-delete
// queues and exchanges, x-max-length and x-max-length-bytes with every
// x-overflow mode, queue and per-message TTL (expiring only at the head of a
// queue, as RabbitMQ does), dead-lettering with RabbitMQ's x-death header and
// cycle detection, and quorum queues' x-delivery-count and
// x-delivery-limit.
//
// TTLs expire on the broker's clock: the system's for [New], the caller's
// for [NewWithClock] (a test that moves its clock by hand, as package
// engine/flowtest does, with the same clock on its broker.Conn). [Broker.Stats]
// says what is in flight (deliveries unsettled, deliveries made), so that
// such a test can wait until nothing moves before it moves the clock.
//
// A message that goes back to its queue comes back where RabbitMQ 3.10
// puts it. A classic queue (x-queue-type classic, or none) restores it to
// its original position, whether it was requeued by a nack or returned by a
// closing connection, so its ready messages are always in the order they
// were enqueued. A quorum queue appends a requeued message at the tail, in
// the order of the nacks, and serves messages returned by a closing
// connection first, in the order they were delivered.
//
// It checks what RabbitMQ checks and answers with the same reply codes:
// 403 for the default exchange and the reserved "amq." prefix, 404 for a
// missing queue or exchange, 405 for another connection's exclusive queue,
// 406 for an inequivalent redeclaration or an invalid argument. Header and
// argument values are validated like [transport.Table.Validate] and
// normalised as they come back from RabbitMQ through amqp091-go (int becomes
// int64, map[string]any becomes [transport.Table], time.Time loses its
// sub-second part), and every message is deep-copied on the way in and on
// the way out, so a sender and its receivers never share memory.
//
// # What it refuses
//
// Streams (x-queue-type: stream, and the x-stream-offset or any other
// x-stream-* consume argument), headers exchanges, x-expires and
// x-max-priority fail with an error wrapping [transport.ErrNotSupported]:
// they need a real broker. A publish a RabbitMQ connection could not carry
// is refused as the RabbitMQ transport refuses it
// ([transport.CheckPublishing], for RabbitMQ's default frame_max of
// [transport.DefaultFrameMax]), with an error matching
// [transport.ErrTooLarge]. The loopback never reconnects, so
// [transport.ErrStaleDelivery] and [transport.ErrConnectionLost] do not
// occur.
package loopback
