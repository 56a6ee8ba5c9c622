package persistence

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"slices"
	"strings"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/acemq/acemq-flow/engine/journal"
)

// Acquire gives s.Holder one of its key's places in Tables.Limits, or
// parks it in Tables.LimitSlots with parked (journal.LimitStore), in one
// statement: the key's row is locked while it decides, so a waiter is
// only ever parked while every place is taken, and the release that frees
// one after it sees it. It is not batched: a handler waits for it. It
// refuses what journal.CheckSlot refuses.
func (j *SQLJournal) Acquire(ctx context.Context, s journal.Slot, parked []byte) (bool, error) {
	if err := journal.CheckSlot(s); err != nil {
		return false, err
	}
	var granted bool
	if err := j.db.QueryRow(ctx, j.limitSQL.acquire, s.Flow, s.Step, s.Holder, s.Key, s.Limit, s.RunID, parked).Scan(&granted); err != nil {
		return false, fmt.Errorf("journal: acquire a place of %s/%s key %q for %s: %w", s.Flow, s.Step, s.Key, s.Holder, err)
	}
	return granted, nil
}

// limitReq is one Release in a group's batch: its slot, and what its
// statement returned: freed says it gave a place back, waiting that its
// key has waiters.
type limitReq struct {
	slot    journal.Slot
	freed   bool
	waiting int
	err     error
}

// inKeyOrder sorts a batch by key, the order its statements lock the keys'
// rows in.
func inKeyOrder(reqs []*limitReq) {
	slices.SortStableFunc(reqs, func(a, b *limitReq) int {
		return cmp.Or(strings.Compare(a.slot.Flow, b.slot.Flow), strings.Compare(a.slot.Step, b.slot.Step), strings.Compare(a.slot.Key, b.slot.Key))
	})
}

// runBatch runs stmt for each of reqs (args gives its arguments), in key
// order, in one round trip, and scan reads each one's row into it.
func (j *SQLJournal) runBatch(ctx context.Context, reqs []*limitReq, stmt string, args func(*limitReq) []any, scan func(pgx.Row, *limitReq) error) {
	inKeyOrder(reqs)
	if len(reqs) == 1 {
		reqs[0].err = scan(j.db.QueryRow(ctx, stmt, args(reqs[0])...), reqs[0])
		return
	}
	b := &pgx.Batch{}
	for _, r := range reqs {
		b.Queue(stmt, args(r)...)
	}
	br := j.db.SendBatch(ctx, b)
	var failed error
	for _, r := range reqs {
		if failed != nil {
			r.err = failed
			continue
		}
		if r.err = scan(br.QueryRow(), r); r.err != nil && !errors.Is(r.err, pgx.ErrNoRows) {
			failed = r.err
		}
	}
	if err := br.Close(); err != nil {
		for _, r := range reqs {
			if r.err == nil || errors.Is(r.err, pgx.ErrNoRows) {
				r.err = err
			}
		}
	}
	if failed != nil {
		// One statement failed: the batch's transaction is rolled back.
		for _, r := range reqs {
			r.err = failed
		}
	}
}

// Release frees s.Holder's place and hands free places to the key's
// oldest waiters (journal.LimitStore): one statement when nobody waits;
// otherwise a second, in a transaction holding the key's row, that reads
// the waiters only once it holds it (so that it sees every waiter parked
// before). Releases issued while others are being written go together in
// one round trip (one transaction, taking the keys' rows in key order, so
// that two workers' batches never wait for each other in a circle).
func (j *SQLJournal) Release(ctx context.Context, s journal.Slot) ([][]byte, error) {
	if err := journal.CheckSlot(s); err != nil {
		return nil, err
	}
	r := &limitReq{slot: s}
	if err := j.releases.do(ctx, r, j.writeReleases); err != nil {
		return nil, err
	}
	switch {
	case errors.Is(r.err, pgx.ErrNoRows), r.err == nil && (!r.freed || r.waiting == 0):
		return nil, nil
	case r.err != nil:
		return nil, fmt.Errorf("journal: release the place of %s in %s/%s: %w", s.Holder, s.Flow, s.Step, r.err)
	}
	return j.handOut(ctx, s.Flow, s.Step, s.Key)
}

