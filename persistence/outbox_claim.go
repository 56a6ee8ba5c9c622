package persistence

import (
	"context"
	"fmt"
	"slices"
	"strconv"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/acemq/acemq-flow/broker"
	"github.com/acemq/acemq-flow/patterns"
)

// Pending claims up to limit records (every claimable one when limit <= 0)
// for this store under a lease, oldest first, and returns what the claim
// won. Claimable are records with attempts left, older than the first
// record anybody holds under a live lease, whose own lease is free.
func (s *SQLOutboxStore) Pending(ctx context.Context, limit int) ([]patterns.OutboxRecord, error) {
	return s.claim(ctx, limit, nil)
}

// PendingAfter claims like Pending, except that the records in held (the
// caller's current batch, claimed by this store and not yet settled)
// neither stop the claim nor are claimed again: it claims the batch after
// them (patterns.OutboxLookahead). Every other live lease, this store's own
// included, still stops it.
func (s *SQLOutboxStore) PendingAfter(ctx context.Context, held []string, limit int) ([]patterns.OutboxRecord, error) {
	ids, err := parseOutboxIDs(held)
	if err != nil {
		return nil, err
	}
	return s.claim(ctx, limit, ids)
}

// claim is Pending and PendingAfter: held are ids that neither stop the
// claim nor are claimed.
func (s *SQLOutboxStore) claim(ctx context.Context, limit int, held []int64) ([]patterns.OutboxRecord, error) {
	var lim *int64
	if limit > 0 {
		n := int64(limit)
		lim = &n
	}
	if held == nil {
		held = []int64{}
	}
	var out []patterns.OutboxRecord
	err := inTx(ctx, s.db, func(tx pgx.Tx) error {
		// Claimers queue here, so the first-live-lease rule below sees every
		// lease committed before it (the next statement's snapshot is taken
		// after the lock is granted).
		if _, err := tx.Exec(ctx, `SELECT pg_advisory_xact_lock(hashtextextended($1, 0))`, "acemq-flow outbox "+s.t.Outbox); err != nil {
			return fmt.Errorf("take the claim lock: %w", err)
		}
		// The sub-select finds the candidates; the UPDATE's own condition,
		// checked against each row's latest version, decides what is won.
		rows, err := tx.Query(ctx, s.sql.claim,
			s.owner, s.lease.Seconds(), s.maxAttempts, lim, held)
		if err != nil {
			return fmt.Errorf("claim records: %w", err)
		}
		raw, err := pgx.CollectRows(rows, scanOutboxRow)
		if err != nil {
			return fmt.Errorf("claim records: %w", err)
		}
		out = make([]patterns.OutboxRecord, 0, len(raw))
		for _, row := range raw {
			rec, err := row.record()
			if err == nil {
				out = append(out, rec)
				continue
			}
			// A row this library cannot read (written by another version,
			// or damaged) would fail every claim after it: it is given up
			// at once and stays for inspection, as a poison record does.
			if _, err := tx.Exec(ctx, s.sql.giveUp, row.id, s.maxAttempts, errorText(err)); err != nil {
				return fmt.Errorf("give up unreadable record %d: %w", row.id, err)
			}
		}
		return nil
	})
	if err != nil {
		return nil, fmt.Errorf("outbox %s: pending: %w", s.t.Outbox, err)
	}
	slices.SortFunc(out, func(a, b patterns.OutboxRecord) int { return outboxIDOrder(a.ID, b.ID) })
	return out, nil
}

func outboxIDOrder(a, b string) int {
	x, _ := strconv.ParseInt(a, 10, 64)
	y, _ := strconv.ParseInt(b, 10, 64)
	switch {
	case x < y:
		return -1
	case x > y:
		return 1
	}
	return 0
}

// outboxRow is a row as stored, before its envelope and body are decoded.
type outboxRow struct {
	id                  int64
	env, body, encoding string
	attempts            int32
	lastError           string
	created             time.Time
}

func scanOutboxRow(row pgx.CollectableRow) (outboxRow, error) {
	var r outboxRow
	err := row.Scan(&r.id, &r.env, &r.body, &r.encoding, &r.attempts, &r.lastError, &r.created)
	return r, err
}

// record decodes the row; the error says why it cannot be published.
func (r outboxRow) record() (patterns.OutboxRecord, error) {
	rec := patterns.OutboxRecord{
		ID:        strconv.FormatInt(r.id, 10),
		Attempts:  int(r.attempts),
		LastError: r.lastError,
		CreatedAt: r.created,
	}
	out, err := broker.UnmarshalEnvelope(r.env)
	if err != nil {
		return rec, fmt.Errorf("%w: record %d: %w", ErrUnreadableRecord, r.id, err)
	}
	out.Message.Body, err = decodeBody(r.body, r.encoding)
	if err != nil {
		return rec, fmt.Errorf("%w: record %d: %w", ErrUnreadableRecord, r.id, err)
	}
	out.Mandatory = true
	rec.Outgoing = out
	return rec, nil
}

// MarkPublished removes the records with the given ids: the broker has
// confirmed them.
func (s *SQLOutboxStore) MarkPublished(ctx context.Context, ids ...string) error {
	n, err := parseOutboxIDs(ids)
	if err != nil || len(n) == 0 {
		return err
	}
	if _, err := s.db.Exec(ctx, s.sql.markPublished, n); err != nil {
		return fmt.Errorf("outbox %s: mark published: %w", s.t.Outbox, err)
	}
	return nil
}

