package journaltest

import (
	"fmt"
	"slices"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/acemq/acemq-flow/engine/journal"
)

// searchRuns records the runs the search tests look for: s00..s09, of
// flows orders (even) and refunds (odd), each with a customer, an amount,
// a vip flag and a business key, and three inputs that are not objects
// with those fields (s10 not JSON, s11 an array, s12 a customer number).
func searchRuns(t *testing.T, j journal.Journal) {
	customers := []string{"Ada", "Grace", "Ada", "Linus", "Ada \"the\" <first>", "Grace", "Ada", "Ken", "Grace", "Ada"}
	for i, c := range customers {
		flow := "orders"
		if i%2 == 1 {
			flow = "refunds"
		}
		e := start(fmt.Sprintf("s%02d", i), flow, i*10, fmt.Sprintf(`{"customer":%q,"amount":%d,"vip":%t,"order":{"id":"o-%d"}}`, c, i*100, i%3 == 0, i))
		e.BusinessKey = fmt.Sprintf("order-%d", i)
		record(t, j, e)
		if i%4 == 1 {
			f := step(e.RunID, flow, "charge", 1, 1, i*10+1, "failed", journal.Failed, "charge")
			f.Error = "declined"
			record(t, j, f)
		}
	}
	record(t, j, start("s10", "orders", 100, `not json`), start("s11", "orders", 110, `["Ada"]`), start("s12", "orders", 120, `{"customer":7}`))
}

// search: runs found by where expressions (what the journal evaluates and
// what Find matches after), business key and id prefix.
func search(t *testing.T, j journal.Journal) {
	ctx := ctxOf(t)
	searchRuns(t, j)
	for _, c := range []struct {
		where string
		exact bool
		want  []string
	}{
		{`payload.customer == "Ada"`, true, []string{"s09", "s06", "s02", "s00"}},
		{`payload.customer == 'Ada "the" <first>'`, true, []string{"s04"}},
		{`payload.customer == "Ada" && flow == "orders"`, true, []string{"s06", "s02", "s00"}},
		{`payload.customer in ["Ken", "Linus"]`, true, []string{"s07", "s03"}},
		{`payload.amount >= 700`, true, []string{"s09", "s08", "s07"}},
		{`payload.amount > 200 && payload.amount < 500 || payload.customer == "Ken"`, true, []string{"s07", "s04", "s03"}},
		{`!(payload.customer == "Grace") && flow == "refunds"`, true, []string{"s09", "s07", "s03"}},
		{`payload.customer != "Grace" && flow == "refunds"`, true, []string{"s09", "s07", "s03"}},
		{`!(payload.customer == "Grace") && id startsWith "s1"`, true, []string{"s12", "s11", "s10"}},
		{`payload.customer != "Grace" && id startsWith "s1"`, true, []string{}},
		{`payload.vip`, true, []string{"s09", "s06", "s03", "s00"}},
		{`payload.order.id == "o-5"`, true, []string{"s05"}},
		{`payload["order"]["id"] == "o-6"`, true, []string{"s06"}},
		{`status == "failed"`, true, []string{"s09", "s05", "s01"}},
		{`status in ["failed"] && payload.customer == "Grace"`, true, []string{"s05", "s01"}},
		{`key == "order-3"`, true, []string{"s03"}},
		{`id startsWith "s1"`, true, []string{"s12", "s11", "s10"}},
		{`started_at >= date("2026-12-01T09:01:20Z") && started_at < date("2026-12-01T09:01:40Z")`, true, []string{"s09", "s08"}},
		{`payload.customer == 7`, true, []string{"s12"}},
		{`payload.customer startsWith "Gr"`, false, []string{"s08", "s05", "s01"}},
		{`payload.customer matches "^L" && flow == "refunds"`, false, []string{"s03"}},
		{`len(payload.customer) == 3 && payload.vip`, false, []string{"s09", "s06", "s00"}},
	} {
		w, err := journal.ParseWhere(c.where)
		require.NoError(t, err, c.where)
		require.Equal(t, c.exact, w.Exact(), c.where)
		found, err := journal.Find(ctx, j, journal.Query{}, w)
		require.NoError(t, err, c.where)
		require.Equal(t, c.want, runIDs(found.Runs), c.where)
	}
	w, err := journal.ParseWhere(`payload.customer == "Ada"`)
	require.NoError(t, err)
	found, err := journal.Find(ctx, j, journal.Query{Flow: "orders", Since: at(10), Before: at(90), Limit: 1}, w)
	require.NoError(t, err)
	require.Equal(t, []string{"s06"}, runIDs(found.Runs), "with a flow, a time range and a limit")

	got, err := j.Runs(ctx, journal.Query{BusinessKey: "order-4"})
	require.NoError(t, err)
	require.Equal(t, []string{"s04"}, runIDs(got))
	require.Equal(t, "order-4", got[0].BusinessKey)
	got, err = j.Runs(ctx, journal.Query{IDPrefix: "s0", Flow: "refunds", Limit: 2})
	require.NoError(t, err)
	require.Equal(t, []string{"s09", "s07"}, runIDs(got))
	got, err = j.Runs(ctx, journal.Query{IDPrefix: "x"})
	require.NoError(t, err)
	require.Empty(t, got)

	for _, bad := range []string{``, `payload.customer ==`, `customer == "Ada"`, `flow + "x"`} {
		_, err := journal.ParseWhere(bad)
		require.ErrorIs(t, err, journal.ErrInvalidWhere, bad)
	}
}

