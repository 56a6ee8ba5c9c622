package persistence

import (
	"context"
	"fmt"
	"time"

	"github.com/acemq/acemq-flow/broker"
)

// SQLCronGuard decides, for every worker sharing a database, which one
// starts a cron tick's run: the first to claim (flow, trigger, tick)
// (insert-if-absent in Tables.CronFires). It implements engine.CronGuard.
// Nothing on the tick path deletes anything: PurgeFires, which a worker's
// housekeeping runs, forgets ticks older than a week.
type SQLCronGuard struct {
	db  DB
	t   Tables
	sql cronStatements
}

// CronFireRetention is how long SQLCronGuard keeps a claimed tick.
const CronFireRetention = 7 * 24 * time.Hour

type cronStatements struct{ fire, last, purge string }

// NewSQLCronGuard returns a guard on db. It refuses a nil db and invalid
// table names.
func NewSQLCronGuard(db DB, tables Tables) (*SQLCronGuard, error) {
	if db == nil {
		return nil, fmt.Errorf("%w: cron guard: nil db", broker.ErrInvalidOption)
	}
	t, err := tables.checked()
	if err != nil {
		return nil, err
	}
	return &SQLCronGuard{db: db, t: t, sql: cronStatements{
		fire: t.render(`INSERT INTO {{cron_fires}} (flow, trigger, tick) VALUES ($1, $2, $3)
			ON CONFLICT DO NOTHING RETURNING 1`),
		last:  t.render(`SELECT max(tick) FROM {{cron_fires}} WHERE flow = $1 AND trigger = $2`),
		purge: t.render(`DELETE FROM {{cron_fires}} WHERE tick < now() - $1 * interval '1 second'`),
	}}, nil
}

// Fire claims tick of flow's trigger: true for exactly one caller, however
// many ask at once.
func (g *SQLCronGuard) Fire(ctx context.Context, flow, trigger string, tick time.Time) (bool, error) {
	rows, err := g.db.Query(ctx, g.sql.fire, flow, trigger, tick)
	if err != nil {
		return false, fmt.Errorf("cron guard %s: fire: %w", g.t.CronFires, err)
	}
	won := rows.Next()
	rows.Close()
	if err := rows.Err(); err != nil {
		return false, fmt.Errorf("cron guard %s: fire: %w", g.t.CronFires, err)
	}
	return won, nil
}

// Last is the latest tick of flow's trigger anyone claimed, and false when
// none was.
func (g *SQLCronGuard) Last(ctx context.Context, flow, trigger string) (time.Time, bool, error) {
	var last *time.Time
	if err := g.db.QueryRow(ctx, g.sql.last, flow, trigger).Scan(&last); err != nil {
		return time.Time{}, false, fmt.Errorf("cron guard %s: last: %w", g.t.CronFires, err)
	}
	if last == nil {
		return time.Time{}, false, nil
	}
	return *last, true, nil
}

// PurgeFires forgets ticks claimed longer than CronFireRetention ago and
// says how many.
func (g *SQLCronGuard) PurgeFires(ctx context.Context) (int64, error) {
	tag, err := g.db.Exec(ctx, g.sql.purge, CronFireRetention.Seconds())
	if err != nil {
		return 0, fmt.Errorf("cron guard %s: purge: %w", g.t.CronFires, err)
	}
	return tag.RowsAffected(), nil
}
