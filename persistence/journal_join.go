package persistence

import (
	"context"
	"fmt"
	"math"
	"slices"

	"github.com/jackc/pgx/v5"

	"github.com/acemq/acemq-flow/engine/journal"
)

// inlineItems and inlineItemBytes bound the items OpenJoin writes in the
// statement that opens the join (one round trip); a longer list is copied
// in (COPY) in a transaction with it, which writes 100,000 items in a
// fraction of a second.
const (
	inlineItems     = 1000
	inlineItemBytes = 1 << 20
)

// OpenJoin records the join j with its items in Tables.RunJoins and
// Tables.RunItems, once (journal.JoinStore): a join already open under
// its run and key is returned as it stands, with opened false, and items
// are ignored. The join and its items are written in one transaction, so
// nobody sees one without the other; openers racing for one join wait for
// the first to commit and get its join. It refuses what journal.CheckJoin
// refuses, and items whose count is not j.Total.
func (j *SQLJournal) OpenJoin(ctx context.Context, jn journal.Join, items [][]byte) (journal.JoinStatus, bool, error) {
	if err := journal.CheckJoin(jn); err != nil {
		return journal.JoinStatus{}, false, err
	}
	if items != nil && len(items) != jn.Total {
		return journal.JoinStatus{}, false, fmt.Errorf("%w: join %q of run %q: %d items for a total of %d",
			journal.ErrInvalidJoin, jn.Key, jn.RunID, len(items), jn.Total)
	}
	jn.Parent = slices.Clone(jn.Parent)
	opened, err := j.openJoin(ctx, jn, items)
	if err != nil {
		return journal.JoinStatus{}, false, fmt.Errorf("journal %s: open join %q of run %q: %w", j.t.RunJoins, jn.Key, jn.RunID, err)
	}
	if opened {
		return journal.JoinStatus{Join: jn, Dispatched: jn.Limit}, true, nil
	}
	// Open already: the opener that won has committed (the insert waited
	// for it), so this statement sees its join.
	st, err := j.JoinStatus(ctx, jn.RunID, jn.Key)
	return st, false, err
}

// openJoin inserts the join and its items unless the join is there, and
// says whether it did.
func (j *SQLJournal) openJoin(ctx context.Context, jn journal.Join, items [][]byte) (bool, error) {
	args := []any{jn.RunID, jn.Key, int32(jn.Total), int32(jn.Limit), jn.Parent, items}
	if inline(items) {
		var n int
		if err := j.db.QueryRow(ctx, j.joinSQL.open, args...).Scan(&n); err != nil {
			return false, err
		}
		return n == 1, nil
	}
	args[5] = nil
	var opened bool
	err := inTx(ctx, j.db, func(tx pgx.Tx) error {
		var n int
		if err := tx.QueryRow(ctx, j.joinSQL.open, args...).Scan(&n); err != nil {
			return err
		}
		if opened = n == 1; !opened {
			return nil
		}
		rows := pgx.CopyFromSlice(len(items), func(i int) ([]any, error) {
			return []any{jn.RunID, jn.Key, int32(i), items[i]}, nil
		})
		if _, err := tx.CopyFrom(ctx, pgx.Identifier{j.t.RunItems}, []string{"run_id", "join_key", "idx", "data"}, rows); err != nil {
			return fmt.Errorf("copy %d items: %w", len(items), err)
		}
		return nil
	})
	return opened, err
}

// inline says whether items go in the statement that opens their join.
func inline(items [][]byte) bool {
	if len(items) > inlineItems {
		return false
	}
	size := 0
	for _, it := range items {
		size += len(it)
	}
	return size <= inlineItemBytes
}

