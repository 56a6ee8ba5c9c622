package patterns

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/acemq/acemq-flow/broker"
)

// ErrHandlerTimeout is the retry reason WithTimeout reports for a handler
// that overran its time.
var ErrHandlerTimeout = errors.New("handler overran its timeout")

// WithTimeout gives the handler d: at d its context is cancelled, and the
// middleware waits for it to return, then reports the overrun as a retry
// whatever the handler said about itself. Retrying work that may have
// succeeded risks doing it twice, and accepting work that may have failed
// loses it; only the first can be solved (an idempotent handler). It does
// not interrupt the handler, which could leave a transaction half
// written, and the message is held until it returns either way. d <= 0
// means no timeout.
func WithTimeout(d time.Duration) broker.Middleware {
	return func(h broker.Handler) broker.Handler {
		if d <= 0 {
			return h
		}
		return func(ctx context.Context, m *broker.Message) broker.Ack {
			cause := fmt.Errorf("%w (%s)", ErrHandlerTimeout, d)
			tctx, cancel := context.WithTimeoutCause(ctx, d, cause)
			defer cancel()
			ack := h(tctx, m)
			// The cause tells this deadline from the consumer's own
			// cancellation, which is not an overrun.
			if errors.Is(context.Cause(tctx), cause) {
				return broker.Retry(cause)
			}
			return ack
		}
	}
}
