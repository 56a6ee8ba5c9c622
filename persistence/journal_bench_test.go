package persistence_test

import (
	"encoding/json"
	"fmt"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/stretchr/testify/require"

	"github.com/acemq/acemq-flow/engine/journal"
	"github.com/acemq/acemq-flow/internal/journalbench"
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

// BenchmarkSQLJournalRunsList measures Runs, Find (search) and the
// aggregates over 1,000,000 runs, loaded once (journalbench.Load, by
// generate_series, not through Record) into tables of their own, dropped
// after: 20 flows, started over the 30 days before t, 80% completed, 10%
// running (a third with a retry's error), 5% failed and the rest waiting,
// compensated, unresolved, ended or cancelled; inputs with a customer
// ("Ada" for one run in 4,999) and a business key. It logs the plan of the
// payload search (EXPLAIN ANALYZE).
func BenchmarkSQLJournalRunsList(b *testing.B) {
	db := pool(b)
	tb := tables(b, db)
	ctx := ctxT(b)
	t := time.Date(2026, 12, 1, 0, 0, 0, 0, time.UTC)
	start := time.Now()
	require.NoError(b, journalbench.Load(ctx, db, tb, journalbench.Runs, t))
	b.Logf("loaded %d runs in %s", journalbench.Runs, time.Since(start).Round(time.Millisecond))
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
		{"key", journal.Query{BusinessKey: "order-123456"}},
		{"id-prefix", journal.Query{IDPrefix: "run-0012345"}},
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
	for _, c := range []struct {
		name, where string
		q           journal.Query
	}{
		{"where/customer+flow+week", `payload.customer == "Ada"`, journal.Query{Flow: "flow-3", Since: week, Before: t}},
		{"where/customer", `payload.customer == "Ada"`, journal.Query{}},
		{"where/customer+failed", `payload.customer == "Ada" && status == "failed"`, journal.Query{}},
		{"where/customer-number+flow+week", `payload.customer == "c-17" && payload.amount >= 500`, journal.Query{Flow: "flow-17", Since: week}},
		{"where/amount+flow+week(after)", `payload.amount > 990 && payload.customer startsWith "c-1"`, journal.Query{Flow: "flow-3", Since: week}},
		{"where/nothing", `payload.customer == "Nobody"`, journal.Query{}},
	} {
		w, err := journal.ParseWhere(c.where)
		require.NoError(b, err)
		b.Run(c.name, func(b *testing.B) {
			var n int
			for b.Loop() {
				got, err := journal.Find(ctx, j, c.q, w)
				if err != nil {
					b.Fatal(err)
				}
				n = len(got.Runs)
			}
			b.ReportMetric(float64(n), "runs")
		})
	}
	rows, err := db.Query(ctx, `EXPLAIN (ANALYZE, BUFFERS) SELECT run_id FROM `+tb.Runs+` r
		WHERE r.started_at >= $1 AND r.started_at < $2 AND r.flow = 'flow-3'
			AND r.input_json @@ 'strict $."customer" == "Ada"'::jsonpath ORDER BY r.started_at DESC, r.run_id DESC LIMIT 100`, week, t)
	require.NoError(b, err)
	plan, err := pgx.CollectRows(rows, pgx.RowTo[string])
	require.NoError(b, err)
	b.Logf("payload search plan:\n%s", strings.Join(plan, "\n"))
	day, month := journal.Range{Since: t.Add(-time.Hour), Until: t}, journal.Range{Since: t.AddDate(0, 0, -30), Until: t}
	sevenDays := journal.Range{Since: week, Until: t}
	for _, c := range []struct {
		name string
		do   func() (int, error)
	}{
		{"totals/all", func() (int, error) { got, err := j.Totals(ctx, journal.Range{}); return len(got), err }},
		{"totals/flow", func() (int, error) { got, err := j.Totals(ctx, journal.Range{Flow: "flow-3"}); return len(got), err }},
		{"totals/hour", func() (int, error) { got, err := j.Totals(ctx, day); return len(got), err }},
		{"totals/30days", func() (int, error) { got, err := j.Totals(ctx, month); return len(got), err }},
		{"chart/hour-by-minute", func() (int, error) { got, err := j.Chart(ctx, day, time.Minute); return len(got.Buckets), err }},
		{"chart/7days-by-3h", func() (int, error) { got, err := j.Chart(ctx, sevenDays, 3*time.Hour); return len(got.Buckets), err }},
		{"chart/30days-by-6h", func() (int, error) { got, err := j.Chart(ctx, month, 6*time.Hour); return len(got.Buckets), err }},
		{"chart/30days-by-6h+flow", func() (int, error) {
			r := month
			r.Flow = "flow-3"
			got, err := j.Chart(ctx, r, 6*time.Hour)
			return len(got.Buckets), err
		}},
		{"failed-groups/all", func() (int, error) { got, err := j.FailedGroups(ctx, journal.Range{}, 0); return len(got), err }},
		{"failed-groups/flow", func() (int, error) {
			got, err := j.FailedGroups(ctx, journal.Range{Flow: "flow-3"}, 0)
			return len(got), err
		}},
		{"failed-group-runs", func() (int, error) {
			got, err := j.FailedGroupRuns(ctx, journal.GroupRef{Flow: "flow-3", Step: "step3", Pattern: "charge: card declined (code <n>)"}, journal.Range{}, 100)
			return len(got), err
		}},
	} {
		b.Run(c.name, func(b *testing.B) {
			var n int
			for b.Loop() {
				got, err := c.do()
				if err != nil {
					b.Fatal(err)
				}
				n = got
			}
			b.ReportMetric(float64(n), "rows")
		})
	}
}
