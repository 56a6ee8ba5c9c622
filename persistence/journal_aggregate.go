package persistence

import (
	"context"
	"fmt"
	"strings"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgtype"

	"github.com/acemq/acemq-flow/engine/journal"
)

var _ journal.Aggregator = (*SQLJournal)(nil)

// errorPatternSQL is journal.ErrorPattern in SQL, of the text %s, before
// its trim and cut (which Go applies to what the statement groups by,
// journal.MergeGroups): UUIDs, then words of 8 bytes or more with a digit
// in them become <id>, the numbers left <n>, runs of white space one
// space.
const errorPatternSQL = `btrim(regexp_replace(regexp_replace(regexp_replace(regexp_replace(%s,
	'[0-9a-fA-F]{8}-[0-9a-fA-F]{4}-[0-9a-fA-F]{4}-[0-9a-fA-F]{4}-[0-9a-fA-F]{12}', '<id>', 'g'),
	'(?<![A-Za-z0-9_.-])(?=[A-Za-z0-9_.-]*[0-9])[A-Za-z0-9_.-]{8,}', '<id>', 'g'),
	'[0-9]+(\.[0-9]+)?', '<n>', 'g'),
	'[\t\n\f\r ]+', ' ', 'g'), ' ')`

// failedAtSQL is journal.FailedAt of run r, as runs_failed_idx keys it.
const failedAtSQL = `coalesce(r.ended_at, r.updated_at)`

// failedStatusesSQL are journal.FailedStatus's statuses, as
// runs_failed_idx's predicate names them.
const failedStatusesSQL = `('failed', 'compensating', 'compensated', 'unresolved')`

// bounds are r's ends as parameters: -infinity and infinity when unset.
func bounds(r journal.Range) (pgtype.Timestamptz, pgtype.Timestamptz) {
	since := pgtype.Timestamptz{Valid: true, InfinityModifier: pgtype.NegativeInfinity}
	if !r.Since.IsZero() {
		since = pgtype.Timestamptz{Valid: true, Time: r.Since}
	}
	until := pgtype.Timestamptz{Valid: true, InfinityModifier: pgtype.Infinity}
	if !r.Until.IsZero() {
		until = pgtype.Timestamptz{Valid: true, Time: r.Until}
	}
	return since, until
}

// flowFilter is " AND r.flow = $n" when r has a flow, bound in s.
func flowFilter(s *sqlBuilder, r journal.Range) string {
	if r.Flow == "" {
		return ""
	}
	return " AND r.flow = " + s.arg(r.Flow)
}

// statusNames are journal.Statuses as text, those keep takes (all for
// nil).
func statusNames(keep func(journal.Status) bool) []string {
	out := []string{}
	for _, s := range journal.Statuses() {
		if keep == nil || keep(s) {
			out = append(out, string(s))
		}
	}
	return out
}

// Totals counts the runs started in r by status (journal.Aggregator): a
// count per status over one range of the index by status (or by flow and
// status), read from the index alone.
func (j *SQLJournal) Totals(ctx context.Context, r journal.Range) ([]journal.StatusCount, error) {
	if err := r.Check(); err != nil {
		return nil, err
	}
	s := sqlBuilder{}
	since, until := bounds(r)
	st, lo, hi := s.arg(statusNames(nil)), s.arg(since), s.arg(until)
	stmt := j.t.render(`SELECT s.status, (SELECT count(*) FROM {{runs}} r WHERE r.status = s.status` + flowFilter(&s, r) +
		` AND r.started_at >= ` + lo + ` AND r.started_at < ` + hi + `) FROM unnest(` + st + `::text[]) WITH ORDINALITY AS s(status, ord) ORDER BY s.ord`)
	rows, err := j.db.Query(ctx, stmt, s.args...)
	if err != nil {
		return nil, fmt.Errorf("journal %s: totals: %w", j.t.Runs, err)
	}
	out, err := pgx.CollectRows(rows, func(row pgx.CollectableRow) (journal.StatusCount, error) {
		var c journal.StatusCount
		var status string
		err := row.Scan(&status, &c.Runs)
		c.Status = journal.Status(status)
		return c, err
	})
	if err != nil {
		return nil, fmt.Errorf("journal %s: totals: %w", j.t.Runs, err)
	}
	return out, nil
}

