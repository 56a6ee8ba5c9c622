package rabbitmq

import (
	"context"
	"errors"
	"fmt"
	"log/slog"

	amqp "github.com/rabbitmq/amqp091-go"
)

// withChannel runs fn on a short-lived channel of the current connection:
// an exception kills the channel it happens on, so nothing long-lived shares
// it. When the connection goes away under fn, fn runs again on the next one
// (every caller is idempotent), bounded by ctx. Broker exceptions come back
// as *transport.AMQPError.
func (t *Transport) withChannel(ctx context.Context, fn func(*session, *amqp.Channel) error) error {
	for {
		s, err := t.session(ctx)
		if err != nil {
			return err
		}
		ch, err := s.channel()
		if err != nil {
			if s.isLost() {
				continue
			}
			return err
		}
		err = fn(s, ch)
		// After an exception the channel is already closed and Close is a
		// no-op; otherwise this is the end of its short life.
		closeErr := ch.Close()
		if err != nil && (errors.Is(err, errRetry) || s.isLost() && retryable(err)) {
			t.log.Debug("rabbitmq retrying an operation on the next connection", slog.Any("error", err))
			continue
		}
		if err != nil {
			return mapError(err)
		}
		if closeErr != nil && !s.isLost() {
			return fmt.Errorf("close channel: %w", mapError(closeErr))
		}
		return nil
	}
}
