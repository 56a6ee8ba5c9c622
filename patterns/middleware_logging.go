package patterns

import (
	"context"
	"log/slog"
	"time"

	"github.com/acemq/acemq-flow/broker"
)

// WithLogging logs one line per message once the handler has decided,
// with the message id, queue, attempt, outcome, duration and reason: at
// Info for an accept, Warn for a retry or a put-back, Error for a reject.
// A nil logger is slog.Default().
func WithLogging(logger *slog.Logger) broker.Middleware {
	return func(h broker.Handler) broker.Handler {
		return func(ctx context.Context, m *broker.Message) broker.Ack {
			log := logger
			if log == nil {
				// Read at each message rather than once, so a default set
				// after the middleware was built is the one used.
				log = slog.Default()
			}
			start := time.Now()
			ack := h(ctx, m)
			level := slog.LevelInfo
			switch ack.Outcome() {
			case broker.OutcomeRetry, broker.OutcomeInProgress:
				level = slog.LevelWarn
			case broker.OutcomeReject:
				level = slog.LevelError
			}
			attrs := []slog.Attr{
				slog.String("message_id", m.ID),
				slog.String("queue", m.Queue),
				slog.Int("attempt", m.Attempt),
				slog.String("outcome", ack.Outcome().String()),
				slog.Duration("took", time.Since(start)),
			}
			if err := ack.Err(); err != nil {
				attrs = append(attrs, slog.Any("error", err))
			}
			log.LogAttrs(ctx, level, "message handled", attrs...)
			return ack
		}
	}
}
