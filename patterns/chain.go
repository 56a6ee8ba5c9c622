package patterns

import "github.com/acemq/acemq-flow/broker"

// Chain wraps h in mws, the first named outermost, so that the chain
// reads outside-in: in Chain(h, WithLogging(l), WithTimeout(d),
// Idempotent(store)) the log records what the timeout and the
// idempotency guard decided. It is what broker.Use does on Consume, for a
// handler that is wrapped before it gets there. Chain returns nil (which
// Consume refuses) for a nil h or a nil middleware.
func Chain(h broker.Handler, mws ...broker.Middleware) broker.Handler {
	if h == nil {
		return nil
	}
	for i := len(mws) - 1; i >= 0; i-- {
		if mws[i] == nil {
			return nil
		}
		h = mws[i](h)
	}
	return h
}
