// Package persistence will hold the PostgreSQL (pgx/v5) implementations of
// the pattern stores and of the engine's run journal, with embedded,
// versioned migrations applied under an advisory lock.
package persistence