// Patterns are error texts and the pattern each gives (ErrorPattern),
// which every Aggregator groups by alike.
var Patterns = map[string]string{
	"charge: card declined (code 7)":                       "charge: card declined (code <n>)",
	"order 123e4567-e89b-12d3-a456-426614174000 not found": "order <id> not found",
	"timeout   after\t30.5s\non orders.charge-12345678":    "timeout after <n>s on <id>",
	"  leading and trailing  ":                             "leading and trailing",
	"ab12 x9y run-a1b2c3d4 v1.2.3":                         "ab<n> x<n>y <id> v<n>.<n>",
	"no digits here at all":                                "no digits here at all",
	"key k-123e4567-e89b-12d3-a456-426614174000x and 42":   "key k-<id>x and <n>",
	"unicode é 12 façade":                                  "unicode é <n> façade",
}

// aggregates: totals, buckets and failed groups over every run, with a
// flow and a time range; a journal that is not an Aggregator skips it.
func aggregates(t *testing.T, j journal.Journal) {
	a, ok := j.(journal.Aggregator)
	if !ok {
		t.Skip("not an Aggregator")
	}
	ctx := ctxOf(t)
	// 30 runs a minute apart; every third failed at charge a minute
	// after its start (the step's attempt ends then), with one of the Patterns' errors (by i%2), every
	// fifth completed.
	errs := []string{"charge: card declined (code 7)", "charge: card declined (code 51)"}
	min := func(m int) int { return m * 60 }
	for i := range 30 {
		id := fmt.Sprintf("a%02d", i)
		flow := "orders"
		if i%2 == 1 {
			flow = "refunds"
		}
		record(t, j, start(id, flow, min(i), `{}`))
		switch {
		case i%3 == 0:
			f := step(id, flow, "charge", 1, 1, min(i+1)-1, "failed", journal.Failed, "charge")
			f.Error = errs[(i/3)%2] + fmt.Sprintf(" for order %08d", i)
			record(t, j, f)
		case i%5 == 0:
			record(t, j, step(id, flow, "ship", 2, 1, min(i)+10, "completed", journal.Completed, "ship"))
		}
	}
	totals, err := a.Totals(ctx, journal.Range{})
	require.NoError(t, err)
	counts := map[journal.Status]int64{}
	for _, c := range totals {
		counts[c.Status] = c.Runs
	}
	require.Len(t, totals, len(journal.Statuses()))
	require.Equal(t, journal.Statuses()[0], totals[0].Status)
	require.Equal(t, map[journal.Status]int64{journal.Running: 16, journal.Failed: 10, journal.Completed: 4,
		journal.Waiting: 0, journal.Ended: 0, journal.Compensating: 0, journal.Compensated: 0, journal.Unresolved: 0, journal.Cancelled: 0}, counts)
	totals, err = a.Totals(ctx, journal.Range{Flow: "orders", Since: at(min(10)), Until: at(min(20))})
	require.NoError(t, err)
	counts = map[journal.Status]int64{}
	for _, c := range totals {
		counts[c.Status] = c.Runs
	}
	// orders 10..19: 10, 12, 14, 16, 18; failed 12, 18; completed 10.
	require.Equal(t, int64(2), counts[journal.Failed])
	require.Equal(t, int64(1), counts[journal.Completed])
	require.Equal(t, int64(2), counts[journal.Running])

	chart, err := a.Chart(ctx, journal.Range{Since: at(0), Until: at(min(30))}, 10*time.Minute)
	require.NoError(t, err)
	require.Equal(t, []journal.Bucket{
		// Failed 0, 3, 6 (at 1, 4, 7 min); 9, 12, 15, 18 (at 10, 13, 16, 19 min).
		{At: at(0), Started: 10, Failed: 3},
		{At: at(min(10)), Started: 10, Failed: 4},
		{At: at(min(20)), Started: 10, Failed: 3},
	}, chart.Buckets)
	whole, err := a.Totals(ctx, journal.Range{Since: at(0), Until: at(min(30))})
	require.NoError(t, err)
	require.Equal(t, whole, chart.Totals, "the chart's totals are Totals of its range")
	chart, err = a.Chart(ctx, journal.Range{Flow: "refunds", Since: at(min(5)), Until: at(min(15))}, 5*time.Minute)
	require.NoError(t, err)
	// refunds started 5, 7, 9 | 11, 13; failed 9 (at 10 min).
	require.Equal(t, []journal.Bucket{{At: at(min(5)), Started: 3}, {At: at(min(10)), Started: 2, Failed: 1}}, chart.Buckets)
	_, err = a.Chart(ctx, journal.Range{Since: at(0)}, time.Minute)
	require.ErrorIs(t, err, journal.ErrInvalidRange)
	_, err = a.Chart(ctx, journal.Range{Since: at(0), Until: at(min(30))}, time.Millisecond)
	require.ErrorIs(t, err, journal.ErrInvalidRange)
	_, err = a.Chart(ctx, journal.Range{Since: at(0), Until: at(0).Add(journal.MaxBuckets*time.Second + 1)}, time.Second)
	require.ErrorIs(t, err, journal.ErrInvalidRange, "one bucket more than MaxBuckets")
	_, err = a.Totals(ctx, journal.Range{Since: at(10), Until: at(0)})
	require.ErrorIs(t, err, journal.ErrInvalidRange)

	groups, err := a.FailedGroups(ctx, journal.Range{}, 0)
	require.NoError(t, err)
	type g struct {
		Flow, Step, Pattern string
		Runs                int64
	}
	var got []g
	for _, x := range groups {
		got = append(got, g{x.Flow, x.Step, x.Pattern, x.Runs})
	}
	// Failed: 0 (o, code 7), 3 (r, 51), 6 (o, 7), 9 (r, 51), 12 (o, 7),
	// 15 (r, 51), 18 (o, 7), 21 (r, 51), 24 (o, 7), 27 (r, 51).
	require.Equal(t, []g{
		{"refunds", "charge", "charge: card declined (code <n>) for order <id>", 5},
		{"orders", "charge", "charge: card declined (code <n>) for order <id>", 5},
	}, got)
	require.Equal(t, at(min(28)), groups[0].Newest)
	require.Equal(t, at(min(4)), groups[0].Oldest)
	require.Equal(t, "charge: card declined (code 51) for order 00000027", groups[0].Example)

	groups, err = a.FailedGroups(ctx, journal.Range{Flow: "orders", Since: at(min(10)), Until: at(min(20))}, 1)
	require.NoError(t, err)
	require.Len(t, groups, 1)
	require.Equal(t, int64(2), groups[0].Runs, "orders 12 and 18 failed between 10 and 20 min")

	ref := journal.GroupRef{Flow: "orders", Step: "charge", Pattern: "charge: card declined (code <n>) for order <id>"}
	runs, err := a.FailedGroupRuns(ctx, ref, journal.Range{}, 3)
	require.NoError(t, err)
	require.Equal(t, []string{"a00", "a06", "a12"}, runIDs(runs), "first to fail first")
	runs, err = a.FailedGroupRuns(ctx, journal.GroupRef{Flow: "orders", Step: "charge", Pattern: "nothing"}, journal.Range{}, 0)
	require.NoError(t, err)
	require.Empty(t, runs)
}

