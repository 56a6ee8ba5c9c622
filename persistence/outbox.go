package persistence

import (
	"context"
	"fmt"
	"strconv"
	"strings"
	"time"
	"unicode/utf8"

	"github.com/jackc/pgx/v5"

	"github.com/acemq/acemq-flow/broker"
	"github.com/acemq/acemq-flow/patterns"
)

// SQLOutboxStoreConfig configures a SQLOutboxStore. The zero value is the
// defaults.
type SQLOutboxStoreConfig struct {
	// Tables names the tables (only Outbox is used here).
	Tables Tables
	// Lease is how long a claim on records lasts (0 =
	// patterns.DefaultOutboxLease). A relay that dies mid-batch is taken
	// over once it runs out. A live relay renews the leases it holds every
	// Lease/3 (patterns.OutboxLeaseExtender), so a batch may take longer
	// than a lease without being taken over.
	Lease time.Duration
	// MaxAttempts is how many refused publishes a record gets before it is
	// no longer claimed (0 = patterns.DefaultOutboxMaxAttempts).
	MaxAttempts int
	// Listen opens the dedicated connection Listen holds for LISTEN (nil:
	// one is taken out of the relay pool when the store's db is a
	// *pgxpool.Pool; otherwise the store cannot listen and relays poll).
	Listen func(ctx context.Context) (*pgx.Conn, error)
}

// SQLOutboxStore is the outbox in PostgreSQL, and the one that closes the
// gap the pattern exists for: Add runs on the caller's transaction, so the
// message becomes durable exactly when the work does, and a transaction
// that rolls back leaves no record.
//
// The relay's own work (claiming, marking, counting) runs on the db given
// to NewSQLOutboxStore, which must not be a connection a request is using:
// under a pool, the pool. Claims are leases, not locks: a lease is a
// timestamp that expires however its holder died, where a held lock would
// either strand rows or keep a transaction open across a network publish.
// Each claim is decided by the UPDATE's row count, never by the SELECT that
// found the candidates, so two relays never both win a record; claims are
// also serialised by an advisory lock and only the oldest records before
// the first live lease are claimable, so one relay at a time publishes and
// the others stand by (see patterns.OutboxRelay for the order this gives).
//
// Records are removed when published. MarkFailed counts a refused attempt
// and releases the lease; a record refused MaxAttempts times is no longer
// claimed and stays, with its last error, for somebody to inspect (Stats,
// Exhausted) — the records after it then go ahead. Order is by id, which
// is the order records were added: a record whose transaction commits late
// may be published after a record added later that committed earlier.
//
// A store instance is one claimant: give each relay its own.
type SQLOutboxStore struct {
	db          DB
	t           Tables
	sql         outboxStatements
	lease       time.Duration
	maxAttempts int
	listen      func(ctx context.Context) (*pgx.Conn, error)
	owner       string
}

// NewSQLOutboxStore returns a store whose relay work runs on db. It
// refuses a nil db, invalid table names and negative settings.
func NewSQLOutboxStore(db DB, cfg SQLOutboxStoreConfig) (*SQLOutboxStore, error) {
	if db == nil {
		return nil, fmt.Errorf("%w: outbox store: nil db", broker.ErrInvalidOption)
	}
	t, err := cfg.Tables.checked()
	if err != nil {
		return nil, err
	}
	if cfg.Lease < 0 || cfg.MaxAttempts < 0 {
		return nil, fmt.Errorf("%w: outbox store: negative lease or max attempts", broker.ErrInvalidOption)
	}
	s := &SQLOutboxStore{db: db, t: t, sql: renderOutboxStatements(t), lease: cfg.Lease, maxAttempts: cfg.MaxAttempts, listen: cfg.Listen, owner: broker.NewID()}
	if s.lease == 0 {
		s.lease = patterns.DefaultOutboxLease
	}
	if s.maxAttempts == 0 {
		s.maxAttempts = patterns.DefaultOutboxMaxAttempts
	}
	return s, nil
}

// Add inserts rec on tx — the caller's transaction, never a connection of
// the store's own — and returns its id; it neither commits nor closes tx.
// It also notifies the relay's listener, which PostgreSQL delivers only if
// and when tx commits. Given a pool, or a connection outside a transaction,
// the record commits on its own at once, apart from the work it announces,
// which is the gap the outbox exists to close: pass the transaction that
// holds that work. A record with neither exchange nor routing key is
// refused (patterns.ErrInvalidOutboxRecord).
func (s *SQLOutboxStore) Add(ctx context.Context, tx DB, rec patterns.OutboxRecord) (string, error) {
	if tx == nil {
		return "", fmt.Errorf("%w: outbox add: nil transaction", broker.ErrInvalidOption)
	}
	if rec.Exchange == "" && rec.RoutingKey == "" {
		return "", fmt.Errorf("%w: no exchange and no routing key", patterns.ErrInvalidOutboxRecord)
	}
	env, err := rec.Outgoing.MarshalEnvelope()
	if err != nil {
		return "", fmt.Errorf("%w: %w", patterns.ErrInvalidOutboxRecord, err)
	}
	body, enc := encodeBody(rec.Message.Body)
	var id int64
	err = tx.QueryRow(ctx, s.sql.add,
		pgText(rec.Exchange), pgText(rec.RoutingKey), pgText(rec.Message.MessageID), env, body, enc, s.t.Outbox).Scan(&id)
	if err != nil {
		return "", fmt.Errorf("outbox add to %s: %w", s.t.Outbox, err)
	}
	return strconv.FormatInt(id, 10), nil
}

// pgText is s as a text column can hold it, for columns kept for people to
// read (the exact value is in the envelope).
func pgText(s string) string {
	return strings.ReplaceAll(strings.ToValidUTF8(s, "\uFFFD"), "\x00", "\uFFFD")
}

func parseOutboxIDs(ids []string) ([]int64, error) {
	out := make([]int64, len(ids))
	for i, id := range ids {
		n, err := strconv.ParseInt(id, 10, 64)
		if err != nil {
			return nil, fmt.Errorf("%w: id %q is not one of this store's", patterns.ErrInvalidOutboxRecord, id)
		}
		out[i] = n
	}
	return out, nil
}

// errorText is what last_error keeps of a publish failure.
func errorText(err error) string {
	if err == nil {
		return ""
	}
	s := pgText(err.Error())
	const limit = 2000
	if len(s) > limit {
		s = s[:limit]
		for !utf8.ValidString(s) {
			s = s[:len(s)-1]
		}
	}
	return s
}
