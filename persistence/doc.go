// Package persistence is the PostgreSQL (pgx/v5) side of the pattern
// stores: [SQLOutboxStore], [SQLIdempotencyStore] and [SQLSchemaRegistry]
// implement the interfaces of package patterns with state that is shared
// between processes and survives a restart, and [SQLJournal] is the
// engine's run journal.
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
// # The run journal
//
// [SQLJournal] is the engine's run journal (journal.Journal) shared by
// every worker of a database: a row per run and a row per timeline entry,
// applied by the journal package's rules, so that it passes the same
// conformance suite (journaltest) as journal.Memory. [SQLJournal.Record]
// writes a batch in one statement that locks runs in id order, so workers
// recording the same runs at once neither deadlock nor take a run back;
// listing runs reads one index range per status asked for (newest first,
// or soonest due first among the runs with a due time), and finding the
// runs whose id begins with a prefix reads one range of the primary key.
// It keeps runs' joins too (journal.JoinStore, the branches of a
// Parallel or a ForEach coming back together): a row per join, per settled
// branch and per item, a long list of items copied in; a settle is one
// statement that locks its join's row, so that every worker agrees on
// which branch was handed out, and which arrived last, once, and a
// redelivered settle gets the decision the first one made. Nothing deletes
// runs but [SQLJournal.PurgeEnded], run by whoever wants retention, in
// small batches; a run's data and joins go with it.
//
// # Configuration
//
// Long-lived stores take a config struct whose zero value is the defaults
// (SQLOutboxStoreConfig, SQLIdempotencyStoreConfig, SQLSchemaRegistryConfig,
// SQLJournalConfig).
package persistence
