package rabbitmq

import (
	"context"
	"fmt"
	"log/slog"
	"time"
)

// Close waits for the acknowledgements already taken to be written and
// until SettleGrace has passed since the last one (bounded by ctx), then
// stops reconnecting, cancels every subscription (requeueing what the
// broker sent after the cancel), closes the connection, which hands every
// unsettled delivery back to its queue, and waits, bounded by ctx, for the
// transport's goroutines to end. Publishes still waiting for a confirm fail
// with transport.ErrConnectionLost; every later operation returns
// transport.ErrClosed. Close is idempotent.
func (t *Transport) Close(ctx context.Context) error {
	if t.isClosed() {
		return nil
	}
	t.drainAcks(ctx)
	// Give the broker SettleGrace after the last ack to apply it: a quorum
	// queue undoes acknowledgements still in flight when their channel
	// closes, and the messages would be delivered again.
	if last := t.lastSettle.Load(); last != 0 {
		if wait := time.Until(time.Unix(0, last).Add(t.cfg.SettleGrace)); wait > 0 {
			select {
			case <-time.After(wait):
			case <-ctx.Done():
			}
		}
	}
	t.mu.Lock()
	if t.closed.Load() {
		t.mu.Unlock()
		return nil
	}
	t.closed.Store(true)
	t.live.Store(nil)
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
