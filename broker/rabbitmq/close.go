package rabbitmq

import (
	"context"
	"fmt"
	"log/slog"
)

// Close stops reconnecting, cancels every subscription (requeueing what the
// broker sent after the cancel), closes the connection, which hands every
// unsettled delivery back to its queue, and waits, bounded by ctx, for the
// transport's goroutines to end. Publishes still waiting for a confirm fail
// with transport.ErrConnectionLost; every later operation returns
// transport.ErrClosed. Close is idempotent.
func (t *Transport) Close(ctx context.Context) error {
	t.mu.Lock()
	if t.closed {
		t.mu.Unlock()
		return nil
	}
	t.closed = true
	subs := make([]*subscription, 0, len(t.subs))
	for sub := range t.subs {
		subs = append(subs, sub)
	}
	s := t.cur
	t.mu.Unlock()

	// Cancelling t.ctx stops the supervisor, any redial in progress and
	// every subscription, which sends basic.cancel while the connection is
	// still up.
	t.cancel()
	var err error
	for _, sub := range subs {
		select {
		case <-sub.done:
		case <-ctx.Done():
			err = fmt.Errorf("rabbitmq: close: waiting for consumer %q to cancel: %w", sub.opts.Tag, ctx.Err())
		}
		if err != nil {
			break
		}
	}
	if s != nil {
		closeConn := s.conn.Close
		if deadline, ok := ctx.Deadline(); ok {
			closeConn = func() error { return s.conn.CloseDeadline(deadline) }
		}
		if cerr := closeConn(); cerr != nil && !s.conn.IsClosed() {
			t.log.Warn("rabbitmq close connection", slog.Any("error", cerr))
		}
	}
	t.setSession(nil)

	done := make(chan struct{})
	go func() {
		t.wg.Wait()
		close(done)
	}()
	select {
	case <-done:
	case <-ctx.Done():
		if err == nil {
			err = fmt.Errorf("rabbitmq: close: waiting for background work to stop: %w", ctx.Err())
		}
	}
	t.log.Info("rabbitmq transport closed")
	return err
}