func (j *SQLJournal) writeReleases(ctx context.Context, reqs []*limitReq) {
	j.runBatch(ctx, reqs, j.limitSQL.release,
		func(r *limitReq) []any { return []any{r.slot.Flow, r.slot.Step, r.slot.Holder} },
		func(row pgx.Row, r *limitReq) error {
			var key string
			if err := row.Scan(&key, &r.waiting); err != nil {
				return err
			}
			r.freed, r.slot.Key = true, key
			return nil
		})
}

// handOut gives the free places of a key to its oldest waiters.
func (j *SQLJournal) handOut(ctx context.Context, flow, step, key string) ([][]byte, error) {
	var send [][]byte
	err := inTx(ctx, j.db, func(tx pgx.Tx) error {
		var held, lim int
		if err := tx.QueryRow(ctx, j.limitSQL.lock, flow, step, key).Scan(&held, &lim); err != nil {
			return err
		}
		rows, err := tx.Query(ctx, j.limitSQL.grant, flow, step, key, max(lim-held, 0))
		if err != nil {
			return err
		}
		send, err = pgx.CollectRows(rows, pgx.RowTo[[]byte])
		return err
	})
	if err != nil {
		return nil, fmt.Errorf("journal: hand out the free places of %s/%s key %q: %w", flow, step, key, err)
	}
	return send, nil
}

// Granted hands out again the messages of waiters handed a place more
// than age ago that have not come, hands the free places of keys with
// waiters to them (a release that stopped between its two statements),
// and forgets idle keys (journal.LimitStore).
func (j *SQLJournal) Granted(ctx context.Context, age time.Duration) ([][]byte, error) {
	rows, err := j.db.Query(ctx, j.limitSQL.again, age.Seconds())
	if err != nil {
		return nil, fmt.Errorf("journal: hand out again what waiters were given: %w", err)
	}
	send, err := pgx.CollectRows(rows, pgx.RowTo[[]byte])
	if err != nil {
		return nil, fmt.Errorf("journal: hand out again what waiters were given: %w", err)
	}
	rows, err = j.db.Query(ctx, j.limitSQL.free)
	if err != nil {
		return nil, fmt.Errorf("journal: keys with free places and waiters: %w", err)
	}
	type fsk struct{ Flow, Step, Key string }
	keys, err := pgx.CollectRows(rows, pgx.RowToStructByPos[fsk])
	if err != nil {
		return nil, fmt.Errorf("journal: keys with free places and waiters: %w", err)
	}
	for _, k := range keys {
		more, err := j.handOut(ctx, k.Flow, k.Step, k.Key)
		if err != nil {
			return send, err
		}
		send = append(send, more...)
	}
	if _, err := j.db.Exec(ctx, j.limitSQL.idle, time.Now().UnixMicro()); err != nil {
		return send, fmt.Errorf("journal: forget idle limits: %w", err)
	}
	return send, nil
}

// Unpark sends runID's waiters without a place, and takes each one out
// of its queue once it was sent (journal.LimitStore): a waiter handed a
// place meanwhile stays, and comes with it.
func (j *SQLJournal) Unpark(ctx context.Context, runID string, send func([]byte) error) error {
	rows, err := j.db.Query(ctx, j.limitSQL.waiting, runID)
	if err != nil {
		return fmt.Errorf("journal: the waiters of run %s: %w", runID, err)
	}
	type waiter struct {
		Flow, Step, Holder string
		Parked             []byte
	}
	waiters, err := pgx.CollectRows(rows, pgx.RowToStructByPos[waiter])
	if err != nil {
		return fmt.Errorf("journal: the waiters of run %s: %w", runID, err)
	}
	var errs []error
	for _, w := range waiters {
		if err := send(w.Parked); err != nil {
			errs = append(errs, err)
			continue
		}
		if _, err := j.db.Exec(ctx, j.limitSQL.unpark, w.Flow, w.Step, w.Holder); err != nil {
			errs = append(errs, fmt.Errorf("journal: unpark %s: %w", w.Holder, err))
		}
	}
	return errors.Join(errs...)
}

