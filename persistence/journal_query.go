package persistence

import (
	"context"
	"encoding/json"
	"fmt"
	"slices"
	"strings"
	"time"
	"unicode"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgtype"

	"github.com/acemq/acemq-flow/engine/journal"
)

// Run returns one run, or an error matching journal.ErrRunNotFound. The
// runs asked for at once are read in one statement (a group: see group),
// as every start under a run id of its own asks for one.
func (j *SQLJournal) Run(ctx context.Context, id string) (journal.Run, error) {
	r := &runReq{id: id}
	if err := j.lookups.do(ctx, r, j.readRuns); err != nil {
		return journal.Run{}, fmt.Errorf("journal %s: run %q: %w", j.t.Runs, id, err)
	}
	switch {
	case r.err != nil:
		return journal.Run{}, fmt.Errorf("journal %s: run %q: %w", j.t.Runs, id, r.err)
	case r.run == nil:
		return journal.Run{}, fmt.Errorf("journal %s: %w: %q", j.t.Runs, journal.ErrRunNotFound, id)
	}
	return *r.run, nil
}

// runReq is one Run in a group: the id asked for, and once read the run
// (nil when there is none).
type runReq struct {
	id  string
	run *journal.Run
	err error
}

// readRuns reads the runs reqs ask for in one statement.
func (j *SQLJournal) readRuns(ctx context.Context, reqs []*runReq) {
	ids := make([]string, len(reqs))
	for i, r := range reqs {
		ids[i] = r.id
	}
	rows, err := j.db.Query(ctx, j.sql.runs, ids)
	var runs []journal.Run
	if err == nil {
		runs, err = pgx.CollectRows(rows, scanRun)
	}
	byID := make(map[string]*journal.Run, len(runs))
	for i := range runs {
		byID[runs[i].ID] = &runs[i]
	}
	for _, r := range reqs {
		r.run, r.err = byID[r.id], err
	}
}

// Runs returns the runs q selects, in q.Order: newest first (by start,
// then run id), or with journal.SoonestDue the runs with a due time, by
// due time, then run id; at most q.Limit (journal.DefaultLimit when 0 or
// less). ErrorContains is matched case-insensitively by the database's
// ILIKE, its % and _ taken literally. A Where, a BusinessKey or an
// IDPrefix is answered by a statement of its own (see search).
func (j *SQLJournal) Runs(ctx context.Context, q journal.Query) ([]journal.Run, error) {
	if searching(q) {
		return j.search(ctx, q)
	}
	limit := q.Limit
	if limit <= 0 {
		limit = journal.DefaultLimit
	}
	// Every status when none is asked for: each listing then walks one
	// index range per status, newest first, rather than sorting them all.
	statuses := journal.Statuses()
	if len(q.Statuses) > 0 {
		statuses = statuses[:0]
		for _, s := range q.Statuses {
			if !slices.Contains(statuses, s) {
				statuses = append(statuses, s)
			}
		}
	}
	names := make([]string, len(statuses))
	for i, s := range statuses {
		names[i] = string(s)
	}
	since := pgtype.Timestamptz{Valid: true, InfinityModifier: pgtype.NegativeInfinity}
	if !q.Since.IsZero() {
		since = pgtype.Timestamptz{Valid: true, Time: q.Since}
	}
	before := pgtype.Timestamptz{Valid: true, InfinityModifier: pgtype.Infinity}
	if !q.Before.IsZero() {
		before = pgtype.Timestamptz{Valid: true, Time: q.Before}
	}
	args := []any{names, since, before, limit}
	var shape int
	if q.Flow != "" {
		shape |= listByFlow
		args = append(args, q.Flow)
	}
	if q.Version != "" {
		shape |= listByVersion
		args = append(args, q.Version)
	}
	if q.ErrorContains != "" {
		shape |= listByError
		args = append(args, "%"+likeEscaper.Replace(q.ErrorContains)+"%")
	}
	if q.Order == journal.SoonestDue {
		shape |= listByDue
	}
	rows, err := j.db.Query(ctx, j.sql.list[shape], args...)
	if err != nil {
		return nil, fmt.Errorf("journal %s: runs: %w", j.t.Runs, err)
	}
	runs, err := pgx.CollectRows(rows, scanRun)
	if err != nil {
		return nil, fmt.Errorf("journal %s: runs: %w", j.t.Runs, err)
	}
	return runs, nil
}

