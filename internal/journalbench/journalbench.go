// Package journalbench makes the journal benchmarks' data set: n runs
// written straight into a journal's runs table by one generate_series
// statement (not through Record), so that a million runs load in about a
// minute. The persistence benchmarks, the dashboard's page timings and
// its browser tests load it into tables of their own (ForTest), and check
// what they show against RunOf, the same runs computed in Go.
package journalbench

import (
	"context"
	"fmt"
	"math/bits"
	"time"

	"github.com/acemq/acemq-flow/engine/journal"
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

// Load inserts n runs into t.Runs (migrated, empty), then vacuums and
// analyzes the table, as autovacuum does a journal's in time: without it
// the visibility map is empty and every index-only scan (the aggregates')
// reads the heap too, which measures a table no journal stays in. Run i ("run-" and i in 8 digits) of flow "flow-" i%20, started
// i × 2.592 s before end (1,000,000 runs over the 30 days before end),
// 80% completed, 10% running (a third with a retry's error), 5% failed
// (at step "step" i%5, "charge: card declined (code i%50)"), the rest
// waiting, compensated, unresolved, ended or cancelled (by a hash of i,
// RunOf); its input
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

// Interval is the time between two runs' starts.
const Interval = 2592 * time.Millisecond

// Run is what Load writes of one run, as far as the tests check it.
type Run struct {
	ID, Flow, Step, Customer, BusinessKey, Error string
	Status                                       journal.Status
	StartedAt                                    time.Time
	// EndedAt is when a run that stopped did: 2 s after its start.
	EndedAt *time.Time
}

// RunOf is run i (1 to n) of the runs Load writes before end.
func RunOf(i int, end time.Time) Run {
	r := Run{ID: fmt.Sprintf("run-%08d", i), Flow: fmt.Sprint("flow-", i%20), Step: fmt.Sprint("step", i%5),
		Customer: fmt.Sprint("c-", i%Customers), BusinessKey: fmt.Sprint("order-", i),
		Status: statusOf(i), StartedAt: end.Add(-time.Duration(i) * Interval)}
	if i%AdaEvery == 0 {
		r.Customer = "Ada"
	}
	switch r.Status {
	case journal.Failed:
		r.Error = fmt.Sprintf("charge: card declined (code %d)", i%50)
	case journal.Compensated:
		r.Error = "ship: no courier available"
	case journal.Unresolved:
		r.Error = "refund: gateway timeout"
	case journal.Running:
		if i%3 == 0 {
			r.Error = "charge: connection reset by peer"
		}
	}
	if r.Status.Stopped() {
		at := r.StartedAt.Add(2 * time.Second)
		r.EndedAt = &at
	}
	return r
}

// statusOf is run i's status: by hashint4(i) modulo 100, as Load's
// statement picks it.
func statusOf(i int) journal.Status {
	h := (int64(hashint4(int32(i))) & 0x7fffffff) % 100
	switch {
	case h < 80:
		return journal.Completed
	case h < 90:
		return journal.Running
	case h < 95:
		return journal.Failed
	case h < 96:
		return journal.Waiting
	case h < 97:
		return journal.Compensated
	case h < 98:
		return journal.Unresolved
	case h < 99:
		return journal.Ended
	}
	return journal.Cancelled
}

// hashint4 is PostgreSQL's hashint4: hash_uint32, the final mix of Bob
// Jenkins' lookup3 hash of one word.
func hashint4(k int32) int32 {
	a := uint32(0x9e3779b9) + 4 + 3923095
	b, c := a, a
	a += uint32(k)
	c ^= b
	c -= bits.RotateLeft32(b, 14)
	a ^= c
	a -= bits.RotateLeft32(c, 11)
	b ^= a
	b -= bits.RotateLeft32(a, 25)
	c ^= b
	c -= bits.RotateLeft32(b, 16)
	a ^= c
	a -= bits.RotateLeft32(c, 4)
	b ^= a
	b -= bits.RotateLeft32(a, 14)
	c ^= b
	c -= bits.RotateLeft32(b, 24)
	return int32(c)
}