// Reserve gives r.Holder its turn in Tables.Rates, keeping a turn to
// come in Tables.RateTurns (journal.LimitStore), in one statement: the
// key's row is locked while its next free turn moves on, so no two
// holders get one turn.
func (j *SQLJournal) Reserve(ctx context.Context, r journal.Rate, now time.Time) (time.Time, error) {
	if err := journal.CheckRate(r); err != nil {
		return time.Time{}, err
	}
	var at int64
	if err := j.db.QueryRow(ctx, j.limitSQL.reserve, r.Flow, r.Step, r.Holder, r.Key, now.UnixMicro(), r.Interval.Microseconds()).Scan(&at); err != nil {
		return time.Time{}, fmt.Errorf("journal: reserve a turn of %s/%s key %q for %s: %w", r.Flow, r.Step, r.Key, r.Holder, err)
	}
	return time.UnixMicro(at), nil
}

// limitStatements are the LimitStore statements, rendered for its tables
// once.
type limitStatements struct {
	acquire, release, lock, grant, again, free, idle, waiting, unpark, reserve string
	// acquireWith and releaseWith are the common table expressions of
	// acquire and release, for a statement that goes on from them
	// (SQLIdempotencyStore's ClaimPlace and ConfirmReleasing).
	acquireWith, releaseWith string
}

// acquireCTEs take a place, or park a waiter: $1 flow, $2 step, $3
// holder, $4 key, $5 limit, $6 run, $7 the parked message. A holder with
// one (or handed one) keeps it (mine); otherwise the key's row, locked by
// the upsert, says whether a place is free (k's took), and the holder holds
// it or waits (a waiter that comes again keeps its turn, and takes a place
// once one is free). It was given one when mine or k's took says so.
const acquireCTEs = `
			WITH mine AS (
				UPDATE {{limit_slots}} SET state = 'h', parked = NULL, granted_at = NULL
				WHERE flow = $1 AND step = $2 AND holder = $3 AND state IN ('g', 'h')
				RETURNING 1
			), k AS (
				INSERT INTO {{limits}} AS l (flow, step, key, held, waiting, lim, took)
				SELECT $1, $2, $4, 1, 0, $5::integer, true WHERE NOT EXISTS (SELECT 1 FROM mine)
				ON CONFLICT (flow, step, key) DO UPDATE SET
					lim = $5::integer,
					took = l.held < $5::integer,
					held = l.held + CASE WHEN l.held < $5::integer THEN 1 ELSE 0 END,
					waiting = l.waiting + CASE WHEN l.held < $5::integer THEN 0 ELSE 1 END
				RETURNING took
			), ins AS (
				INSERT INTO {{limit_slots}} AS h (flow, step, holder, key, run_id, state, parked)
				SELECT $1, $2, $3, $4, $6, CASE WHEN k.took THEN 'h' ELSE 'w' END::"char", CASE WHEN k.took THEN NULL ELSE $7::bytea END
				FROM k
				ON CONFLICT (flow, step, holder) DO UPDATE SET state = 'h', parked = NULL
				WHERE excluded.state = 'h'
			)`

// releaseCTEs give a place back: $1 flow, $2 step, $3 holder. freed is
// the key's row with its waiters when the holder had the place (gone).
const releaseCTEs = `
			WITH gone AS (
				DELETE FROM {{limit_slots}}
				WHERE flow = $1 AND step = $2 AND holder = $3 AND state IN ('g', 'h')
				RETURNING key
			), freed AS (
				UPDATE {{limits}} l SET held = greatest(l.held - 1, 0)
				WHERE l.flow = $1 AND l.step = $2 AND l.key = (SELECT key FROM gone)
				RETURNING l.key, l.waiting
			)`