// CancelledSince returns the runs cancelled at or after since, those that
// ended first first, at most limit (journal.CancelFeed): one range of the
// index of ended runs, so a worker asking every quarter second reads
// what ended since it last asked.
func (j *SQLJournal) CancelledSince(ctx context.Context, since time.Time, limit int) ([]journal.Run, error) {
	if limit <= 0 {
		limit = journal.DefaultLimit
	}
	rows, err := j.db.Query(ctx, j.sql.cancelled, since, limit)
	if err != nil {
		return nil, fmt.Errorf("journal %s: runs cancelled since %s: %w", j.t.Runs, since.Format(time.RFC3339), err)
	}
	runs, err := pgx.CollectRows(rows, scanRun)
	if err != nil {
		return nil, fmt.Errorf("journal %s: runs cancelled since %s: %w", j.t.Runs, since.Format(time.RFC3339), err)
	}
	return runs, nil
}

// RunsByIDPrefix returns the runs whose id begins with prefix, in id
// order (by bytes, as the column's "C" collation sorts), at most limit
// (journal.DefaultLimit when 0 or less). It reads one range of the
// primary key, from prefix to the least text above every text that
// begins with it, so a short prefix costs no more than its limit. A
// prefix that is not UTF-8 text without NUL bytes begins no run's id.
func (j *SQLJournal) RunsByIDPrefix(ctx context.Context, prefix string, limit int) ([]journal.Run, error) {
	if limit <= 0 {
		limit = journal.DefaultLimit
	}
	if !journal.Text(prefix) {
		return []journal.Run{}, nil
	}
	stmt, args := j.sql.prefix, []any{prefix, limit}
	if end, ok := prefixEnd(prefix); ok {
		stmt, args = j.sql.prefixBounded, append(args, end)
	}
	rows, err := j.db.Query(ctx, stmt, args...)
	if err != nil {
		return nil, fmt.Errorf("journal %s: runs whose id begins with %q: %w", j.t.Runs, prefix, err)
	}
	runs, err := pgx.CollectRows(rows, scanRun)
	if err != nil {
		return nil, fmt.Errorf("journal %s: runs whose id begins with %q: %w", j.t.Runs, prefix, err)
	}
	return runs, nil
}

// prefixEnd is the least text above every text that begins with prefix,
// in byte order (for UTF-8, the order of code points): prefix with its
// last rune made the next one, surrogates skipped, after dropping
// trailing U+10FFFF runes, which have no next. There is none (false) for
// "" and a prefix of U+10FFFF runes only. prefix is valid UTF-8.
func prefixEnd(prefix string) (string, bool) {
	r := []rune(prefix)
	for i := len(r) - 1; i >= 0; i-- {
		if r[i] == unicode.MaxRune {
			continue
		}
		next := r[i] + 1
		if next >= surrogateMin && next <= surrogateMax {
			next = surrogateMax + 1
		}
		return string(r[:i]) + string(next), true
	}
	return "", false
}

// The UTF-16 surrogates, which are not runes of UTF-8 text.
const (
	surrogateMin = 0xd800
	surrogateMax = 0xdfff
)

