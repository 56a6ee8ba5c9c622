package persistence

import (
	"errors"

	"github.com/jackc/pgx/v5"
)

func isNoRows(err error) bool { return errors.Is(err, pgx.ErrNoRows) }

// ErrUnreadableRecord marks an outbox record whose stored envelope or body
// this library cannot decode (written by another version, or damaged). A
// claim gives such a record up at once (its attempts set to the maximum,
// the reason kept as its last error) instead of failing every claim after
// it; it stays for inspection.
var ErrUnreadableRecord = errors.New("unreadable outbox record")
