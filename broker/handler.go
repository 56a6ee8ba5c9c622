package broker

import (
	"context"
	"errors"
	"fmt"
	"runtime/debug"
)

// Handler handles one message and says what became of it.
type Handler func(ctx context.Context, m *Message) Ack

// Middleware wraps a handler and hands back a handler, so a consumer's
// retry policy, dead-lettering and envelope stay whatever was configured.
type Middleware func(Handler) Handler

// Func adapts an error-returning function to a Handler: nil accepts, an
// error wrapped with Fatal (or a *DecodeError) gives the message up at once,
// any other error retries.
func Func(f func(ctx context.Context, m *Message) error) Handler {
	return func(ctx context.Context, m *Message) Ack {
		err := f(ctx, m)
		switch {
		case err == nil:
			return Accept()
		case isFatal(err):
			return Reject(err)
		default:
			return Retry(err)
		}
	}
}

func isFatal(err error) bool {
	var f *FatalError
	return errors.As(err, &f)
}

// PanicError is the retry reason recorded for a handler that panicked.
type PanicError struct {
	Value any
	Stack []byte
}

// Error says the handler panicked, and with what.
func (e *PanicError) Error() string { return fmt.Sprintf("handler panicked: %v", e.Value) }

// safely runs h, turning a panic into a retry: a panic is a bug in a
// handler, and a bug fixed and deployed should find the message still there.
func safely(ctx context.Context, h Handler, m *Message) (ack Ack) {
	defer func() {
		if r := recover(); r != nil {
			ack = Retry(&PanicError{Value: r, Stack: debug.Stack()})
		}
	}()
	return h(ctx, m)
}