// likeEscaper makes a text match itself in a LIKE pattern (backslash is
// LIKE's default escape).
var likeEscaper = strings.NewReplacer(`\`, `\\`, `%`, `\%`, `_`, `\_`)

// Timeline returns a run's events in journal.SortTimeline's order, or an
// error matching journal.ErrRunNotFound. Each event carries what was
// recorded except Input, which is kept once, on the run.
func (j *SQLJournal) Timeline(ctx context.Context, id string) ([]journal.Event, error) {
	events, err := j.events(ctx, id, j.sql.timeline, id)
	if err != nil {
		return nil, err
	}
	return j.found(ctx, id, events)
}

// events reads the events stmt (in eventColumns) returns of run id.
func (j *SQLJournal) events(ctx context.Context, id, stmt string, args ...any) ([]journal.Event, error) {
	rows, err := j.db.Query(ctx, stmt, args...)
	if err != nil {
		return nil, fmt.Errorf("journal %s: timeline of %q: %w", j.t.RunEvents, id, err)
	}
	events, err := pgx.CollectRows(rows, func(row pgx.CollectableRow) (journal.Event, error) {
		e := journal.Event{RunID: id}
		var kind, status string
		err := row.Scan(&e.Flow, &e.Key, &e.Seq, &kind, &e.Step, &e.Attempt, &e.Outcome, &e.StartedAt, &e.EndedAt,
			&e.Error, &e.Queue, &e.DueAt, &status, &e.RunStep, &e.Replays, &e.DeadLetter)
		e.Kind, e.Status = journal.Kind(kind), journal.Status(status)
		e.StartedAt, e.EndedAt, e.DueAt = e.StartedAt.UTC(), e.EndedAt.UTC(), utcPtr(e.DueAt)
		return e, err
	})
	if err != nil {
		return nil, fmt.Errorf("journal %s: timeline of %q: %w", j.t.RunEvents, id, err)
	}
	return events, nil
}

// BriefTimeline returns a run's events as Timeline does, but its
// branches' (keys "branch/...", "arrived/...") with only their key, kind,
// step, outcome and seq, unordered (journal.BriefTimeline): two statements, the
// run's own events whole and in order, then the branches' brief, each one
// range of the primary key.
func (j *SQLJournal) BriefTimeline(ctx context.Context, id string) ([]journal.Event, error) {
	events, err := j.events(ctx, id, j.sql.ownTimeline, id)
	if err != nil {
		return nil, err
	}
	rows, err := j.db.Query(ctx, j.sql.briefBranches, id)
	if err != nil {
		return nil, fmt.Errorf("journal %s: branches of %q: %w", j.t.RunEvents, id, err)
	}
	// Read small, then made events once: a slice of events grown row by
	// row copies itself over and over (a ForEach of 100,000 items has
	// 200,000 of them).
	type brief struct {
		key, kind, step, outcome string
		seq                      int64
	}
	var briefs []brief
	var b brief
	_, err = pgx.ForEachRow(rows, []any{&b.key, &b.kind, &b.step, &b.outcome, &b.seq}, func() error {
		briefs = append(briefs, b)
		return nil
	})
	if err != nil {
		return nil, fmt.Errorf("journal %s: branches of %q: %w", j.t.RunEvents, id, err)
	}
	events = slices.Grow(events, len(briefs))
	for _, b := range briefs {
		events = append(events, journal.Event{RunID: id, Key: b.key, Kind: journal.Kind(b.kind), Step: b.step, Outcome: b.outcome, Seq: b.seq})
	}
	return j.found(ctx, id, events)
}

// BranchEvents returns the whole events of the named branches of run id,
// in Timeline's order (journal.BriefTimeline): one statement that reads,
// per branch, the range of its steps' keys and its arrival's key, and the
// run's compensations for those of the branches.
func (j *SQLJournal) BranchEvents(ctx context.Context, id string, branches []journal.BranchRef) ([]journal.Event, error) {
	if len(branches) == 0 {
		return []journal.Event{}, nil
	}
	lo, hi, arrived, undo := make([]string, 0, len(branches)), make([]string, 0, len(branches)), make([]string, 0, len(branches)), make([]string, 0, len(branches))
	for _, b := range branches {
		at := fmt.Sprintf("%s/%d", b.Join, b.Branch)
		// "/" + 1 is "0": every key under the prefix is below it.
		lo, hi = append(lo, "branch/"+at+"/"), append(hi, "branch/"+at+"0")
		arrived = append(arrived, "arrived/"+at)
		undo = append(undo, "compensation/%/"+likeEscaper.Replace(at)+"/%")
	}
	return j.events(ctx, id, j.sql.branchEvents, id, lo, hi, arrived, undo)
}

// StepInputs returns the latest input kept of each step of run id
// (journal.StepInputs), in Seq order, or an error matching
// journal.ErrRunNotFound.
func (j *SQLJournal) StepInputs(ctx context.Context, id string) ([]journal.StepInput, error) {
	rows, err := j.db.Query(ctx, j.sql.inputs, id)
	if err != nil {
		return nil, fmt.Errorf("journal %s: step inputs of %q: %w", j.t.RunEvents, id, err)
	}
	inputs, err := pgx.CollectRows(rows, func(row pgx.CollectableRow) (journal.StepInput, error) {
		var in journal.StepInput
		err := row.Scan(&in.Step, &in.Key, &in.Seq, &in.Replays, &in.Attempt, &in.At, &in.Input, &in.State, &in.Size)
		in.At = in.At.UTC()
		return in, err
	})
	if err != nil {
		return nil, fmt.Errorf("journal %s: step inputs of %q: %w", j.t.RunEvents, id, err)
	}
	if len(inputs) == 0 {
		if _, err := j.Run(ctx, id); err != nil {
			return nil, err
		}
	}
	return inputs, nil
}

// found is events, or when there are none the error of a run that is not
// there: every run has events.
func (j *SQLJournal) found(ctx context.Context, id string, events []journal.Event) ([]journal.Event, error) {
	if len(events) == 0 {
		// Every run has events; none means no such run, unless it was
		// recorded in between.
		if _, err := j.Run(ctx, id); err != nil {
			return nil, err
		}
	}
	return events, nil
}

// eventColumns are what events reads of a run's event (e) and its run
// (r), in its order.
const eventColumns = `r.flow, e.key, e.seq, e.kind, e.step, e.attempt, e.outcome, e.started_at, e.ended_at,
	e.error, e.queue, e.due_at, e.status, e.run_step, e.replays, e.dead_letter`

// runColumns are what scanRun reads, in its order.
const runColumns = `r.run_id, r.flow, r.status, r.step, r.input, r.error, r.started_at, r.updated_at,
	r.ended_at, r.due_at, r.dead_letter, r.replays, r.seq, r.input_replays, r.version, r.business_key`

func scanRun(row pgx.CollectableRow) (journal.Run, error) {
	var (
		r      journal.Run
		status string
		input  []byte
	)
	err := row.Scan(&r.ID, &r.Flow, &status, &r.Step, &input, &r.Error, &r.StartedAt, &r.UpdatedAt,
		&r.EndedAt, &r.DueAt, &r.DeadLetter, &r.Replays, &r.Seq, &r.InputReplays, &r.Version, &r.BusinessKey)
	r.Status = journal.Status(status)
	if input != nil {
		r.Input = json.RawMessage(input)
	}
	r.StartedAt, r.UpdatedAt, r.EndedAt, r.DueAt = r.StartedAt.UTC(), r.UpdatedAt.UTC(), utcPtr(r.EndedAt), utcPtr(r.DueAt)
	return r, err
}

// utcPtr is t in UTC: pgx reads times in the process's zone, the journal
// hands out what it was given, in UTC.
func utcPtr(t *time.Time) *time.Time {
	if t == nil {
		return nil
	}
	u := t.UTC()
	return &u
}

// The shapes of the Runs statement, by which filters are set: one
// statement each, so that every plan is made for the filters it has.
const (
	listByFlow = 1 << iota
	listByError
	listByDue
	listByVersion
)

// journalStatements are the journal's statements, rendered for its tables
// once.
type journalStatements struct {
	record, timeline, purge string
	// runs is Run's, of a group of ids.
	runs string
	// inputs is StepInputs'.
	inputs string
	// ownTimeline, briefBranches and branchEvents are BriefTimeline's
	// and BranchEvents'.
	ownTimeline, briefBranches, branchEvents string
	// cancelled is CancelledSince's.
	cancelled string
	// prefix and prefixBounded are RunsByIDPrefix's, without and with an
	// end to the range.
	prefix, prefixBounded string
	list                  [16]string
}

// recordCTEs is the journal's record statement after its WITH: $1 to $38
// are journalBatch.args. A statement that writes more in the same commit
// (SQLIdempotencyStore.RecordKept) puts common table expressions of its
// own before it, with parameters from $39.
const recordCTEs = `b AS (
				SELECT * FROM unnest($1::text[], $2::text[], $3::text[], $4::text[], $5::bytea[], $6::text[],
					$7::timestamptz[], $8::timestamptz[], $9::timestamptz[], $10::timestamptz[], $11::text[],
					$12::integer[], $13::bigint[], $14::timestamptz[], $15::boolean[], $32::integer[], $33::text[],
					$37::text[], $38::boolean[])
				WITH ORDINALITY AS b(run_id, flow, status, step, input, error, started_at, updated_at,
					ended_at, due_at, dead_letter, replays, seq, min_start, has_status, input_replays, version,
					business_key, input_is_json, ord)
			), entries AS (
				-- Unreferenced, so it runs after the runs' upsert: every
				-- batch locks runs, then entries, each in sorted order.
				INSERT INTO {{run_events}} (run_id, key, seq, kind, step, attempt, outcome, started_at, ended_at,
					error, queue, due_at, status, run_step, replays, dead_letter, input, input_state, input_size)
				SELECT run_id, key, seq, kind, step, attempt, outcome, started_at, ended_at,
					error, queue, due_at, status, run_step, replays, dead_letter, input, input_state, input_size
				FROM unnest($16::text[], $17::text[], $18::bigint[], $19::text[], $20::text[], $21::integer[],
					$22::text[], $23::timestamptz[], $24::timestamptz[], $25::text[], $26::text[],
					$27::timestamptz[], $28::text[], $29::text[], $30::integer[], $31::text[],
					$34::bytea[], $35::text[], $36::integer[])
				WITH ORDINALITY AS e(run_id, key, seq, kind, step, attempt, outcome, started_at, ended_at,
					error, queue, due_at, status, run_step, replays, dead_letter, input, input_state, input_size, ord)
				ORDER BY ord
				ON CONFLICT (run_id, key) DO UPDATE SET
					(seq, kind, step, attempt, outcome, started_at, ended_at, error, queue, due_at, status,
						run_step, replays, dead_letter, input, input_state, input_size) =
					(EXCLUDED.seq, EXCLUDED.kind, EXCLUDED.step, EXCLUDED.attempt, EXCLUDED.outcome,
						EXCLUDED.started_at, EXCLUDED.ended_at, EXCLUDED.error, EXCLUDED.queue, EXCLUDED.due_at,
						EXCLUDED.status, EXCLUDED.run_step, EXCLUDED.replays, EXCLUDED.dead_letter,
						EXCLUDED.input, EXCLUDED.input_state, EXCLUDED.input_size)
			)
			INSERT INTO {{runs}} AS cur (run_id, flow, status, step, input, error, started_at, updated_at,
				ended_at, due_at, dead_letter, replays, seq, input_replays, version, business_key, input_json)
			SELECT run_id, flow, status, step, input, error, started_at, updated_at,
				ended_at, due_at, dead_letter, replays, seq, input_replays, version, business_key,
				CASE WHEN input_is_json THEN convert_from(input, 'UTF8')::jsonb END
			FROM b ORDER BY ord
			ON CONFLICT (run_id) DO UPDATE SET
				(started_at, input, input_json, business_key, input_replays, version, status, step, error, updated_at, ended_at, due_at, dead_letter, replays, seq) = (
				SELECT LEAST(cur.started_at, d.min_start),
					CASE WHEN d.newer_input THEN EXCLUDED.input ELSE cur.input END,
					CASE WHEN d.newer_input THEN EXCLUDED.input_json ELSE cur.input_json END,
					CASE WHEN d.newer_input THEN EXCLUDED.business_key ELSE cur.business_key END,
					CASE WHEN d.newer_input THEN EXCLUDED.input_replays ELSE cur.input_replays END,
					CASE WHEN d.newer_input THEN EXCLUDED.version ELSE cur.version END,
					CASE WHEN d.apply THEN EXCLUDED.status ELSE cur.status END,
					CASE WHEN d.apply THEN EXCLUDED.step ELSE cur.step END,
					CASE WHEN d.apply THEN EXCLUDED.error ELSE cur.error END,
					CASE WHEN d.apply THEN EXCLUDED.updated_at ELSE cur.updated_at END,
					CASE WHEN d.apply THEN EXCLUDED.ended_at ELSE cur.ended_at END,
					CASE WHEN d.apply THEN EXCLUDED.due_at ELSE cur.due_at END,
					CASE WHEN d.apply THEN EXCLUDED.dead_letter ELSE cur.dead_letter END,
					CASE WHEN d.apply THEN EXCLUDED.replays ELSE cur.replays END,
					CASE WHEN d.apply THEN EXCLUDED.seq ELSE cur.seq END
				FROM (SELECT ($14::timestamptz[])[i] AS min_start, ($15::boolean[])[i] AND EXCLUDED.seq >= cur.seq AS apply,
				             EXCLUDED.input IS NOT NULL AND (cur.input IS NULL OR EXCLUDED.input_replays > cur.input_replays) AS newer_input
				      FROM array_position($1::text[], EXCLUDED.run_id) AS i) AS d)`

func renderJournalStatements(t Tables) journalStatements {
	s := journalStatements{
		record: t.render("WITH " + recordCTEs),
		runs:   t.render(`SELECT ` + runColumns + ` FROM {{runs}} r WHERE r.run_id = ANY($1::text[])`),
		// The latest event with an input of each step: one range of the
		// primary key (a run's events), the inputs of the others not read.
		inputs: t.render(`
			SELECT e.step, e.key, e.seq, e.replays, e.attempt, e.started_at, e.input, e.input_state, e.input_size
			FROM (SELECT DISTINCT ON (step) step, key FROM {{run_events}}
				WHERE run_id = $1 AND (input IS NOT NULL OR input_size > 0)
				ORDER BY step, seq DESC, key DESC) l
			JOIN {{run_events}} e ON e.run_id = $1 AND e.key = l.key
			ORDER BY e.seq, e.key`),
		cancelled: t.render(`SELECT ` + runColumns + ` FROM {{runs}} r
			WHERE r.ended_at >= $1 AND r.ended_at IS NOT NULL AND r.status = 'cancelled'
			ORDER BY r.ended_at, r.run_id LIMIT $2`),
		// $1 the prefix, $2 the limit, $3 where the prefix's range ends.
		prefix:        t.render(`SELECT ` + runColumns + ` FROM {{runs}} r WHERE r.run_id >= $1 ORDER BY r.run_id LIMIT $2`),
		prefixBounded: t.render(`SELECT ` + runColumns + ` FROM {{runs}} r WHERE r.run_id >= $1 AND r.run_id < $3 ORDER BY r.run_id LIMIT $2`),
		timeline: t.render(`
			SELECT ` + eventColumns + `
			FROM {{runs}} r JOIN {{run_events}} e ON e.run_id = r.run_id
			WHERE r.run_id = $1
			ORDER BY e.seq, e.ended_at, e.key`),
		// The keys of a run's branches are two ranges ("/" + 1 is "0").
		ownTimeline: t.render(`
			SELECT ` + eventColumns + `
			FROM {{runs}} r JOIN {{run_events}} e ON e.run_id = r.run_id
			WHERE r.run_id = $1 AND NOT (e.key >= 'branch/' AND e.key < 'branch0')
				AND NOT (e.key >= 'arrived/' AND e.key < 'arrived0')
			ORDER BY e.seq, e.ended_at, e.key`),
		briefBranches: t.render(`
			SELECT e.key, e.kind, e.step, e.outcome, e.seq FROM {{run_events}} e
			WHERE e.run_id = $1 AND (e.key >= 'branch/' AND e.key < 'branch0' OR e.key >= 'arrived/' AND e.key < 'arrived0')`),
		// $2, $3 the ranges of the branches' steps' keys, $4 their
		// arrivals' keys, $5 LIKE patterns of their compensations' keys.
		branchEvents: t.render(`
			SELECT ` + eventColumns + `
			FROM {{runs}} r JOIN {{run_events}} e ON e.run_id = r.run_id
			WHERE r.run_id = $1 AND e.key IN (
				SELECT b.key FROM unnest($2::text[], $3::text[]) AS p(lo, hi)
					JOIN {{run_events}} b ON b.run_id = $1 AND b.key >= p.lo AND b.key < p.hi
				UNION ALL
				SELECT b.key FROM {{run_events}} b WHERE b.run_id = $1 AND b.key = ANY($4::text[])
				UNION ALL
				SELECT b.key FROM {{run_events}} b WHERE b.run_id = $1
					AND b.key >= 'compensation/' AND b.key < 'compensation0' AND b.key LIKE ANY($5::text[]))
			ORDER BY e.seq, e.ended_at, e.key`),
		purge: t.render(`
			WITH victims AS (
				SELECT run_id FROM {{runs}}
				WHERE ended_at < now() - $1 * interval '1 second'
				ORDER BY ended_at LIMIT $2
				FOR UPDATE SKIP LOCKED
			), gone AS (
				DELETE FROM {{runs}} r USING victims v WHERE r.run_id = v.run_id RETURNING r.run_id
			), entries AS (
				DELETE FROM {{run_events}} e USING gone g WHERE e.run_id = g.run_id
			), data AS (
				DELETE FROM {{run_data}} d USING gone g WHERE d.run_id = g.run_id
			), joins AS (
				DELETE FROM {{run_joins}} j USING gone g WHERE j.run_id = g.run_id RETURNING j.run_id, j.join_key
			), branches AS (
				-- Of the joins deleted, so that the join's row is locked
				-- first, as Settle locks it.
				DELETE FROM {{run_branches}} b USING joins j WHERE b.run_id = j.run_id AND b.join_key = j.join_key
			), join_items AS (
				DELETE FROM {{run_items}} i USING joins j WHERE i.run_id = j.run_id AND i.join_key = j.join_key
			)
			SELECT count(*) FROM gone`),
	}
	// $1 statuses, $2 since, $3 before, $4 limit, then the flow, the
	// version and the error pattern when the shape has them.
	for shape := range s.list {
		var filter, needle string
		next := 5
		if shape&listByFlow != 0 {
			filter = fmt.Sprintf(" AND r.flow = $%d", next)
			next++
		}
		if shape&listByVersion != 0 {
			filter += fmt.Sprintf(" AND r.version = $%d", next)
			next++
		}
		if shape&listByError != 0 {
			needle = fmt.Sprintf(" AND r.error <> '' AND r.error ILIKE $%d", next)
		}
		order := `r.started_at DESC, r.run_id DESC`
		if shape&listByDue != 0 {
			filter += ` AND r.due_at IS NOT NULL`
			order = `r.due_at, r.run_id`
		}
		if needle == "" {
			// One index range per status (newest first, or soonest due
			// first on the runs with a due time), merged: a few hundred
			// rows read whatever the table holds.
			s.list[shape] = t.render(`
				SELECT ` + runColumns + ` FROM unnest($1::text[]) AS s(status)
				CROSS JOIN LATERAL (
					SELECT * FROM {{runs}} r
					WHERE r.status = s.status` + filter + ` AND r.started_at >= $2 AND r.started_at < $3
					ORDER BY ` + order + ` LIMIT $4) r
				ORDER BY ` + order + ` LIMIT $4`)
			continue
		}
		// Runs with an error are few; their partial index is walked
		// newest first until the limit matches (or, soonest due first,
		// read whole and sorted).
		s.list[shape] = t.render(`
			SELECT ` + runColumns + ` FROM {{runs}} r
			WHERE r.status = ANY($1::text[]) AND r.started_at >= $2 AND r.started_at < $3` + filter + needle + `
			ORDER BY ` + order + ` LIMIT $4`)
	}
	return s
}