// JoinItems returns at most n of the join's items from index from, in
// order (journal.JoinStore), in one statement.
func (j *SQLJournal) JoinItems(ctx context.Context, runID, key string, from, n int) ([][]byte, error) {
	if err := checkJoinKey(runID, key); err != nil {
		return nil, err
	}
	var items [][]byte
	err := j.db.QueryRow(ctx, j.joinSQL.items, runID, key, int64(max(from, 0)), int64(max(n, 0))).Scan(&items)
	switch {
	case isNoRows(err):
		return nil, j.joinNotFound(runID, key)
	case err != nil:
		return nil, fmt.Errorf("journal %s: items of join %q of run %q: %w", j.t.RunItems, key, runID, err)
	case from < 0 || n < 0:
		return nil, fmt.Errorf("%w: items of join %q of run %q from %d, %d of them", journal.ErrInvalidJoin, key, runID, from, n)
	case len(items) == 0:
		return nil, nil
	}
	return items, nil
}

// FailJoin marks the join failed: no more branches are handed out
// (journal.JoinStore).
func (j *SQLJournal) FailJoin(ctx context.Context, runID, key string) error {
	if err := checkJoinKey(runID, key); err != nil {
		return err
	}
	tag, err := j.db.Exec(ctx, j.joinSQL.fail, runID, key)
	if err != nil {
		return fmt.Errorf("journal %s: fail join %q of run %q: %w", j.t.RunJoins, key, runID, err)
	}
	if tag.RowsAffected() == 0 {
		return j.joinNotFound(runID, key)
	}
	return nil
}

// Settle records how branch ended, once, and returns the decision
// journal.Decide makes of it (journal.JoinStore), with the item it hands
// out (Decision.Item). It is one statement: it
// locks the join's row, so that the settles of one join follow each other,
// inserts the branch's row with its decision unless the branch has one,
// updates the join's counts and reads the item handed out; a branch settled before gets the decision
// stored with it, and its s is ignored. The settles of one join that this
// journal is asked for while one of them is being written are written
// next, together, in one transaction. Settles of other joins do not wait
// for each other. It refuses,
// with journal.ErrInvalidJoin, a branch the join has not handed out.
func (j *SQLJournal) Settle(ctx context.Context, runID, key string, branch int, s journal.Settled) (journal.Decision, error) {
	if err := checkJoinKey(runID, key); err != nil {
		return journal.Decision{}, err
	}
	// A branch beyond 32 bits was never handed out: -1 is refused alike.
	b := int32(-1)
	if branch >= 0 && branch <= math.MaxInt32 {
		b = int32(branch)
	}
	r := &settleReq{runID: runID, key: key, branch: b, s: s}
	if err := j.settles.do(ctx, r, j.writeSettles); err != nil {
		return journal.Decision{}, fmt.Errorf("journal %s: settle branch %d of join %q of run %q: %w", j.t.RunBranches, branch, key, runID, err)
	}
	err, dispatched, prior, ins := r.err, r.row.dispatched, r.row.prior, r.row.ins
	switch {
	case isNoRows(err):
		return journal.Decision{}, j.joinNotFound(runID, key)
	case err != nil:
		return journal.Decision{}, fmt.Errorf("journal %s: settle branch %d of join %q of run %q: %w", j.t.RunBranches, branch, key, runID, err)
	case prior.next != nil:
		d := prior.decision()
		d.Item = r.row.item
		return d, nil
	case ins.next != nil:
		d := ins.decision()
		d.Item = r.row.item
		return d, nil
	case b < 0 || int(b) >= dispatched:
		return journal.Decision{}, fmt.Errorf("%w: branch %d of join %q of run %q, which handed out %d",
			journal.ErrInvalidJoin, branch, key, runID, dispatched)
	}
	// Another settle of this branch committed after this statement began
	// (a redelivery at the same moment): its decision is the branch's.
	var d journal.Decision
	err = j.db.QueryRow(ctx, j.joinSQL.decision, runID, key, b).Scan(&d.Next, &d.Last, &d.Failed)
	switch {
	case isNoRows(err):
		// Purged with its run in between.
		return journal.Decision{}, j.joinNotFound(runID, key)
	case err != nil:
		return journal.Decision{}, fmt.Errorf("journal %s: decision of branch %d of join %q of run %q: %w", j.t.RunBranches, branch, key, runID, err)
	}
	return d, nil
}

// nullDecision is a decision the settle statement may not have.
type nullDecision struct {
	next         *int
	last, failed *bool
}

func (n nullDecision) decision() journal.Decision {
	return journal.Decision{Next: *n.next, Last: *n.last, Failed: *n.failed}
}

