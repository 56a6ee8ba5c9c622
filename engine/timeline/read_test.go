package timeline

import (
	"context"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/acemq/acemq-flow/engine/journal"
	"github.com/acemq/acemq-flow/engine/timeline/timelinetest"
)

// briefMemory is a Memory journal that reads timelines briefly, as
// journal.BriefTimeline says, counting the branch events it reads whole.
type briefMemory struct {
	*journal.Memory
	whole, timelines int
}

func (b *briefMemory) Timeline(ctx context.Context, id string) ([]journal.Event, error) {
	b.timelines++
	return b.Memory.Timeline(ctx, id)
}

func (b *briefMemory) BriefTimeline(ctx context.Context, id string) ([]journal.Event, error) {
	events, err := b.Memory.Timeline(ctx, id)
	for i, e := range events {
		if strings.HasPrefix(e.Key, "branch/") || strings.HasPrefix(e.Key, "arrived/") {
			events[i] = journal.Event{RunID: e.RunID, Key: e.Key, Kind: e.Kind, Step: e.Step, Outcome: e.Outcome, Seq: e.Seq}
		}
	}
	// Not in order, as the contract allows.
	slices.Reverse(events)
	own := slices.DeleteFunc(slices.Clone(events), func(e journal.Event) bool { return e.Flow == "" })
	slices.Reverse(own)
	return append(own, slices.DeleteFunc(events, func(e journal.Event) bool { return e.Flow != "" })...), err
}

func (b *briefMemory) BranchEvents(ctx context.Context, id string, refs []journal.BranchRef) ([]journal.Event, error) {
	events, err := b.Memory.Timeline(ctx, id)
	out := []journal.Event{}
	for _, e := range events {
		join, i, ok := branchKey(e.Key)
		if ok && slices.Contains(refs, journal.BranchRef{Join: join, Branch: i}) {
			out = append(out, e)
		}
	}
	b.whole += len(out)
	return out, err
}

// TestReadAndFill: read briefly and filled, a fork's counts, statuses and
// the shown branches' events are what the whole timeline gives; only the
// shown branches are read whole; a page of more than wholeBranches reads
// the whole timeline instead; a journal that cannot read briefly gives
// the whole timeline at once.
func TestReadAndFill(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	mem, err := journal.NewMemory(0)
	require.NoError(t, err)
	const items = 1500
	events := timelinetest.ForkRun("r-1", "unit.shop", items, 1200, time.Date(2026, 12, 1, 9, 0, 0, 0, time.UTC))
	require.NoError(t, mem.Record(ctx, events))
	whole, err := mem.Timeline(ctx, "r-1")
	require.NoError(t, err)
	wantOwn, wantForks := Group(whole)

	pick := func(forks []*Fork, n int) {
		for _, f := range forks {
			page, _ := f.Page(0, n, nil)
			if last, ok := f.Find(f.Seen() - 1); ok && len(page) > 0 && page[len(page)-1].Branch != last.Branch {
				page = append(page, last)
			}
			f.Show(page)
		}
	}
	for _, n := range []int{3, wholeBranches + 1} {
		bm := &briefMemory{Memory: mem}
		own, forks, err := Read(ctx, bm, "r-1")
		require.NoError(t, err)
		require.Equal(t, wantOwn, own, "the run's own events, whole and in order")
		require.Len(t, forks, len(wantForks))
		pick(forks, n)
		pick(wantForks, n)
		require.NoError(t, Fill(ctx, bm, "r-1", forks))
		shown := 0
		for k, f := range forks {
			w := wantForks[k]
			require.Equal(t, []int{w.Seen(), w.Arrived, w.Failed, w.Unresolved, w.Stopped, w.Running},
				[]int{f.Seen(), f.Arrived, f.Failed, f.Unresolved, f.Stopped, f.Running}, "fork %s's counts", f.Step)
			require.Equal(t, w.Branches, f.Branches, "fork %s's shown branches, whole", f.Step)
			require.Equal(t, w.Hidden, f.Hidden)
			for _, b := range f.Branches {
				shown += len(b.Steps)
			}
		}
		if n <= wholeBranches {
			require.Equal(t, shown, bm.whole, "only the shown branches read whole")
			require.Zero(t, bm.timelines)
		} else {
			require.Zero(t, bm.whole)
			require.Equal(t, 1, bm.timelines, "a page of more than %d branches reads the whole timeline", wholeBranches)
		}
	}

	own, forks, err := Read(ctx, mem, "r-1")
	require.NoError(t, err)
	require.Equal(t, wantOwn, own)
	require.Equal(t, wantForks[1].All(), forks[1].All(), "a journal without BriefTimeline: whole at once")
	require.NoError(t, Fill(ctx, mem, "r-1", forks))

	_, _, err = Read(ctx, &briefMemory{Memory: mem}, "no-such-run")
	require.ErrorIs(t, err, journal.ErrRunNotFound)
}
