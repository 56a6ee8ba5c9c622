package transport

import (
	"errors"
	"fmt"
)

// Sentinel errors every transport reports the same way.
var (
	// ErrClosed: the transport (or the subscription) was closed.
	ErrClosed = errors.New("transport closed")
	// ErrNacked: the broker answered a publish with basic.nack.
	ErrNacked = errors.New("publish not confirmed: the broker nacked it")
	// ErrConnectionLost: the connection went away before the broker
	// confirmed a publish; the message may or may not have been taken.
	ErrConnectionLost = errors.New("connection lost before the publish was confirmed")
	// ErrUnroutable is what a *ReturnedError matches with errors.Is.
	ErrUnroutable = errors.New("message returned unroutable")
	// ErrStaleDelivery: the delivery came on a connection that has since
	// been replaced; the broker will redeliver it.
	ErrStaleDelivery = errors.New("delivery belongs to a connection that was lost; it will be redelivered")
	// ErrAlreadySettled: the delivery was already acknowledged or rejected.
	ErrAlreadySettled = errors.New("delivery already settled")
	// ErrInvalidHeader: a header or argument value is not an AMQP field value.
	ErrInvalidHeader = errors.New("invalid AMQP field value")
	// ErrInvalidExpiration: Message.Expiration is not a non-negative integer.
	ErrInvalidExpiration = errors.New("invalid expiration: want milliseconds as a decimal integer")
	// ErrNotSupported: the transport does not implement the requested feature
	// (the loopback does not do streams).
	ErrNotSupported = errors.New("not supported by this transport")
	// ErrTooLarge: a publish AMQP or the connection cannot carry (see
	// CheckPublishing); it was refused before anything was sent, and the
	// connection is untouched.
	ErrTooLarge = errors.New("message too large for AMQP")
)

// AMQP reply codes the core distinguishes.
const (
	NotFound           = 404
	AccessRefused      = 403
	ResourceLocked     = 405
	PreconditionFailed = 406
)

// AMQPError is a channel or connection exception the broker raised, for
// example PRECONDITION_FAILED when a queue is redeclared with other
// arguments.
type AMQPError struct {
	Code   int
	Reason string
}

// Error is the reply code and text the broker sent.
func (e *AMQPError) Error() string { return fmt.Sprintf("amqp %d: %s", e.Code, e.Reason) }

// IsCode reports whether err is an *AMQPError with the given code.
func IsCode(err error, code int) bool {
	var ae *AMQPError
	return errors.As(err, &ae) && ae.Code == code
}

// ReturnedError is a mandatory publish the broker could not route.
type ReturnedError struct {
	Exchange   string
	RoutingKey string
	ReplyCode  int
	ReplyText  string
}

// Error says where the message was going and why it came back.
func (e *ReturnedError) Error() string {
	ex := e.Exchange
	if ex == "" {
		ex = "(default exchange)"
	}
	return fmt.Sprintf("message to %s with routing key %q returned: %d %s", ex, e.RoutingKey, e.ReplyCode, e.ReplyText)
}

// Is makes errors.Is(err, ErrUnroutable) true.
func (e *ReturnedError) Is(target error) bool { return target == ErrUnroutable }