// JoinStatus returns where the join stands, or an error matching
// journal.ErrJoinNotFound.
func (j *SQLJournal) JoinStatus(ctx context.Context, runID, key string) (journal.JoinStatus, error) {
	if err := checkJoinKey(runID, key); err != nil {
		return journal.JoinStatus{}, err
	}
	st := journal.JoinStatus{Join: journal.Join{RunID: runID, Key: key}}
	err := j.db.QueryRow(ctx, j.joinSQL.status, runID, key).
		Scan(&st.Total, &st.Limit, &st.Dispatched, &st.Arrived, &st.Stopped, &st.Failed, &st.Parent)
	switch {
	case isNoRows(err):
		return journal.JoinStatus{}, j.joinNotFound(runID, key)
	case err != nil:
		return journal.JoinStatus{}, fmt.Errorf("journal %s: join %q of run %q: %w", j.t.RunJoins, key, runID, err)
	}
	return st, nil
}

// Arrivals returns at most n settled branches from branch from on, in
// branch order (journal.JoinStore), in one statement.
func (j *SQLJournal) Arrivals(ctx context.Context, runID, key string, from, n int) ([]journal.Arrival, error) {
	if err := checkJoinKey(runID, key); err != nil {
		return nil, err
	}
	rows, err := j.db.Query(ctx, j.joinSQL.arrivals, runID, key, int64(max(from, 0)), int64(max(n, 0)))
	if err != nil {
		return nil, fmt.Errorf("journal %s: arrivals of join %q of run %q: %w", j.t.RunBranches, key, runID, err)
	}
	var (
		out   []journal.Arrival
		found bool
	)
	// One row with no branch is a join none of whose branches (from
	// from on) has settled; no row, no join.
	for rows.Next() {
		found = true
		var (
			branch *int
			ok     *bool
			a      journal.Arrival
		)
		if err := rows.Scan(&branch, &ok, &a.Output, &a.Entries); err != nil {
			rows.Close()
			return nil, fmt.Errorf("journal %s: arrivals of join %q of run %q: %w", j.t.RunBranches, key, runID, err)
		}
		if branch != nil {
			a.Branch, a.OK = *branch, *ok
			out = append(out, a)
		}
	}
	if err := rows.Err(); err != nil {
		return nil, fmt.Errorf("journal %s: arrivals of join %q of run %q: %w", j.t.RunBranches, key, runID, err)
	}
	if !found {
		return nil, j.joinNotFound(runID, key)
	}
	return out, nil
}

func (j *SQLJournal) joinNotFound(runID, key string) error {
	return fmt.Errorf("journal %s: %w: %q of run %q", j.t.RunJoins, journal.ErrJoinNotFound, key, runID)
}

// checkJoinKey refuses, as journal.CheckJoin does, a run id or join key no
// JoinStore can keep (nor PostgreSQL take as text).
func checkJoinKey(runID, key string) error {
	return journal.CheckJoin(journal.Join{RunID: runID, Key: key, Total: 1, Limit: 1})
}

// joinStatements are the JoinStore statements, rendered for its tables
// once.
type joinStatements struct{ open, items, fail, settle, decision, status, arrivals string }

