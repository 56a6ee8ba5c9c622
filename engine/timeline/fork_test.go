package timeline

import (
	"fmt"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/acemq/acemq-flow/engine/journal"
	"github.com/acemq/acemq-flow/engine/timeline/timelinetest"
)

// TestGroup: every key a branch's events are recorded under puts
// the event with its branch (its steps, its arrival under either key,
// the compensation of its own work); what is no branch's stays the run's;
// each branch's status follows from its events.
func TestGroup(t *testing.T) {
	t.Parallel()
	ev := func(key, step, outcome string) journal.Event {
		kind := journal.KindStep
		if strings.HasPrefix(key, "compensation/") {
			kind = journal.KindCompensation
		}
		return journal.Event{RunID: "r-1", Key: key, Kind: kind, Step: step, Outcome: outcome}
	}
	events := []journal.Event{
		ev("start", "", "started"),
		ev("step/0/0/1", "fulfil", "forked: 3 branches"),
		ev("branch/0/0/fulfil/0/step/0/0/1", "pick", "completed"),
		ev("branch/0/0/fulfil/0/step/0/1/1", "reserve", "stopped: another branch was given up"),
		ev("branch/0/0/fulfil/1/step/0/0/1", "book", "failed"),
		ev("branch/0/0/fulfil/2/step/0/0/1", "call", "retried"),
		ev("branch/0/0/fulfil/2/arrived/0/0/fulfil/2", "fulfil", "branch 2 arrived after another was given up"),
		ev("compensation/0/0/0/fulfil/0/0/1", "pick", "compensated"),
		ev("compensation/0/0/0/fulfil/1/0/1", "book-undo", "compensation_failed"),
		ev("branches-undone/0/0/fulfil", "fulfil", "compensated: every branch undone"),
		ev("compensation/0/0/1", "charge", "compensated"),
		ev("replay/1", "", "replayed"),
		// A fork's branches whose fork event is not (yet) in the timeline.
		ev("branch/1/1/each/7/step/1/0/1", "square", "retried"),
		ev("arrived/1/1/each/3", "each", "item 3 arrived"),
		ev("join/1/1/each/step/1/1/1", "each", "completed"),
		// Keys that only look like a branch's.
		ev("branch/x/1/each/7/step/1/0/1", "square", "completed"),
		ev("arrived/1/1/each/seven", "each", "item 7 arrived"),
	}
	own, forks := Group(events)
	var ownKeys []string
	for _, e := range own {
		ownKeys = append(ownKeys, e.Key)
	}
	require.Equal(t, []string{"start", "step/0/0/1", "branches-undone/0/0/fulfil", "compensation/0/0/1", "replay/1",
		"join/1/1/each/step/1/1/1", "branch/x/1/each/7/step/1/0/1", "arrived/1/1/each/seven"}, ownKeys)
	require.Len(t, forks, 2)

	f := forks[0]
	require.Equal(t, "fulfil", f.Step)
	require.Equal(t, "0/0/fulfil", f.Join)
	require.Equal(t, "parallel", f.Kind)
	require.Equal(t, 3, f.Total)
	require.Equal(t, 3, f.HandedOut)
	require.Equal(t, []int{1, 0, 1, 1, 0}, []int{f.Arrived, f.Failed, f.Unresolved, f.Stopped, f.Running})
	var statuses []string
	for _, b := range f.all {
		statuses = append(statuses, fmt.Sprintf("%d:%s:%d", b.Branch, b.Status, len(b.Steps)))
	}
	require.Equal(t, []string{"0:stopped:3", "1:unresolved:2", "2:arrived:2"}, statuses)

	f = forks[1]
	require.Equal(t, "each", f.Step)
	require.Equal(t, 1, f.Replay)
	require.Equal(t, "foreach", f.Kind, "an item's arrival says so")
	require.True(t, f.Joined, "its join fired")
	require.False(t, forks[0].Joined)
	require.Zero(t, f.Total, "nothing says how many")
	require.Equal(t, []int{1, 1}, []int{f.Arrived, f.Running})
	require.Equal(t, []int{3, 7}, []int{f.all[0].Branch, f.all[1].Branch}, "by index")
}

// TestHandedOutFromTheJoin: a journal that keeps joins says how many
// branches were handed out, counting those whose events are still to
// come; a fork whose join it does not have keeps the count of its events.
func TestHandedOutFromTheJoin(t *testing.T) {
	t.Parallel()
	ctx := t.Context()
	j, err := journal.NewMemory(0)
	require.NoError(t, err)
	_, _, err = j.OpenJoin(ctx, journal.Join{RunID: "r-1", Key: "0/2/each", Total: 10, Limit: 4}, make([][]byte, 10))
	require.NoError(t, err)
	events := timelinetest.ForkRun("r-1", "unit.shop", 10, 10, time.Time{})
	// Only two items have events so far.
	events = slices.DeleteFunc(events, func(e journal.Event) bool {
		_, i, ok := branchKey(e.Key)
		return ok && strings.Contains(e.Key, "/each/") && i >= 2
	})
	_, forks := Group(events)
	require.NoError(t, HandedOut(ctx, j, "r-1", forks))
	require.Equal(t, 2, forks[0].HandedOut, "no join for the Parallel: the branches with events")
	require.Equal(t, 4, forks[1].HandedOut, "the join handed out 4")
	require.Nil(t, forks[0].State)
	require.NotNil(t, forks[1].State)
	require.Equal(t, []int{10, 4, 0}, []int{forks[1].State.Total, forks[1].State.Dispatched, forks[1].State.Arrived})
	require.Equal(t, 10, forks[1].Total)
}

