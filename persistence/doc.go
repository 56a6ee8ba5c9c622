// Package persistence is the PostgreSQL (pgx/v5) side of the pattern
// stores: [SQLOutboxStore], [SQLIdempotencyStore] and [SQLSchemaRegistry]
// implement the interfaces of package patterns with state that is shared
// between processes and survives a restart.
//
// # The connection is yours
//
// Every store runs on a [DB]: a *pgxpool.Pool, a *pgx.Conn or a pgx.Tx.
// The outbox's Add takes the caller's transaction explicitly and never
// opens a connection of its own, so a message becomes durable exactly when
// the work does. Statements bind every value as a parameter; the only
// caller data put into SQL text is a table name, validated as a plain
// lower-case identifier ([Tables.Validate], [ErrInvalidTableName]).
//
// # Migrations
//
// [Migrate] (or [MigrateTables] for other table names) applies the embedded,
// versioned SQL files in migrations/ that have not been applied yet, in one
// transaction under a PostgreSQL advisory lock, recording each version.
// It is idempotent and safe to run from several processes at once. In
// production the same SQL may be run by whatever migration tool owns the
// schema instead.
//
// # Leases, not locks
//
// The outbox's claims and the idempotency store's claims are leases: a
// timestamp that expires however its holder died, so a crashed relay or
// consumer costs a lease's wait and possibly a duplicate, never a message.
// Times are timestamptz, compared by the database's own clock.
//
// # Configuration
//
// Long-lived stores take a config struct whose zero value is the defaults
// (SQLOutboxStoreConfig, SQLIdempotencyStoreConfig, SQLSchemaRegistryConfig).
package persistence