// Chart counts runs started and failed per bucket, and started by status
// (journal.Aggregator), in one statement of range counts: per bucket and
// status, the runs started then (one range of the index by status, or by
// flow and status), and per bucket and failed status, the runs that
// failed then (one range of runs_failed_idx); each read from the index
// alone. Counting ranges rather than grouping every run by an expression
// of its time keeps a 30-day chart of 1,000,000 runs to one walk of their
// index entries (docs/performance.md); each bucket costs a descent of the
// index per status, which a chart of thousands of narrow buckets feels.
func (j *SQLJournal) Chart(ctx context.Context, r journal.Range, width time.Duration) (journal.Chart, error) {
	n, err := journal.CheckBuckets(r, width)
	if err != nil {
		return journal.Chart{}, err
	}
	out := journal.Chart{Buckets: make([]journal.Bucket, n)}
	los, his := make([]time.Time, n), make([]time.Time, n)
	for i := range out.Buckets {
		out.Buckets[i].At = r.Since.Add(time.Duration(i) * width).UTC()
		los[i], his[i] = out.Buckets[i].At, out.Buckets[i].At.Add(width)
		if his[i].After(r.Until) {
			his[i] = r.Until
		}
	}
	statuses := statusNames(nil)
	s := sqlBuilder{}
	lo, hi, st, fs := s.arg(los), s.arg(his), s.arg(statuses), s.arg(statusNames(journal.FailedStatus))
	flow := flowFilter(&s, r)
	// The failed statuses are counted one by one (status = f.status):
	// runs_failed_idx's predicate implies the "status IN (...)", which
	// PostgreSQL then drops from the index's range, and a bucket would
	// walk the whole index for want of a status to key it by.
	stmt := j.t.render(`SELECT
		ARRAY(SELECT (SELECT count(*) FROM {{runs}} r WHERE r.status = s.status AND r.started_at >= b.lo AND r.started_at < b.hi` + flow + `)
			FROM unnest(` + st + `::text[]) WITH ORDINALITY AS s(status, o) ORDER BY s.o),
		(SELECT sum((SELECT count(*) FROM {{runs}} r WHERE r.status IN ` + failedStatusesSQL + ` AND r.status = f.status
			AND ` + failedAtSQL + ` >= b.lo AND ` + failedAtSQL + ` < b.hi` + flow + `)) FROM unnest(` + fs + `::text[]) AS f(status))::bigint
		FROM unnest(` + lo + `::timestamptz[], ` + hi + `::timestamptz[]) WITH ORDINALITY AS b(lo, hi, i) ORDER BY b.i`)
	rows, err := j.db.Query(ctx, stmt, s.args...)
	if err != nil {
		return journal.Chart{}, fmt.Errorf("journal %s: chart: %w", j.t.Runs, err)
	}
	totals := make([]int64, len(statuses))
	var started []int64
	var failed int64
	i := 0
	_, err = pgx.ForEachRow(rows, []any{&started, &failed}, func() error {
		if i >= n || len(started) != len(statuses) {
			return fmt.Errorf("row %d of %d buckets has %d statuses, want %d", i, n, len(started), len(statuses))
		}
		for k, c := range started {
			out.Buckets[i].Started += c
			totals[k] += c
		}
		out.Buckets[i].Failed = failed
		i++
		return nil
	})
	if err != nil {
		return journal.Chart{}, fmt.Errorf("journal %s: chart: %w", j.t.Runs, err)
	}
	for k, name := range statuses {
		out.Totals = append(out.Totals, journal.StatusCount{Status: journal.Status(name), Runs: totals[k]})
	}
	return out, nil
}

