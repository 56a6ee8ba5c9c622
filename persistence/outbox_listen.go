package persistence

import (
	"context"
	"fmt"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/acemq/acemq-flow/patterns"
)

// listenCloseTimeout bounds closing the listening connection.
const listenCloseTimeout = 5 * time.Second

// Listen holds a dedicated connection listening on the outbox's channel and
// calls wake whenever a transaction that added a record commits, and once
// when it starts. It runs until ctx is done (returning ctx's error) or the
// connection fails, and closes its connection either way. Without a Listen
// function in the config and with a db that is not a *pgxpool.Pool it
// returns an error matching patterns.ErrOutboxCannotListen.
func (s *SQLOutboxStore) Listen(ctx context.Context, wake func()) error {
	conn, err := s.listenConn(ctx)
	if err != nil {
		return err
	}
	defer func() {
		cctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), listenCloseTimeout)
		defer cancel()
		_ = conn.Close(cctx)
	}()
	if _, err := conn.Exec(ctx, "LISTEN "+pgx.Identifier{s.t.Outbox}.Sanitize()); err != nil {
		return fmt.Errorf("outbox %s: listen: %w", s.t.Outbox, err)
	}
	wake()
	for {
		if _, err := conn.WaitForNotification(ctx); err != nil {
			if ctx.Err() != nil {
				return ctx.Err()
			}
			return fmt.Errorf("outbox %s: wait for notification: %w", s.t.Outbox, err)
		}
		wake()
	}
}

// listenConn is a connection of Listen's own, outside any pool: LISTEN
// belongs to a session, and a pooled connection handed back still
// listening would collect notifications for whoever borrows it next.
func (s *SQLOutboxStore) listenConn(ctx context.Context) (*pgx.Conn, error) {
	if s.listen != nil {
		conn, err := s.listen(ctx)
		if err != nil {
			return nil, fmt.Errorf("outbox %s: open the listening connection: %w", s.t.Outbox, err)
		}
		return conn, nil
	}
	pool, ok := s.db.(*pgxpool.Pool)
	if !ok {
		return nil, fmt.Errorf("%w: the store's db is a %T, not a *pgxpool.Pool, and no Listen function is configured", patterns.ErrOutboxCannotListen, s.db)
	}
	c, err := pool.Acquire(ctx)
	if err != nil {
		return nil, fmt.Errorf("outbox %s: acquire the listening connection: %w", s.t.Outbox, err)
	}
	return c.Hijack(), nil
}
