package rabbitmq

import (
	"errors"

	amqp "github.com/rabbitmq/amqp091-go"

	"github.com/acemq/acemq-flow/broker/transport"
)

// ErrInvalidPrefetch is what Consume returns for a prefetch outside 1..65535:
// 0 would mean unlimited to the broker, never what a caller meant.
var ErrInvalidPrefetch = errors.New("rabbitmq: prefetch must be between 1 and 65535")

// mapError turns an exception the broker raised into an
// *transport.AMQPError and leaves every other error as it is.
func mapError(err error) error {
	var ae *amqp.Error
	if errors.As(err, &ae) && ae.Server {
		return &transport.AMQPError{Code: ae.Code, Reason: ae.Reason}
	}
	return err
}

// errRetry asks withChannel to run an operation again on the next
// connection.
var errRetry = errors.New("rabbitmq: retry on the next connection")

// connectionForced is the code of a connection the broker (or an operator)
// closed on purpose, as opposed to one our request made it close.
const connectionForced = 320

// retryable reports whether an operation that failed with err after its
// connection closed may run again on the next connection: the connection
// went away under it, rather than the broker closing it because of the
// operation itself (a hard error such as 503 for an unknown exchange type,
// which would only repeat).
func retryable(err error) bool {
	var ae *amqp.Error
	if errors.As(err, &ae) && ae.Server && ae.Code != connectionForced {
		return false
	}
	var te *transport.AMQPError
	return !errors.As(err, &te) || te.Code == connectionForced
}
