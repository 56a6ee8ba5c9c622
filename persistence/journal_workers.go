package persistence

import (
	"context"
	"encoding/json"
	"fmt"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/acemq/acemq-flow/engine/journal"
)

var _ journal.WorkerStore = (*SQLJournal)(nil)

// ReportWorker keeps r as its worker's latest report in Tables.Workers
// (journal.WorkerStore), in one statement: the report whole as jsonb,
// beside the columns a person looks for (host, pid, when it started and
// was seen). It refuses what journal.CheckWorker refuses.
func (j *SQLJournal) ReportWorker(ctx context.Context, r journal.WorkerReport) error {
	if err := journal.CheckWorker(r); err != nil {
		return err
	}
	body, err := json.Marshal(r)
	if err != nil {
		return fmt.Errorf("journal: report of worker %s: %w", r.ID, err)
	}
	if _, err := j.db.Exec(ctx, j.workerSQL.report, r.ID, r.Host, int32(min(r.PID, 1<<31-1)), r.StartedAt, r.SeenAt, body); err != nil {
		return fmt.Errorf("journal: report of worker %s: %w", r.ID, err)
	}
	return nil
}

// RemoveWorker deletes worker id's report from Tables.Workers
// (journal.WorkerStore).
func (j *SQLJournal) RemoveWorker(ctx context.Context, id string) error {
	if _, err := j.db.Exec(ctx, j.workerSQL.remove, id); err != nil {
		return fmt.Errorf("journal: remove the report of worker %s: %w", id, err)
	}
	return nil
}

// Workers are the latest report of every worker in Tables.Workers, by id
// (journal.WorkerStore).
func (j *SQLJournal) Workers(ctx context.Context) ([]journal.WorkerReport, error) {
	rows, err := j.db.Query(ctx, j.workerSQL.list)
	if err != nil {
		return nil, fmt.Errorf("journal: the workers' reports: %w", err)
	}
	out := []journal.WorkerReport{}
	var body []byte
	if _, err := pgx.ForEachRow(rows, []any{&body}, func() error {
		var r journal.WorkerReport
		if err := json.Unmarshal(body, &r); err != nil {
			return err
		}
		out = append(out, r)
		return nil
	}); err != nil {
		return nil, fmt.Errorf("journal: the workers' reports: %w", err)
	}
	return out, nil
}

// PruneWorkers deletes the reports in Tables.Workers made before
// seenBefore (journal.WorkerStore).
func (j *SQLJournal) PruneWorkers(ctx context.Context, seenBefore time.Time) (int64, error) {
	tag, err := j.db.Exec(ctx, j.workerSQL.prune, seenBefore)
	if err != nil {
		return 0, fmt.Errorf("journal: prune the workers' reports: %w", err)
	}
	return tag.RowsAffected(), nil
}

// workerStatements are the WorkerStore statements, rendered for its
// tables once.
type workerStatements struct{ report, remove, list, prune string }

func renderWorkerStatements(t Tables) workerStatements {
	return workerStatements{
		// $1 id, $2 host, $3 pid, $4 started_at, $5 seen_at, $6 report.
		report: t.render(`
			INSERT INTO {{workers}} (id, host, pid, started_at, seen_at, report)
			VALUES ($1, $2, $3, $4, $5, $6::jsonb)
			ON CONFLICT (id) DO UPDATE SET host = excluded.host, pid = excluded.pid,
				started_at = excluded.started_at, seen_at = excluded.seen_at, report = excluded.report`),
		remove: t.render(`DELETE FROM {{workers}} WHERE id = $1`),
		list:   t.render(`SELECT report FROM {{workers}} ORDER BY id`),
		prune:  t.render(`DELETE FROM {{workers}} WHERE seen_at < $1`),
	}
}