// errorPatterns: an Aggregator groups errors by ErrorPattern, whatever
// computes it.
func errorPatterns(t *testing.T, j journal.Journal) {
	a, ok := j.(journal.Aggregator)
	if !ok {
		t.Skip("not an Aggregator")
	}
	ctx := ctxOf(t)
	i := 0
	want := map[string]int64{}
	for text, pattern := range Patterns {
		require.Equal(t, pattern, journal.ErrorPattern(text), text)
		require.Equal(t, pattern, journal.ErrorPattern(pattern), "a pattern's pattern is itself")
		id := fmt.Sprintf("p%02d", i)
		record(t, j, start(id, "orders", i, `{}`))
		f := step(id, "orders", "charge", 1, 1, i, "failed", journal.Failed, "charge")
		f.Error = text
		record(t, j, f)
		want[pattern]++
		i++
	}
	groups, err := a.FailedGroups(ctx, journal.Range{}, 0)
	require.NoError(t, err)
	got := map[string]int64{}
	for _, g := range groups {
		got[g.Pattern] += g.Runs
		runs, err := a.FailedGroupRuns(ctx, journal.GroupRef{Flow: g.Flow, Step: g.Step, Pattern: g.Pattern}, journal.Range{}, 0)
		require.NoError(t, err)
		require.Len(t, runs, int(g.Runs), g.Pattern)
	}
	require.Equal(t, want, got)
}

