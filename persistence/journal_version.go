package persistence

import (
	"context"
	"fmt"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/acemq/acemq-flow/engine/journal"
)

var _ journal.VersionStore = (*SQLJournal)(nil)

// RecordVersion remembers v as served at at in Tables.FlowVersions
// (journal.VersionStore), in one statement: a version seen before keeps
// its first_seen and steps, and its last_seen moves to at. It refuses
// what journal.CheckVersion refuses.
func (j *SQLJournal) RecordVersion(ctx context.Context, v journal.FlowVersion, at time.Time) error {
	if err := journal.CheckVersion(v); err != nil {
		return err
	}
	steps := v.Steps
	if steps == nil {
		steps = []string{} // NOT NULL: no steps is an empty array
	}
	if _, err := j.db.Exec(ctx, j.versionSQL.record, v.Flow, v.Version, steps, at); err != nil {
		return fmt.Errorf("journal: record version %s of %s: %w", v.Version, v.Flow, err)
	}
	return nil
}

// Versions are flow's versions recorded in Tables.FlowVersions, the first
// seen first (journal.VersionStore); versions first seen at once are in
// version order.
func (j *SQLJournal) Versions(ctx context.Context, flow string) ([]journal.FlowVersion, error) {
	rows, err := j.db.Query(ctx, j.versionSQL.versions, flow)
	if err != nil {
		return nil, fmt.Errorf("journal: the versions of %s: %w", flow, err)
	}
	vs, err := pgx.CollectRows(rows, pgx.RowToStructByPos[journal.FlowVersion])
	if err != nil {
		return nil, fmt.Errorf("journal: the versions of %s: %w", flow, err)
	}
	if vs == nil {
		vs = []journal.FlowVersion{}
	}
	return vs, nil
}

// InFlight counts flow's running and waiting runs in Tables.Runs by the
// step they are at (journal.VersionStore).
func (j *SQLJournal) InFlight(ctx context.Context, flow string) (map[string]int, error) {
	rows, err := j.db.Query(ctx, j.versionSQL.inFlight, flow)
	if err != nil {
		return nil, fmt.Errorf("journal: the runs of %s in flight: %w", flow, err)
	}
	out := map[string]int{}
	var (
		step string
		n    int64
	)
	if _, err := pgx.ForEachRow(rows, []any{&step, &n}, func() error {
		out[step] = int(n)
		return nil
	}); err != nil {
		return nil, fmt.Errorf("journal: the runs of %s in flight: %w", flow, err)
	}
	return out, nil
}

// versionStatements are the VersionStore statements, rendered for its
// tables once.
type versionStatements struct{ record, versions, inFlight string }

func renderVersionStatements(t Tables) versionStatements {
	return versionStatements{
		// $1 flow, $2 version, $3 steps, $4 at: a new version, or the
		// last time an old one was seen.
		record: t.render(`
			INSERT INTO {{flow_versions}} (flow, version, steps, first_seen, last_seen)
			VALUES ($1, $2, $3::text[], $4, $4)
			ON CONFLICT (flow, version) DO UPDATE SET last_seen = excluded.last_seen`),
		// $1 flow: its versions, the first seen first (the primary key's
		// flow prefix finds them).
		versions: t.render(`
			SELECT flow, version, steps, first_seen, last_seen FROM {{flow_versions}}
			WHERE flow = $1 ORDER BY first_seen, version`),
		// $1 flow: its runs in flight by step (runs_flow_idx finds them).
		inFlight: t.render(`
			SELECT step, count(*) FROM {{runs}}
			WHERE flow = $1 AND status IN ('running', 'waiting') GROUP BY step`),
	}
}
