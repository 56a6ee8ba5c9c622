// Package journalbench makes the journal benchmarks' data set: n runs
// written straight into a journal's runs table by one generate_series
// statement (not through Record), so that a million runs load in about a
// minute. The persistence benchmarks and the dashboard's page timings
// load it into tables of their own.
package journalbench

import (
	"context"
	"fmt"
	"time"

	"github.com/acemq/acemq-flow/persistence"
)

// Runs is the data set's size the benchmarks use.
const Runs = 1_000_000

// Customers is how many customers the inputs name: run i's is "Ada" when
// i is a multiple of AdaEvery, else "c-" followed by i modulo Customers.
const (
	Customers = 5000
	AdaEvery  = 4999
)

// Load inserts n runs into t.Runs (migrated, empty) and analyzes the
// table: run i ("run-" and i in 8 digits) of flow "flow-" i%20, started
// i × 2.592 s before end (1,000,000 runs over the 30 days before end),
// 80% completed, 10% running (a third with a retry's error), 5% failed
// (at step "step" i%5, "charge: card declined (code i%50)"), the rest
// waiting, compensated, unresolved, ended or cancelled; its input
// {"customer":..., "order":{"id":i,"lines":1+i%7}, "amount":i%1000} as
// bytes and as jsonb, and its business key "order-" i. It refuses an n
// below 1.
func Load(ctx context.Context, db persistence.DB, t persistence.Tables, n int, end time.Time) error {
	if n < 1 {
		return fmt.Errorf("journalbench: load %d runs: want at least 1", n)
	}
	runs := t.Runs
	if runs == "" {
		runs = persistence.DefaultRunsTable
	}
	_, err := db.Exec(ctx, `
		INSERT INTO `+runs+` (run_id, flow, status, step, input, input_json, business_key, error, started_at, updated_at,
			ended_at, due_at, dead_letter, replays, seq)
		SELECT 'run-' || lpad(i::text, 8, '0'), 'flow-' || (i % 20), st, 'step' || (i % 5),
			convert_to(doc, 'UTF8'), doc::jsonb, 'order-' || i,
			CASE st WHEN 'failed' THEN 'charge: card declined (code ' || (i % 50) || ')'
			        WHEN 'compensated' THEN 'ship: no courier available'
			        WHEN 'unresolved' THEN 'refund: gateway timeout'
			        WHEN 'running' THEN CASE WHEN i % 3 = 0 THEN 'charge: connection reset by peer' ELSE '' END
			        ELSE '' END,
			started, started + interval '2 seconds',
			CASE WHEN st IN ('completed', 'ended', 'failed', 'compensated', 'unresolved', 'cancelled')
			     THEN started + interval '2 seconds' END,
			CASE WHEN st = 'waiting' THEN started + interval '1 hour' END,
			CASE WHEN st = 'failed' THEN 'flow-' || (i % 20) || '.charge.dlq' ELSE '' END, 0, 1000
		FROM generate_series(1, $2::integer) AS i,
		LATERAL (SELECT $1::timestamptz - i * interval '2.592 seconds' AS started,
			CASE WHEN h < 80 THEN 'completed' WHEN h < 90 THEN 'running' WHEN h < 95 THEN 'failed'
			     WHEN h < 96 THEN 'waiting' WHEN h < 97 THEN 'compensated' WHEN h < 98 THEN 'unresolved'
			     WHEN h < 99 THEN 'ended' ELSE 'cancelled' END AS st,
			json_build_object('customer', CASE WHEN i % $3 = 0 THEN 'Ada' ELSE 'c-' || (i % $4) END,
				'order', json_build_object('id', i, 'lines', 1 + i % 7), 'amount', i % 1000)::text AS doc
			FROM (SELECT (hashint4(i)::bigint & 2147483647) % 100 AS h) AS x) AS y`, end, n, AdaEvery, Customers)
	if err != nil {
		return fmt.Errorf("journalbench: load %d runs into %s: %w", n, runs, err)
	}
	if _, err := db.Exec(ctx, `VACUUM ANALYZE `+runs); err != nil {
		return fmt.Errorf("journalbench: analyze %s: %w", runs, err)
	}
	return nil
}