// chartEdges: a chart counts each run in the bucket its time falls in,
// a time on a bucket's edge in the bucket it begins, and nothing at or
// after Until or before Since; its last bucket ends at Until; a run that
// failed counts as failed while its status says so (compensating: at its
// last change), not once replayed; its totals count every status apart.
func chartEdges(t *testing.T, j journal.Journal) {
	a, ok := j.(journal.Aggregator)
	if !ok {
		t.Skip("not an Aggregator")
	}
	ctx := ctxOf(t)
	// run starts flow's run id at started and, unless it is Running,
	// gives it status with its last change at changed.
	run := func(id, flow string, started, changed int, status journal.Status) {
		record(t, j, start(id, flow, started, `{}`))
		if status != journal.Running {
			e := step(id, flow, "charge", 1, 1, changed-1, "x", status, "charge")
			record(t, j, e)
		}
	}
	// Buckets of 10 minutes from 600 s to 2100 s: [600, 1200), [1200,
	// 1800), [1800, 2100).
	rg := journal.Range{Since: at(600), Until: at(2100)}
	var started, failed [3]int64
	totals := map[journal.Status]int64{}
	// Status k (of Statuses) for k+1 runs, so that no two statuses' counts
	// are alike: started between 610 and 2039 s, changed 30 s later.
	for k, st := range journal.Statuses() {
		for i := range k + 1 {
			s := 610 + (k*97+i*389)%1430
			run(fmt.Sprintf("e%d-%d", k, i), "orders", s, s+30, st)
			started[(s-600)/600]++
			totals[st]++
			if journal.FailedStatus(st) {
				failed[(s+30-600)/600]++
			}
		}
	}
	// At the edges: at Since (bucket 0), a second before and at the
	// second bucket's start, a second before Until (the last bucket), at
	// Until (none); started before Since and failed at it (failed in
	// bucket 0); failed at Until (none); compensating since 1300 (failed
	// in bucket 1).
	run("since", "orders", 600, 650, journal.Completed)
	run("edge-0", "orders", 1199, 1250, journal.Completed)
	run("edge-1", "orders", 1200, 1250, journal.Completed)
	run("last", "orders", 2099, 2099, journal.Running)
	run("until", "orders", 2100, 2100, journal.Running)
	run("before", "orders", 599, 600, journal.Failed)
	run("fails-at-until", "orders", 2000, 2100, journal.Unresolved)
	run("compensating", "orders", 700, 1300, journal.Compensating)
	// Failed at 800 and replayed: running again, not failed.
	run("replayed", "orders", 750, 800, journal.Failed)
	again := step("replayed", "orders", "charge", 1, 1, 900, "started", journal.Running, "charge")
	again.Key, again.Seq, again.Replays = "charge/replay-1", journal.Seq(1, 2, 1, 0), 1
	record(t, j, again)
	started[0] += 4 // since, edge-0, compensating, replayed
	started[1]++    // edge-1
	started[2] += 2 // last, fails-at-until
	failed[0]++     // before
	failed[1]++     // compensating
	totals[journal.Completed] += 3
	totals[journal.Running] += 2
	totals[journal.Unresolved]++
	totals[journal.Compensating]++
	// Another flow's, started and failed in bucket 1: counted with no
	// flow only.
	run("refund", "refunds", 1300, 1400, journal.Failed)

	want := func(flow string) journal.Chart {
		c := journal.Chart{Buckets: []journal.Bucket{{At: at(600)}, {At: at(1200)}, {At: at(1800)}}}
		for i := range c.Buckets {
			c.Buckets[i].Started, c.Buckets[i].Failed = started[i], failed[i]
		}
		for _, st := range journal.Statuses() {
			c.Totals = append(c.Totals, journal.StatusCount{Status: st, Runs: totals[st]})
		}
		if flow == "" {
			c.Buckets[1].Started++
			c.Buckets[1].Failed++
			c.Totals[slices.Index(journal.Statuses(), journal.Failed)].Runs++
		}
		return c
	}
	for _, flow := range []string{"orders", ""} {
		r := rg
		r.Flow = flow
		got, err := a.Chart(ctx, r, 10*time.Minute)
		require.NoError(t, err)
		require.Equal(t, want(flow), got, "flow %q", flow)
		tot, err := a.Totals(ctx, r)
		require.NoError(t, err)
		require.Equal(t, got.Totals, tot, "flow %q: Totals of the range", flow)
		var sum, sumTotals int64
		for _, b := range got.Buckets {
			sum += b.Started
		}
		for _, c := range got.Totals {
			sumTotals += c.Runs
		}
		require.Equal(t, sum, sumTotals, "flow %q: the buckets' started are the totals'", flow)
	}
}