func renderJoinStatements(t Tables) joinStatements {
	return joinStatements{
		// $1 run, $2 key, $3 total, $4 limit, $5 parent, $6 the items
		// (NULL: none, or copied in after): 1 when it opened the join.
		open: t.render(`
			WITH j AS (
				INSERT INTO {{run_joins}} (run_id, join_key, total, lim, dispatched, parent)
				VALUES ($1, $2, $3::integer, $4::integer, $4::integer, $5::bytea)
				ON CONFLICT (run_id, join_key) DO NOTHING
				RETURNING run_id, join_key
			), items AS (
				INSERT INTO {{run_items}} (run_id, join_key, idx, data)
				SELECT j.run_id, j.join_key, i.ord - 1, i.data
				FROM j CROSS JOIN unnest($6::bytea[]) WITH ORDINALITY AS i(data, ord)
			)
			SELECT count(*) FROM j`),
		// $3 from, $4 how many: one row (the page) if the join is there.
		items: t.render(`
			SELECT (SELECT array_agg(p.data ORDER BY p.idx) FROM (
				SELECT i.idx, i.data FROM {{run_items}} i
				WHERE i.run_id = $1 AND i.join_key = $2 AND i.idx >= $3::bigint
				ORDER BY i.idx LIMIT $4::bigint) AS p)
			FROM {{run_joins}} WHERE run_id = $1 AND join_key = $2`),
		fail: t.render(`UPDATE {{run_joins}} SET failed = true WHERE run_id = $1 AND join_key = $2`),
		// $3 branch, $4 ok, $5 output, $6 entries. No row: no join. The
		// decision stored before this statement's snapshot (prior), or the
		// one it made (ins), or neither: a branch not handed out, or one a
		// concurrent settle stored after the snapshot (the insert found
		// its row; the join row lock made this statement wait for it).
		// The join is updated only when the branch row was inserted.
		settle: t.render(`
			WITH j AS (
				SELECT total, dispatched, arrived, stopped, failed FROM {{run_joins}}
				WHERE run_id = $1 AND join_key = $2
				FOR UPDATE
			), prior AS (
				SELECT next, last, failed FROM {{run_branches}}
				WHERE run_id = $1 AND join_key = $2 AND branch = $3::integer
			), d AS (
				-- journal.Decide, on the join as its lock found it.
				SELECT j.arrived + CASE WHEN $4::boolean THEN 1 ELSE 0 END AS arrived,
					j.stopped + CASE WHEN $4::boolean THEN 0 ELSE 1 END AS stopped,
					j.failed,
					CASE WHEN h.hand THEN j.dispatched ELSE -1 END AS next,
					j.dispatched + CASE WHEN h.hand THEN 1 ELSE 0 END AS dispatched
				FROM j CROSS JOIN LATERAL (SELECT $4::boolean AND NOT j.failed AND j.dispatched < j.total AS hand) AS h
				WHERE $3::integer >= 0 AND $3::integer < j.dispatched AND NOT EXISTS (SELECT FROM prior)
			), ins AS (
				INSERT INTO {{run_branches}} (run_id, join_key, branch, ok, output, entries, next, last, failed)
				SELECT $1, $2, $3::integer, $4::boolean, $5::bytea, $6::bytea, d.next, d.arrived + d.stopped = d.dispatched, d.failed
				FROM d
				ON CONFLICT (run_id, join_key, branch) DO NOTHING
				RETURNING next, last, failed
			), upd AS (
				UPDATE {{run_joins}} r SET dispatched = d.dispatched, arrived = d.arrived, stopped = d.stopped
				FROM d, ins WHERE r.run_id = $1 AND r.join_key = $2
			)
			SELECT j.dispatched, p.next, p.last, p.failed, i.next, i.last, i.failed,
				-- The item the decision hands out, read here rather than
				-- in a round trip of its own.
				(SELECT it.data FROM {{run_items}} it
				 WHERE it.run_id = $1 AND it.join_key = $2 AND it.idx = coalesce(p.next, i.next))
			FROM j LEFT JOIN prior p ON true LEFT JOIN ins i ON true`),
		decision: t.render(`SELECT next, last, failed FROM {{run_branches}} WHERE run_id = $1 AND join_key = $2 AND branch = $3`),
		status: t.render(`SELECT total, lim, dispatched, arrived, stopped, failed, parent FROM {{run_joins}}
			WHERE run_id = $1 AND join_key = $2`),
		// $3 from, $4 how many: a row with a NULL branch when none
		// settled; no row when there is no join.
		arrivals: t.render(`
			SELECT a.branch, a.ok, a.output, a.entries
			FROM {{run_joins}} j LEFT JOIN LATERAL (
				SELECT b.branch, b.ok, b.output, b.entries FROM {{run_branches}} b
				WHERE b.run_id = j.run_id AND b.join_key = j.join_key AND b.branch >= $3::bigint
				ORDER BY b.branch LIMIT $4::bigint) a ON true
			WHERE j.run_id = $1 AND j.join_key = $2
			ORDER BY a.branch`),
	}
}
