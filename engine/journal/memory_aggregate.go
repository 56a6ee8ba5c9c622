package journal

import (
	"cmp"
	"context"
	"fmt"
	"slices"
	"strings"
	"time"
)

var _ Aggregator = (*Memory)(nil)

// all is a copy of every run m keeps.
func (m *Memory) all() []Run {
	m.mu.RLock()
	defer m.mu.RUnlock()
	out := make([]Run, 0, len(m.runs))
	for _, r := range m.runs {
		out = append(out, r.run)
	}
	return out
}

// Totals counts the runs started in r by status (Aggregator).
func (m *Memory) Totals(_ context.Context, r Range) ([]StatusCount, error) {
	if err := r.Check(); err != nil {
		return nil, err
	}
	return totals(m.all(), r), nil
}

// totals counts the runs of runs started in r by status, every status
// listed, in Statuses' order.
func totals(runs []Run, r Range) []StatusCount {
	n := map[Status]int64{}
	for _, run := range runs {
		if (r.Flow == "" || run.Flow == r.Flow) && r.in(run.StartedAt) {
			n[run.Status]++
		}
	}
	out := make([]StatusCount, 0, len(Statuses()))
	for _, s := range Statuses() {
		out = append(out, StatusCount{Status: s, Runs: n[s]})
	}
	return out
}

// CheckBuckets refuses, with ErrInvalidRange, what Chart refuses, and
// says how many buckets r holds.
func CheckBuckets(r Range, width time.Duration) (int, error) {
	if err := r.Check(); err != nil {
		return 0, err
	}
	if r.Since.IsZero() || r.Until.IsZero() {
		return 0, fmt.Errorf("%w: buckets need both ends of their range", ErrInvalidRange)
	}
	if width < time.Second {
		return 0, fmt.Errorf("%w: buckets of %s, want at least 1s", ErrInvalidRange, width)
	}
	n := int((r.Until.Sub(r.Since) + width - 1) / width)
	if n > MaxBuckets {
		return 0, fmt.Errorf("%w: %d buckets of %s, want at most %d", ErrInvalidRange, n, width, MaxBuckets)
	}
	return n, nil
}

// Chart counts runs started and failed per bucket, and started by status
// (Aggregator), from one copy of the runs.
func (m *Memory) Chart(_ context.Context, r Range, width time.Duration) (Chart, error) {
	n, err := CheckBuckets(r, width)
	if err != nil {
		return Chart{}, err
	}
	runs := m.all()
	out := Chart{Buckets: make([]Bucket, n), Totals: totals(runs, r)}
	for i := range out.Buckets {
		out.Buckets[i].At = r.Since.Add(time.Duration(i) * width).UTC()
	}
	for _, run := range runs {
		if r.Flow != "" && run.Flow != r.Flow {
			continue
		}
		if r.in(run.StartedAt) {
			out.Buckets[run.StartedAt.Sub(r.Since)/width].Started++
		}
		if at := FailedAt(run); FailedStatus(run.Status) && r.in(at) {
			out.Buckets[at.Sub(r.Since)/width].Failed++
		}
	}
	return out, nil
}

// failedIn are the runs in status Failed of r.Flow that failed in r.
func (m *Memory) failedIn(r Range) []Run {
	var out []Run
	for _, run := range m.all() {
		if run.Status == Failed && (r.Flow == "" || run.Flow == r.Flow) && r.in(FailedAt(run)) {
			out = append(out, run)
		}
	}
	return out
}

// FailedGroups groups the failed runs of r (Aggregator).
func (m *Memory) FailedGroups(_ context.Context, r Range, limit int) ([]FailedGroup, error) {
	if err := r.Check(); err != nil {
		return nil, err
	}
	var groups []FailedGroup
	for _, run := range m.failedIn(r) {
		at := FailedAt(run)
		groups = append(groups, FailedGroup{Flow: run.Flow, Step: run.Step, Pattern: ErrorPattern(run.Error), Example: run.Error,
			Runs: 1, Oldest: at, Newest: at})
	}
	return limited(MergeGroups(groups), limit), nil
}

// FailedGroupRuns returns the runs of a failed group (Aggregator).
func (m *Memory) FailedGroupRuns(_ context.Context, g GroupRef, r Range, limit int) ([]Run, error) {
	if err := r.Check(); err != nil {
		return nil, err
	}
	r.Flow = g.Flow
	var out []Run
	for _, run := range m.failedIn(r) {
		if run.Step == g.Step && ErrorPattern(run.Error) == g.Pattern {
			out = append(out, run)
		}
	}
	slices.SortFunc(out, func(a, b Run) int {
		return cmp.Or(FailedAt(a).Compare(FailedAt(b)), strings.Compare(a.ID, b.ID))
	})
	return limited(out, limit), nil
}