func renderLimitStatements(t Tables) limitStatements {
	return limitStatements{
		// acquireCTEs' $1 to $7: whether the holder has a place.
		acquire: t.render(acquireCTEs + `
			SELECT EXISTS (SELECT 1 FROM mine) OR COALESCE((SELECT took FROM k), false)`),
		acquireWith: t.render(acquireCTEs),
		// releaseCTEs' $1 to $3: the key and its waiters when the holder
		// had a place (no row otherwise).
		release:     t.render(releaseCTEs + ` SELECT key, waiting FROM freed`),
		releaseWith: t.render(releaseCTEs),
		// $1 flow, $2 step, $3 key: its places taken and its limit, locked.
		lock: t.render(`SELECT held, lim FROM {{limits}} WHERE flow = $1 AND step = $2 AND key = $3 FOR UPDATE`),
		// $1 flow, $2 step, $3 key, $4 free places: the messages of the
		// oldest waiters, now handed a place; the waiters counted anew.
		grant: t.render(`
			WITH w AS (
				SELECT holder FROM {{limit_slots}}
				WHERE flow = $1 AND step = $2 AND key = $3 AND state = 'w'
				ORDER BY seq LIMIT $4
			), g AS (
				UPDATE {{limit_slots}} h SET state = 'g', granted_at = now()
				FROM w WHERE h.flow = $1 AND h.step = $2 AND h.holder = w.holder
				RETURNING h.parked
			), u AS (
				UPDATE {{limits}} SET held = held + (SELECT count(*) FROM g),
					waiting = (SELECT count(*) FROM {{limit_slots}} WHERE flow = $1 AND step = $2 AND key = $3 AND state = 'w') - (SELECT count(*) FROM g)
				WHERE flow = $1 AND step = $2 AND key = $3
			)
			SELECT parked FROM g`),
		// $1 seconds: the messages of waiters handed a place longer ago.
		again: t.render(`
			UPDATE {{limit_slots}} SET granted_at = now()
			WHERE state = 'g' AND granted_at < now() - make_interval(secs => $1::float8)
			RETURNING parked`),
		free: t.render(`SELECT flow, step, key FROM {{limits}} WHERE waiting > 0 AND held < lim`),
		// $1 now: keys nobody holds or waits for, and rates with no turn
		// to come.
		idle: t.render(`
			WITH l AS (DELETE FROM {{limits}} WHERE held = 0 AND waiting = 0)
			DELETE FROM {{rates}} WHERE tat_us < $1`),
		// $1 run: its waiters without a place, and their messages.
		waiting: t.render(`SELECT flow, step, holder, parked FROM {{limit_slots}} WHERE run_id = $1 AND state = 'w' ORDER BY seq`),
		// $1 flow, $2 step, $3 holder: a waiter out of its queue, unless
		// it was handed a place meanwhile.
		unpark: t.render(`DELETE FROM {{limit_slots}} WHERE flow = $1 AND step = $2 AND holder = $3 AND state = 'w'`),
		// $1 flow, $2 step, $3 holder, $4 key, $5 now, $6 interval: the
		// holder's turn (both in microseconds). A turn kept for it is
		// its turn, let go once it has come; otherwise the key's next
		// free turn moves on by the interval, and a turn to come is kept.
		reserve: t.render(`
			WITH old AS (
				SELECT at_us FROM {{rate_turns}} WHERE flow = $1 AND step = $2 AND holder = $3
			), gone AS (
				DELETE FROM {{rate_turns}} WHERE flow = $1 AND step = $2 AND holder = $3 AND at_us <= $5::bigint
			), r AS (
				INSERT INTO {{rates}} AS r (flow, step, key, tat_us)
				SELECT $1, $2, $4, $5::bigint + $6::bigint WHERE NOT EXISTS (SELECT 1 FROM old)
				ON CONFLICT (flow, step, key) DO UPDATE SET tat_us = greatest(r.tat_us, $5::bigint) + $6::bigint
				RETURNING tat_us - $6::bigint AS at_us
			), ins AS (
				INSERT INTO {{rate_turns}} (flow, step, holder, at_us)
				SELECT $1, $2, $3, at_us FROM r WHERE at_us > $5::bigint
				ON CONFLICT (flow, step, holder) DO NOTHING
			)
			SELECT COALESCE((SELECT at_us FROM old), (SELECT at_us FROM r))`),
	}
}
