package persistence_test

import (
	"encoding/json"
	"fmt"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/acemq/acemq-flow/engine/journal"
	"github.com/acemq/acemq-flow/persistence"
)

// BenchmarkSQLJournalRecord measures events/s through Record in batches of
// 500, as journal.Writer hands them over: each batch starts 100 runs and
// carries the next event of 400 runs under way (five events a run: the
// start, three steps, the last step completing it), by 1 writer and by 4
// writers (workers) at once on runs of their own.
func BenchmarkSQLJournalRecord(b *testing.B) {
	for _, writers := range []int{1, 4} {
		b.Run(fmt.Sprint("writers=", writers), func(b *testing.B) {
			db := pool(b)
			tb := tables(b, db)
			ctx := ctxT(b)
			j := sqlJournal(b, db, tb, persistence.SQLJournalConfig{})
			batches := make([][][]journal.Event, writers)
			for w := range writers {
				// Whole batches, about b.N events in all.
				batches[w] = journalBatches(fmt.Sprintf("w%d-", w), (b.N+500*writers-1)/(500*writers))
			}
			b.ResetTimer()
			start := time.Now()
			var wg sync.WaitGroup
			for w := range writers {
				wg.Go(func() {
					for _, batch := range batches[w] {
						if err := j.Record(ctx, batch); err != nil {
							b.Error(err)
							return
						}
					}
				})
			}
			wg.Wait()
			elapsed := time.Since(start)
			b.StopTimer()
			var events int
			for _, bs := range batches {
				for _, batch := range bs {
					events += len(batch)
				}
			}
			b.ReportMetric(float64(events)/elapsed.Seconds(), "events/s")
			// Each writer's batches follow each other: its mean batch time.
			b.ReportMetric(elapsed.Seconds()*1000/float64(len(batches[0])), "ms/batch")
		})
	}
}

// journalBatches are n batches of 500 events of runs named prefix+number:
// batch k starts runs 100k..100k+99 and gives runs 100(k-4)..100k-1 their
// next event.
func journalBatches(prefix string, n int) [][]journal.Event {
	at := time.Date(2026, 11, 1, 0, 0, 0, 0, time.UTC)
	input := json.RawMessage(`{"order":{"id":123456,"customer":"c-42","lines":[{"sku":"A-1","qty":2},{"sku":"B-7","qty":1}]}}`)
	out := make([][]journal.Event, n)
	for k := range out {
		batch := make([]journal.Event, 0, 500)
		for r := max(0, 100*(k-4)); r < 100*(k+1); r++ {
			id := fmt.Sprintf("%s%08d", prefix, r)
			nth := k - r/100 // 0 the start, 4 the last step
			now := at.Add(time.Duration(k) * time.Second)
			e := journal.Event{RunID: id, Flow: "orders", StartedAt: now, EndedAt: now.Add(time.Millisecond),
				Replays: 0, Status: journal.Running}
			if nth == 0 {
				e.Key, e.Kind, e.Seq, e.Outcome, e.RunStep, e.Input = "start", journal.KindStart, journal.Seq(0, 0, 1, 0), "started", "validate", input
			} else {
				step := fmt.Sprint("step", nth)
				e.Key, e.Kind, e.Seq, e.Step, e.Attempt, e.Outcome = fmt.Sprintf("step/0/%d/1", nth), journal.KindStep, journal.Seq(0, nth, 1, 2), step, 1, "completed"
				e.Queue, e.RunStep = "orders."+step, fmt.Sprint("step", nth+1)
				if nth == 4 {
					e.Status, e.RunStep = journal.Completed, step
				}
				if r%10 == 0 {
					e.Outcome, e.Error = "retried", "charge: gateway timeout after 30s"
				}
			}
			batch = append(batch, e)
		}
		out[k] = batch
	}
	return out
}

// BenchmarkSQLJournalRunsList measures Runs over 1,000,000 runs, loaded
// once (by generate_series, not through Record) into tables of its own:
// 20 flows, started over the 30 days before t, 80% completed, 10% running
// (a third with a retry's error), 5% failed and the rest waiting,
// compensated, unresolved, ended or cancelled.
func BenchmarkSQLJournalRunsList(b *testing.B) {
	db := pool(b)
	tb := tables(b, db)
	ctx := ctxT(b)
	t := time.Date(2026, 12, 1, 0, 0, 0, 0, time.UTC)
	const runs = 1_000_000
	start := time.Now()
	_, err := db.Exec(ctx, `
		INSERT INTO `+tb.Runs+` (run_id, flow, status, step, input, error, started_at, updated_at,
			ended_at, due_at, dead_letter, replays, seq)
		SELECT 'run-' || lpad(i::text, 8, '0'), 'flow-' || (i % 20), st, 'step' || (i % 5),
			convert_to('{"order":' || i || '}', 'UTF8'),
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
			     WHEN h < 99 THEN 'ended' ELSE 'cancelled' END AS st
			FROM (SELECT (hashint4(i)::bigint & 2147483647) % 100 AS h) AS x) AS y`, t, runs)
	require.NoError(b, err)
	_, err = db.Exec(ctx, `ANALYZE `+tb.Runs)
	require.NoError(b, err)
	b.Logf("loaded %d runs in %s", runs, time.Since(start).Round(time.Millisecond))
	j := sqlJournal(b, db, tb, persistence.SQLJournalConfig{})
	week := t.AddDate(0, 0, -7)
	for _, c := range []struct {
		name string
		q    journal.Query
	}{
		{"flow+failed+since", journal.Query{Flow: "flow-3", Statuses: []journal.Status{journal.Failed}, Since: week}},
		{"flow+completed+since", journal.Query{Flow: "flow-3", Statuses: []journal.Status{journal.Completed}, Since: week}},
		{"flow+2statuses+page", journal.Query{Flow: "flow-3", Statuses: []journal.Status{journal.Failed, journal.Unresolved},
			Since: t.AddDate(0, 0, -30), Before: t.AddDate(0, 0, -15)}},
		{"failed", journal.Query{Statuses: []journal.Status{journal.Failed}}},
		{"flow", journal.Query{Flow: "flow-3"}},
		{"all", journal.Query{}},
		{"all/limit=1000", journal.Query{Limit: 1000}},
		{"error~declined", journal.Query{ErrorContains: "DECLINED"}},
		{"flow+failed+error~code_7", journal.Query{Flow: "flow-7", Statuses: []journal.Status{journal.Failed}, ErrorContains: "(code 7)"}},
		{"error~nothing", journal.Query{ErrorContains: "matches no run"}},
	} {
		b.Run(c.name, func(b *testing.B) {
			var n int
			for b.Loop() {
				got, err := j.Runs(ctx, c.q)
				if err != nil {
					b.Fatal(err)
				}
				n = len(got)
			}
			b.ReportMetric(float64(n), "runs")
		})
	}
}
