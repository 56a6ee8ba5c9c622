package broker

import (
	"errors"
	"fmt"

	"github.com/acemq/acemq-flow/broker/transport"
)

// Sentinel errors. Transport errors (transport.ErrUnroutable,
// transport.ErrConnectionLost, *transport.ReturnedError, ...) pass through
// wrapped, so errors.Is and errors.As see them.
var (
	// ErrInvalidOption: an option or config value is out of range.
	ErrInvalidOption = errors.New("invalid option")
	// ErrInvalidURL: Open was given a URL it cannot use.
	ErrInvalidURL = errors.New("invalid broker URL")
	// ErrReservedHeader: an application header used the x-acemq- namespace.
	ErrReservedHeader = errors.New("reserved header")
	// ErrInvalidPayload: the codec cannot encode the payload.
	ErrInvalidPayload = errors.New("invalid payload")
	// ErrClosed: the connection or consumer is closed.
	ErrClosed = transport.ErrClosed
	// ErrUnroutable: a mandatory publish was returned by the broker.
	ErrUnroutable = transport.ErrUnroutable
)

// FatalError marks a handler failure that no retry can fix: the message is
// given up to its dead-letter queue at once. Build one with Fatal.
type FatalError struct{ Err error }

// Error is the wrapped error's text, marked fatal.
func (e *FatalError) Error() string { return "fatal: " + e.Err.Error() }

// Unwrap returns the wrapped error.
func (e *FatalError) Unwrap() error { return e.Err }

// Fatal wraps err so that a handler returning it gives the message up
// immediately instead of retrying. Fatal(nil) is nil.
func Fatal(err error) error {
	if err == nil {
		return nil
	}
	return &FatalError{Err: err}
}

// DecodeError is a body the consumer's codec cannot read. A consumer parks
// the delivery (into {queue}.parked): replaying it could never help.
type DecodeError struct {
	ContentType string
	Err         error
}

// Error names the content type and why it could not be decoded.
func (e *DecodeError) Error() string {
	return fmt.Sprintf("cannot decode %q body: %v", e.ContentType, e.Err)
}

// Unwrap returns the codec's own error.
func (e *DecodeError) Unwrap() error { return e.Err }

func invalid(format string, args ...any) error {
	return fmt.Errorf("%w: "+format, append([]any{ErrInvalidOption}, args...)...)
}
