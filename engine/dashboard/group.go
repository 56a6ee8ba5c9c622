package dashboard

import (
	"cmp"
	"context"
	"slices"
	"time"

	"github.com/acemq/acemq-flow/engine/journal"
)

// normalize is the pattern of an error text that runs of one cause share
// (journal.ErrorPattern), which groups are made by.
func normalize(err string) string { return journal.ErrorPattern(err) }

// group is failed runs of one flow, given up at one step, for errors of
// one pattern.
type group struct {
	Key     string
	Flow    string
	Step    string
	Pattern string
	// Example is the newest run's error as it was.
	Example string
	// Runs are the group's runs, newest first, when the page read them
	// (from a journal without aggregates, or for a replay's confirmation).
	Runs []journal.Run
	// N is how many runs the group holds.
	N      int64
	Oldest time.Time
	Newest time.Time
}

// Count is how many runs the group holds.
func (g group) Count() int { return int(g.N) }

// groupKey identifies a group in a form: short, and the same for the same
// flow, step and pattern (journal.GroupKey).
func groupKey(flow, step, pattern string) string { return journal.GroupKey(flow, step, pattern) }

// groupFailed groups runs (newest first) by flow, step and error pattern:
// the biggest group first, then the one that failed last.
func groupFailed(runs []journal.Run) []group {
	idx := map[string]int{}
	var out []group
	for _, r := range runs {
		p := normalize(r.Error)
		k := groupKey(r.Flow, r.Step, p)
		i, ok := idx[k]
		if !ok {
			i = len(out)
			idx[k] = i
			out = append(out, group{Key: k, Flow: r.Flow, Step: r.Step, Pattern: p, Example: r.Error, Oldest: failedAt(r), Newest: failedAt(r)})
		}
		g := &out[i]
		g.Runs = append(g.Runs, r)
		g.N++
		if at := failedAt(r); at.Before(g.Oldest) {
			g.Oldest = at
		} else if at.After(g.Newest) {
			g.Newest = at
		}
	}
	slices.SortStableFunc(out, func(a, b group) int {
		if c := cmp.Compare(len(b.Runs), len(a.Runs)); c != 0 {
			return c
		}
		return b.Newest.Compare(a.Newest)
	})
	return out
}

// failedAt is when a failed run stopped.
func failedAt(r journal.Run) time.Time {
	if r.EndedAt != nil {
		return *r.EndedAt
	}
	return r.UpdatedAt
}

// maxGroups is how many groups /failed shows.
const maxGroups = 100

// failedGroups are the failed groups of rg, the biggest first, and how
// many failed runs they hold: from the journal's aggregates over every
// failed run when it has them (journal.Aggregator), else from the newest
// MaxFailed failed runs (capped then says there may be more).
func (d *Dashboard) failedGroups(ctx context.Context, rg journal.Range) (groups []group, total int64, capped bool, err error) {
	if agg, ok := d.journal.(journal.Aggregator); ok {
		gs, err := agg.FailedGroups(ctx, rg, maxGroups)
		if err != nil {
			return nil, 0, false, err
		}
		for _, g := range gs {
			groups = append(groups, group{Key: g.Key(), Flow: g.Flow, Step: g.Step, Pattern: g.Pattern, Example: g.Example,
				N: g.Runs, Oldest: g.Oldest, Newest: g.Newest})
			total += g.Runs
		}
		return groups, total, false, nil
	}
	runs, err := d.journal.Runs(ctx, journal.Query{Flow: rg.Flow, Since: rg.Since, Statuses: []journal.Status{journal.Failed}, Limit: d.cfg.MaxFailed})
	if err != nil {
		return nil, 0, false, err
	}
	return groupFailed(runs), int64(len(runs)), len(runs) == d.cfg.MaxFailed, nil
}

// findGroup is the failed group with key (nil when none has it now), with
// the runs a replay of it takes, the first to fail first, at most
// MaxGroupReplay.
func (d *Dashboard) findGroup(ctx context.Context, key string) (*group, []journal.Run, error) {
	groups, _, _, err := d.failedGroups(ctx, journal.Range{})
	if err != nil {
		return nil, nil, err
	}
	i := slices.IndexFunc(groups, func(g group) bool { return g.Key == key })
	if i < 0 {
		return nil, nil, nil
	}
	g := groups[i]
	if agg, ok := d.journal.(journal.Aggregator); ok {
		runs, err := agg.FailedGroupRuns(ctx, journal.GroupRef{Flow: g.Flow, Step: g.Step, Pattern: g.Pattern}, journal.Range{}, d.cfg.MaxGroupReplay)
		if err != nil {
			return nil, nil, err
		}
		g.Runs = runs
		return &g, runs, nil
	}
	take := slices.Clone(g.Runs)
	slices.Reverse(take)
	return &g, take[:min(len(take), d.cfg.MaxGroupReplay)], nil
}
