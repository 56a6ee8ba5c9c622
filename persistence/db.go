package persistence

import (
	"context"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"
	"github.com/jackc/pgx/v5/pgxpool"
)

// DB is what the stores run their statements on: whatever the caller holds.
// *pgxpool.Pool, *pgx.Conn and pgx.Tx all satisfy it. Begin on a pgx.Tx
// opens a savepoint, so a store handed a transaction stays inside it.
type DB interface {
	Exec(ctx context.Context, sql string, args ...any) (pgconn.CommandTag, error)
	Query(ctx context.Context, sql string, args ...any) (pgx.Rows, error)
	QueryRow(ctx context.Context, sql string, args ...any) pgx.Row
	Begin(ctx context.Context) (pgx.Tx, error)
	// SendBatch sends a batch of statements in one round trip; they run
	// in one transaction.
	SendBatch(ctx context.Context, b *pgx.Batch) pgx.BatchResults
}

var (
	_ DB = (*pgxpool.Pool)(nil)
	_ DB = (*pgx.Conn)(nil)
	_ DB = pgx.Tx(nil)
)

// inTx runs f in a transaction on db (a savepoint when db is a pgx.Tx) and
// commits when f returns nil.
func inTx(ctx context.Context, db DB, f func(pgx.Tx) error) error {
	tx, err := db.Begin(ctx)
	if err != nil {
		return err
	}
	// Rollback after Commit is a no-op; after a failure it is the cleanup.
	defer func() { _ = tx.Rollback(context.WithoutCancel(ctx)) }()
	if err := f(tx); err != nil {
		return err
	}
	return tx.Commit(ctx)
}

// txKey is the context key of the transaction CompleteInTx runs work in.
type txKey struct{}

// Tx is the database transaction ctx carries: the one a transactional
// step runs in (SQLIdempotencyStore.CompleteInTx, which the engine uses
// for a dsl step marked Transactional). Write the step's effects through
// it and they commit together with the record that the step ran, or not at
// all. ok is false when ctx carries none: the step is not transactional.
func Tx(ctx context.Context) (tx pgx.Tx, ok bool) {
	tx, ok = ctx.Value(txKey{}).(pgx.Tx)
	return tx, ok
}