// FailedGroups groups the failed runs of r (journal.Aggregator): by flow,
// step and error first (from runs_failed_idx alone), then the distinct
// errors by their pattern, so that the patterns' regular expressions run
// once per distinct error rather than per run.
func (j *SQLJournal) FailedGroups(ctx context.Context, r journal.Range, limit int) ([]journal.FailedGroup, error) {
	if err := r.Check(); err != nil {
		return nil, err
	}
	s := sqlBuilder{}
	since, until := bounds(r)
	lo, hi := s.arg(since), s.arg(until)
	stmt := j.t.render(`
		SELECT g.flow, g.step, p.pattern, sum(g.n)::bigint, min(g.oldest), max(g.newest), (array_agg(g.error ORDER BY g.newest DESC))[1]
		FROM (SELECT r.flow, r.step, r.error, count(*) AS n, min(` + failedAtSQL + `) AS oldest, max(` + failedAtSQL + `) AS newest
			FROM {{runs}} r
			WHERE r.status = 'failed' AND ` + failedAtSQL + ` >= ` + lo + ` AND ` + failedAtSQL + ` < ` + hi + flowFilter(&s, r) + `
			GROUP BY 1, 2, 3) g
		CROSS JOIN LATERAL (SELECT ` + fmt.Sprintf(errorPatternSQL, "g.error") + ` AS pattern) p
		GROUP BY 1, 2, 3`)
	rows, err := j.db.Query(ctx, stmt, s.args...)
	if err != nil {
		return nil, fmt.Errorf("journal %s: failed groups: %w", j.t.Runs, err)
	}
	groups, err := pgx.CollectRows(rows, func(row pgx.CollectableRow) (journal.FailedGroup, error) {
		var g journal.FailedGroup
		err := row.Scan(&g.Flow, &g.Step, &g.Pattern, &g.Runs, &g.Oldest, &g.Newest, &g.Example)
		g.Oldest, g.Newest = g.Oldest.UTC(), g.Newest.UTC()
		return g, err
	})
	if err != nil {
		return nil, fmt.Errorf("journal %s: failed groups: %w", j.t.Runs, err)
	}
	if limit <= 0 {
		limit = journal.DefaultLimit
	}
	groups = journal.MergeGroups(groups)
	return groups[:min(len(groups), limit)], nil
}

// FailedGroupRuns returns the runs of a failed group (journal.Aggregator),
// the first to fail first: those of its flow and step in runs_failed_idx
// whose error's pattern is the group's (begins with it, for a pattern cut
// at journal.MaxPattern, then checked by journal.ErrorPattern).
func (j *SQLJournal) FailedGroupRuns(ctx context.Context, g journal.GroupRef, r journal.Range, limit int) ([]journal.Run, error) {
	if err := r.Check(); err != nil {
		return nil, err
	}
	if limit <= 0 {
		limit = journal.DefaultLimit
	}
	s := sqlBuilder{}
	since, until := bounds(r)
	var pattern, match string
	// The pattern of each distinct error of the group's flow and step
	// (few, read from runs_failed_idx), then the runs with those errors
	// in the order the index keeps them.
	flow, step, lo, hi := s.arg(g.Flow), s.arg(g.Step), s.arg(since), s.arg(until)
	bounded := `r.status = 'failed' AND r.flow = ` + flow + ` AND r.step = ` + step + `
			AND ` + failedAtSQL + ` >= ` + lo + ` AND ` + failedAtSQL + ` < ` + hi
	pattern = fmt.Sprintf(errorPatternSQL, "d.error")
	match = pattern + " = " + s.arg(g.Pattern)
	if cut, ok := strings.CutSuffix(g.Pattern, "…"); ok && len(cut) >= journal.MaxPattern-3 {
		match = "starts_with(" + pattern + ", " + s.arg(cut) + ")"
	}
	stmt := j.t.render(`SELECT ` + runColumns + ` FROM {{runs}} r
		WHERE ` + bounded + ` AND r.error IN (
			SELECT d.error FROM (SELECT DISTINCT r.error FROM {{runs}} r WHERE ` + bounded + `) d WHERE ` + match + `)
		ORDER BY r.status, ` + failedAtSQL + `, r.run_id LIMIT ` + s.arg(limit))
	rows, err := j.db.Query(ctx, stmt, s.args...)
	if err != nil {
		return nil, fmt.Errorf("journal %s: runs of failed group %s/%s: %w", j.t.Runs, g.Flow, g.Step, err)
	}
	runs, err := pgx.CollectRows(rows, scanRun)
	if err != nil {
		return nil, fmt.Errorf("journal %s: runs of failed group %s/%s: %w", j.t.Runs, g.Flow, g.Step, err)
	}
	out := runs[:0]
	for _, run := range runs {
		if journal.ErrorPattern(run.Error) == g.Pattern {
			out = append(out, run)
		}
	}
	return out, nil
}
