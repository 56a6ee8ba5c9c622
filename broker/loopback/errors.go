package loopback

import (
	"fmt"

	"github.com/acemq/acemq-flow/broker/transport"
)

// replyNames are the AMQP reply texts RabbitMQ puts before its reasons.
var replyNames = map[int]string{
	transport.AccessRefused:      "ACCESS_REFUSED",
	transport.NotFound:           "NOT_FOUND",
	transport.ResourceLocked:     "RESOURCE_LOCKED",
	transport.PreconditionFailed: "PRECONDITION_FAILED",
	commandInvalid:               "COMMAND_INVALID",
}

// commandInvalid is the connection exception RabbitMQ raises for an
// unknown exchange type.
const commandInvalid = 503

// amqpError builds the exception RabbitMQ would raise, with its wording.
func amqpError(code int, format string, args ...any) *transport.AMQPError {
	return &transport.AMQPError{Code: code, Reason: replyNames[code] + " - " + fmt.Sprintf(format, args...)}
}

func notFoundQueue(name string) error {
	return amqpError(transport.NotFound, "no queue '%s' in vhost '/'", name)
}

func notFoundExchange(name string) error {
	return amqpError(transport.NotFound, "no exchange '%s' in vhost '/'", name)
}

func defaultExchangeRefused() error {
	return amqpError(transport.AccessRefused, "operation not permitted on the default exchange")
}

func locked(name string) error {
	return amqpError(transport.ResourceLocked,
		"cannot obtain exclusive access to locked queue '%s' in vhost '/'. It could be originally declared on another connection or the exclusive property value does not match that of the original declaration.", name)
}