// MarkFailed counts one refused attempt of the record, keeps cause as its
// last error, and releases its lease. It does nothing to a record whose
// lease this store no longer holds: another relay took it over.
func (s *SQLOutboxStore) MarkFailed(ctx context.Context, id string, cause error) error {
	n, err := parseOutboxIDs([]string{id})
	if err != nil {
		return err
	}
	_, err = s.db.Exec(ctx, s.sql.markFailed, n[0], errorText(cause), s.owner)
	if err != nil {
		return fmt.Errorf("outbox %s: mark %s failed: %w", s.t.Outbox, id, err)
	}
	return nil
}

// Release gives up this store's leases on the given records without
// counting an attempt; another claimant's leases are left alone.
func (s *SQLOutboxStore) Release(ctx context.Context, ids ...string) error {
	n, err := parseOutboxIDs(ids)
	if err != nil || len(n) == 0 {
		return err
	}
	_, err = s.db.Exec(ctx, s.sql.release, n, s.owner)
	if err != nil {
		return fmt.Errorf("outbox %s: release: %w", s.t.Outbox, err)
	}
	return nil
}

// Lease is how long a claim of this store lasts.
func (s *SQLOutboxStore) Lease() time.Duration { return s.lease }

// Extend renews this store's leases on the given records for another Lease
// (patterns.OutboxLeaseExtender); records another claimant took over, or
// that are gone, are left alone.
func (s *SQLOutboxStore) Extend(ctx context.Context, ids ...string) error {
	n, err := parseOutboxIDs(ids)
	if err != nil || len(n) == 0 {
		return err
	}
	if _, err := s.db.Exec(ctx, s.sql.extend, n, s.owner, s.lease.Seconds()); err != nil {
		return fmt.Errorf("outbox %s: extend leases: %w", s.t.Outbox, err)
	}
	return nil
}

// OutboxStats counts an outbox's records.
type OutboxStats struct {
	// Pending records still have attempts left.
	Pending int64
	// Exhausted records were refused MaxAttempts times and are no longer
	// claimed.
	Exhausted int64
}

// Stats counts the records waiting and the records given up.
func (s *SQLOutboxStore) Stats(ctx context.Context) (OutboxStats, error) {
	var st OutboxStats
	err := s.db.QueryRow(ctx, s.t.render(`
		SELECT count(*) FILTER (WHERE attempts < $1), count(*) FILTER (WHERE attempts >= $1) FROM {{outbox}}`),
		s.maxAttempts).Scan(&st.Pending, &st.Exhausted)
	if err != nil {
		return OutboxStats{}, fmt.Errorf("outbox %s: stats: %w", s.t.Outbox, err)
	}
	return st, nil
}

// Records reads up to limit records (all when limit <= 0) in order without
// claiming them, given-up ones included: what somebody inspecting the
// outbox looks at. A record this library cannot read (see
// ErrUnreadableRecord) is listed with its id, attempts, last error and
// time, and no message.
func (s *SQLOutboxStore) Records(ctx context.Context, limit int) ([]patterns.OutboxRecord, error) {
	var lim *int64
	if limit > 0 {
		n := int64(limit)
		lim = &n
	}
	rows, err := s.db.Query(ctx, s.t.render(`
		SELECT id, envelope, body, body_encoding, attempts, coalesce(last_error, ''), created_at
		FROM {{outbox}} ORDER BY id LIMIT $1`), lim)
	if err != nil {
		return nil, fmt.Errorf("outbox %s: records: %w", s.t.Outbox, err)
	}
	raw, err := pgx.CollectRows(rows, scanOutboxRow)
	if err != nil {
		return nil, fmt.Errorf("outbox %s: records: %w", s.t.Outbox, err)
	}
	recs := make([]patterns.OutboxRecord, len(raw))
	for i, row := range raw {
		recs[i], _ = row.record()
	}
	return recs, nil
}

// outboxStatements are the store's statements, rendered for its tables
// once rather than on every call.
type outboxStatements struct {
	add, claim, giveUp, extend, markPublished, markFailed, release string
}

func renderOutboxStatements(t Tables) outboxStatements {
	return outboxStatements{
		add: t.render(`
			WITH ins AS (
				INSERT INTO {{outbox}} (exchange, routing_key, message_id, envelope, body, body_encoding)
				VALUES ($1, $2, $3, $4, $5, $6) RETURNING id)
			SELECT ins.id FROM ins, pg_notify($7, '') AS n`),
		claim: t.render(`
			UPDATE {{outbox}} SET lease_owner = $1, lease_until = statement_timestamp() + $2 * interval '1 second'
			WHERE id IN (
				SELECT id FROM {{outbox}}
				WHERE attempts < $3 AND id <> ALL($5)
				  AND id < COALESCE((SELECT min(id) FROM {{outbox}} WHERE lease_until > statement_timestamp() AND attempts < $3 AND id <> ALL($5)), 9223372036854775807)
				ORDER BY id LIMIT $4)
			  AND (lease_until IS NULL OR lease_until <= statement_timestamp())
			RETURNING id, envelope, body, body_encoding, attempts, coalesce(last_error, ''), created_at`),
		giveUp: t.render(`
			UPDATE {{outbox}} SET attempts = greatest(attempts, $2), last_error = $3, lease_owner = NULL, lease_until = NULL
			WHERE id = $1`),
		extend: t.render(`
			UPDATE {{outbox}} SET lease_until = statement_timestamp() + $3 * interval '1 second'
			WHERE id = ANY($1) AND lease_owner = $2`),
		markPublished: t.render(`DELETE FROM {{outbox}} WHERE id = ANY($1)`),
		markFailed: t.render(`
			UPDATE {{outbox}} SET attempts = attempts + 1, last_error = $2, lease_owner = NULL, lease_until = NULL
			WHERE id = $1 AND lease_owner = $3`),
		release: t.render(`
			UPDATE {{outbox}} SET lease_owner = NULL, lease_until = NULL
			WHERE id = ANY($1) AND lease_owner = $2`),
	}
}