// TestPagesOfAFork: a fork's branches come a page at a time, in index
// order, all of them or those a filter keeps; one is found by its index;
// a fork shows none until asked.
func TestPagesOfAFork(t *testing.T) {
	t.Parallel()
	_, forks := Group(timelinetest.ForkRun("r-1", "unit.shop", 1000, 500, time.Time{}))
	f := forks[1]
	require.Equal(t, 504, f.Seen())
	require.Empty(t, f.Branches)
	require.NotNil(t, f.Branches)
	require.Equal(t, 504, f.Hidden)

	index := func(bs []Branch) []int {
		out := []int{}
		for _, b := range bs {
			out = append(out, b.Branch)
		}
		return out
	}
	page, n := f.Page(0, 3, nil)
	require.Equal(t, []int{0, 1, 2}, index(page))
	require.Equal(t, 504, n)
	page, _ = f.Page(502, 50, nil)
	require.Equal(t, []int{502, 503}, index(page), "the last page is short")
	page, _ = f.Page(600, 50, nil)
	require.Empty(t, page)
	page, _ = f.Page(-5, 1, nil)
	require.Equal(t, []int{0}, index(page))

	notArrived := func(b Branch) bool { return b.Status != StatusArrived }
	page, n = f.Page(1, 2, notArrived)
	require.Equal(t, []int{501, 502}, index(page))
	require.Equal(t, 4, n, "one failed, three stopped")

	b, ok := f.Find(500)
	require.True(t, ok)
	require.Equal(t, StatusFailed, b.Status)
	require.Equal(t, "square", b.Steps[0].Step)
	_, ok = f.Find(700)
	require.False(t, ok, "never handed out")

	f.Show(page)
	require.Equal(t, []int{501, 502}, index(f.Branches))
	require.Equal(t, 502, f.Hidden)
	require.Len(t, f.All(), 504)
}

// TestGroupIsQuickOnAHundredThousandItems: grouping the timeline of a
// ForEach of 100,000 items (some 150,000 events) is one pass.
func TestGroupIsQuickOnAHundredThousandItems(t *testing.T) {
	t.Parallel()
	events := timelinetest.ForkRun("r-1", "unit.shop", 100_000, 100_000, time.Time{})
	began := time.Now()
	own, forks := Group(events)
	took := time.Since(began)
	t.Logf("grouped %d events in %s", len(events), took)
	require.Less(t, took, 5*time.Second)
	require.Len(t, forks, 2)
	require.Equal(t, 100_000, forks[1].Arrived)
	require.True(t, forks[1].Joined)
	require.Less(t, len(own), 10)
}

// TestBranchKey: which keys are a branch's, of which join and index.
func TestBranchKey(t *testing.T) {
	tests := []struct {
		key    string
		join   string
		branch int
		ok     bool
	}{
		{"branch/0/1/each/57/step/0/0/1", "0/1/each", 57, true},
		{"branch/2/3/fork/0/", "2/3/fork", 0, true},
		{"branch/0/1/each/57", "", 0, false},
		{"branch/0/1//57/step", "", 0, false},
		{"branch/x/1/each/57/step", "", 0, false},
		{"branch/0/1/each/-1/step", "", 0, false},
		{"branch/0/1/each/99999999999999999999/step", "", 0, false},
		{"arrived/0/1/each/57", "0/1/each", 57, true},
		{"arrived/0/1/each/57/more", "", 0, false},
		{"arrived/0/1/each", "", 0, false},
		{"compensation/1/0/1/each/57/0/1", "0/1/each", 57, true},
		{"compensation/1/0/1/each/57/0", "", 0, false},
		{"compensation/1/0/1/each/57/0/1/2", "", 0, false},
		{"compensation/x/0/1/each/57/0/1", "", 0, false},
		{"compensation/1/0/1", "", 0, false},
		{"step/0/1/1", "", 0, false},
		{"join/0/1/each/step/0/1/1", "", 0, false},
		{"", "", 0, false},
	}
	for _, tt := range tests {
		join, branch, ok := branchKey(tt.key)
		require.Equal(t, tt.ok, ok, "%q", tt.key)
		if ok {
			require.Equal(t, tt.join, join, "%q", tt.key)
			require.Equal(t, tt.branch, branch, "%q", tt.key)
		}
	}
}
