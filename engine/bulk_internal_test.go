package engine

import (
	"context"
	"fmt"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/acemq/acemq-flow/dsl"
	"github.com/acemq/acemq-flow/engine/journal"
)

// countingJournal counts the runs a journal's Runs handed out.
type countingJournal struct {
	journal.Journal
	read int
}

func (c *countingJournal) Runs(ctx context.Context, q journal.Query) ([]journal.Run, error) {
	runs, err := c.Journal.Runs(ctx, q)
	c.read += len(runs)
	return runs, err
}

// failedRuns records n failed runs of flow f, started at start(i).
func failedRuns(t *testing.T, j journal.Journal, f string, n int, start func(i int) time.Time) {
	t.Helper()
	var events []journal.Event
	for i := range n {
		at := start(i)
		events = append(events, journal.Event{RunID: fmt.Sprintf("%s-%04d", f, i), Flow: f, Key: "start", Kind: journal.KindStart,
			StartedAt: at, EndedAt: at, Status: journal.Failed, RunStep: "ship", Seq: 1})
	}
	require.NoError(t, j.Record(context.Background(), events))
}

// TestRunPagesGiveEveryRunOnce: paging the journal by start time gives
// every selected run once, newest first, also when more runs than a page
// share one start time (to the nanosecond, or within the microsecond
// PostgreSQL keeps), and stops when there are no more.
func TestRunPagesGiveEveryRunOnce(t *testing.T) {
	t.Parallel()
	j, err := journal.NewMemory(0)
	require.NoError(t, err)
	base := time.Date(2026, 3, 1, 12, 0, 0, 0, time.UTC)
	// 300 runs a millisecond apart, 170 at one instant, 90 within one
	// microsecond, and runs of another flow in between.
	failedRuns(t, j, "f", 300, func(i int) time.Time { return base.Add(time.Duration(i) * time.Millisecond) })
	failedRuns(t, j, "tie", 170, func(int) time.Time { return base.Add(150 * time.Millisecond) })
	failedRuns(t, j, "near", 90, func(i int) time.Time { return base.Add(200*time.Millisecond + time.Duration(i)*7*time.Nanosecond) })
	failedRuns(t, j, "other", 50, func(i int) time.Time { return base.Add(time.Duration(i) * time.Millisecond) })
	for _, flowRuns := range []struct {
		flow string
		want int
	}{{"", 610}, {"tie", 170}, {"f", 300}} {
		for _, size := range []int{1, 7, 64, 1000} {
			pages := newRunPages(j, journal.Query{Flow: flowRuns.flow, Statuses: []journal.Status{journal.Failed}}, size)
			seen := map[string]bool{}
			var last journal.Run
			for {
				page, err := pages.next(context.Background())
				require.NoError(t, err)
				if len(page) == 0 {
					break
				}
				for _, r := range page {
					require.False(t, seen[r.ID], "flow %q page %d: %s given twice", flowRuns.flow, size, r.ID)
					seen[r.ID] = true
					if last.ID != "" {
						require.False(t, r.StartedAt.After(last.StartedAt), "newest first")
					}
					last = r
				}
			}
			require.Len(t, seen, flowRuns.want, "flow %q, pages of %d", flowRuns.flow, size)
			require.LessOrEqual(t, len(pages.edge), 170+90, "only the runs near the page's edge are remembered")
		}
	}
}

// TestSelectionReadsOnlyWhatItNeeds: a bulk replay whose limit is met by
// the newest runs reads one page of the journal, not every failed run.
func TestSelectionReadsOnlyWhatItNeeds(t *testing.T) {
	t.Parallel()
	mem, err := journal.NewMemory(0)
	require.NoError(t, err)
	base := time.Date(2026, 3, 1, 12, 0, 0, 0, time.UTC)
	failedRuns(t, mem, "f", 3000, func(i int) time.Time { return base.Add(time.Duration(i) * time.Millisecond) })
	j := &countingJournal{Journal: mem}
	e := &Engine{journal: j}
	var res BulkResult
	s := selection{e: e, req: BulkReplay{}, where: nil, limit: 5, res: &res, report: func() {}}
	runs, err := s.choose(context.Background())
	require.NoError(t, err)
	require.Len(t, runs, 5)
	require.Equal(t, "f-2999", runs[0].ID, "newest first")
	require.Equal(t, 5, j.read, "without Where, the limit is the page")

	// With a condition, pages are read until the limit is met.
	cond, err := dsl.Condition(`run.run_id in ["f-2100", "f-1200", "f-0300"]`, nil, map[string]any{"run": whereRun{}})
	require.NoError(t, err)
	j.read, res = 0, BulkResult{}
	s = selection{e: e, where: &where{cond: cond}, limit: 2, res: &res, report: func() {}}
	runs, err = s.choose(context.Background())
	require.NoError(t, err)
	require.Equal(t, []string{"f-2100", "f-1200"}, []string{runs[0].ID, runs[1].ID})
	require.Equal(t, 1800, res.Selected, "looked at from the newest down to f-1200")
	require.Equal(t, 1798, res.Skipped)
	require.Less(t, j.read, 2100, "the pages down to f-1200, and no further")
}
