package timeline

import (
	"context"
	"fmt"

	"github.com/acemq/acemq-flow/engine/journal"
)

// wholeBranches is how many branches Fill reads by name; a page of more
// reads the whole timeline, which costs no more then.
const wholeBranches = 1000

// Read reads run id's timeline from j for Group, and groups it: the run's
// own events and its forks. From a journal.BriefTimeline the branches'
// events are brief (enough for their status), and Fill reads those of
// the branches shown; from any other journal they are whole. The error is
// the journal's (journal.ErrRunNotFound for no such run).
func Read(ctx context.Context, j journal.Journal, id string) (own []journal.Event, forks []*Fork, err error) {
	bt, brief := j.(journal.BriefTimeline)
	var events []journal.Event
	if brief {
		events, err = bt.BriefTimeline(ctx, id)
	} else {
		events, err = j.Timeline(ctx, id)
	}
	if err != nil {
		return nil, nil, err
	}
	own, forks = Group(events)
	for _, f := range forks {
		f.brief = brief
	}
	return own, forks, nil
}

// Fill gives the branches each fork shows (Fork.Branches, chosen with
// Show) their whole events, read from j, when Read read them briefly.
func Fill(ctx context.Context, j journal.Journal, id string, forks []*Fork) error {
	var want []journal.BranchRef
	for _, f := range forks {
		if !f.brief {
			continue
		}
		for _, b := range f.Branches {
			want = append(want, journal.BranchRef{Join: f.Join, Branch: b.Branch})
		}
	}
	if len(want) == 0 {
		return nil
	}
	var (
		events []journal.Event
		err    error
	)
	if bt, ok := j.(journal.BriefTimeline); ok && len(want) <= wholeBranches {
		events, err = bt.BranchEvents(ctx, id, want)
	} else {
		events, err = j.Timeline(ctx, id)
	}
	if err != nil {
		return fmt.Errorf("the branches of run %s: %w", id, err)
	}
	byJoin := map[string]map[int][]journal.Event{}
	for _, e := range events {
		join, i, ok := branchKey(e.Key)
		if !ok {
			continue
		}
		if byJoin[join] == nil {
			byJoin[join] = map[int][]journal.Event{}
		}
		byJoin[join][i] = append(byJoin[join][i], e)
	}
	for _, f := range forks {
		if !f.brief {
			continue
		}
		for k := range f.Branches {
			f.Branches[k].Steps = byJoin[f.Join][f.Branches[k].Branch]
		}
		f.brief = false
	}
	return nil
}
