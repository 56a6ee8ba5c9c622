package journal

import (
	"cmp"
	"context"
	"fmt"
	"slices"
	"strings"
	"sync"
	"time"
)

// DefaultMaxRuns is how many runs a Memory journal keeps unless told
// otherwise.
const DefaultMaxRuns = 100_000

// Memory is a journal in this process's memory: what a worker with no
// database records, and what tests use. It forgets everything on restart
// and knows only the runs this process saw. Beyond MaxRuns runs it forgets
// the oldest stopped ones first, so it never grows without bound. Safe
// for concurrent use.
type Memory struct {
	max int

	mu   sync.RWMutex
	runs map[string]*memRun
	// data is what PutData kept, by run: apart from runs, since data may
	// be put before anything of its run is recorded.
	data map[string]map[string][]byte
	// joins are the runs' joins (JoinStore), by run and key.
	joins map[string]map[string]*memJoin
	// limits are the steps' limits (LimitStore), under their own lock.
	limits memLimits
	// versions are the flow versions served (VersionStore), under mu.
	versions memVersions
	// workers are the workers' reports (WorkerStore), under mu.
	workers memWorkers
}

var (
	_ StepInputs  = (*Memory)(nil)
	_ WorkerStore = (*Memory)(nil)
)

type memRun struct {
	run    Run
	events map[string]Event
	// inputs are the step inputs of its events (StepInputs), by key.
	inputs map[string]StepInput
}

// NewMemory returns an empty journal keeping at most maxRuns runs
// (DefaultMaxRuns when 0). A negative maxRuns is refused.
func NewMemory(maxRuns int) (*Memory, error) {
	if maxRuns < 0 {
		return nil, fmt.Errorf("journal: max runs %d, want 0 (the default) or more", maxRuns)
	}
	if maxRuns == 0 {
		maxRuns = DefaultMaxRuns
	}
	return &Memory{max: maxRuns, runs: map[string]*memRun{}, data: map[string]map[string][]byte{}, joins: map[string]map[string]*memJoin{}}, nil
}

// Record applies events by the package's rules. A batch holding an event
// that does not Validate is refused whole.
func (m *Memory) Record(_ context.Context, events []Event) error {
	for _, e := range events {
		if err := e.Validate(); err != nil {
			return err
		}
	}
	m.mu.Lock()
	defer m.mu.Unlock()
	for _, e := range events {
		r, ok := m.runs[e.RunID]
		if !ok {
			r = &memRun{run: NewRun(e), events: map[string]Event{}}
			m.runs[e.RunID] = r
		}
		e.Error = Truncate(e.Error)
		Apply(&r.run, e)
		// The input is the run's; the timeline does not repeat it, nor
		// the steps' inputs, which StepInputs gives.
		e.Input = nil
		if e.HasInput() {
			if r.inputs == nil {
				r.inputs = map[string]StepInput{}
			}
			r.inputs[e.Key] = StepInput{Step: e.Step, Key: e.Key, Seq: e.Seq, Replays: e.Replays, Attempt: e.Attempt, At: e.StartedAt,
				Input: slices.Clone(e.StepInput), State: e.StepState, Size: e.InputSize}
		} else {
			delete(r.inputs, e.Key)
		}
		e.StepInput, e.StepState, e.InputSize = nil, "", 0
		r.events[e.Key] = e
	}
	if len(m.runs) > m.max {
		m.evictLocked()
	}
	return nil
}

// NewRun is the run an event creates when its run is not yet known: the
// first step of the rules every implementation follows.
func NewRun(e Event) Run {
	return Run{ID: e.RunID, Flow: e.Flow, Status: Running, StartedAt: e.StartedAt, UpdatedAt: e.EndedAt, Seq: -1}
}

// Apply applies e to r by the package's rules (r is e's run): the earliest
// start, the input (and the version) of the first start event of the
// latest replay (a run started again), and e's status change unless r already shows a later
// one.
func Apply(r *Run, e Event) {
	if e.Kind == KindStart && e.StartedAt.Before(r.StartedAt) {
		// A run first heard of from a later event started when it says.
		r.StartedAt = e.StartedAt
	}
	if len(e.Input) > 0 && (len(r.Input) == 0 || e.Replays > r.InputReplays) {
		// The first input of the latest replay: a run started again is
		// known by what it was started with last.
		r.Input, r.InputReplays, r.Version, r.BusinessKey = e.Input, e.Replays, e.Version, e.BusinessKey
	}
	if e.Status == "" || e.Seq < r.Seq {
		return
	}
	r.Status, r.Seq, r.Step, r.Replays = e.Status, e.Seq, e.RunStep, e.Replays
	r.Error = Truncate(e.Error)
	r.UpdatedAt = e.EndedAt
	r.DueAt, r.DeadLetter = e.DueAt, e.DeadLetter
	r.EndedAt = nil
	if e.Status.Stopped() {
		at := e.EndedAt
		r.EndedAt = &at
	}
}

// evictLocked forgets the oldest stopped runs beyond max, then the oldest
// of any kind if stopped ones were not enough.
func (m *Memory) evictLocked() {
	all := make([]*memRun, 0, len(m.runs))
	for _, r := range m.runs {
		all = append(all, r)
	}
	slices.SortFunc(all, func(a, b *memRun) int {
		if sa, sb := a.run.Status.Stopped(), b.run.Status.Stopped(); sa != sb {
			if sa {
				return -1
			}
			return 1
		}
		return a.run.StartedAt.Compare(b.run.StartedAt)
	})
	// Evict a tenth beyond the limit at once, so that a journal at its
	// limit does not sort on every record.
	for _, r := range all[:len(m.runs)-m.max+m.max/10] {
		delete(m.runs, r.run.ID)
		delete(m.data, r.run.ID)
		delete(m.joins, r.run.ID)
	}
}

// PutData keeps data under (runID, key), replacing what was there (see
// DataStore). The data goes when its run is forgotten; data of a run never
// recorded is forgotten, oldest runs first, once it is kept for more runs
// than MaxRuns.
func (m *Memory) PutData(_ context.Context, runID, key string, data []byte) error {
	if err := CheckDataKey(runID, key); err != nil {
		return err
	}
	m.mu.Lock()
	defer m.mu.Unlock()
	d := m.data[runID]
	if d == nil {
		d = map[string][]byte{}
		m.data[runID] = d
	}
	d[key] = append([]byte(nil), data...)
	if len(m.data) > m.max {
		for id := range m.data {
			if _, known := m.runs[id]; !known && id != runID {
				delete(m.data, id)
			}
		}
	}
	return nil
}

// Data returns what PutData kept under (runID, key), or an error matching
// ErrDataNotFound.
func (m *Memory) Data(_ context.Context, runID, key string) ([]byte, error) {
	m.mu.RLock()
	defer m.mu.RUnlock()
	b, ok := m.data[runID][key]
	if !ok {
		return nil, fmt.Errorf("%w: %q of run %q", ErrDataNotFound, key, runID)
	}
	return append([]byte(nil), b...), nil
}

// Run returns one run, or an error matching ErrRunNotFound.
func (m *Memory) Run(_ context.Context, id string) (Run, error) {
	m.mu.RLock()
	defer m.mu.RUnlock()
	r, ok := m.runs[id]
	if !ok {
		return Run{}, fmt.Errorf("%w: %q", ErrRunNotFound, id)
	}
	return r.run, nil
}

// CancelledSince returns the runs cancelled at or after since, those that
// ended first first, at most limit (CancelFeed).
func (m *Memory) CancelledSince(_ context.Context, since time.Time, limit int) ([]Run, error) {
	m.mu.RLock()
	out := []Run{}
	for _, r := range m.runs {
		if run := r.run; run.Status == Cancelled && run.EndedAt != nil && !run.EndedAt.Before(since) {
			out = append(out, run)
		}
	}
	m.mu.RUnlock()
	slices.SortFunc(out, func(a, b Run) int { return cmp.Or(a.EndedAt.Compare(*b.EndedAt), cmp.Compare(a.ID, b.ID)) })
	return limited(out, limit), nil
}

// Runs returns the runs q selects, in q's Order.
func (m *Memory) Runs(_ context.Context, q Query) ([]Run, error) {
	needle := strings.ToLower(q.ErrorContains)
	byDue := q.Order == SoonestDue
	m.mu.RLock()
	out := []Run{}
	for _, r := range m.runs {
		run := r.run
		switch {
		case q.Flow != "" && run.Flow != q.Flow,
			len(q.Statuses) > 0 && !slices.Contains(q.Statuses, run.Status),
			!q.Since.IsZero() && run.StartedAt.Before(q.Since),
			!q.Before.IsZero() && !run.StartedAt.Before(q.Before),
			needle != "" && !strings.Contains(strings.ToLower(run.Error), needle),
			q.Version != "" && run.Version != q.Version,
			q.BusinessKey != "" && run.BusinessKey != q.BusinessKey,
			q.IDPrefix != "" && !strings.HasPrefix(run.ID, q.IDPrefix),
			q.Where != nil && !q.Where.Match(run),
			byDue && run.DueAt == nil:
			continue
		}
		out = append(out, run)
	}
	m.mu.RUnlock()
	if byDue {
		slices.SortFunc(out, func(a, b Run) int {
			return cmp.Or(a.DueAt.Compare(*b.DueAt), cmp.Compare(a.ID, b.ID))
		})
	} else {
		slices.SortFunc(out, func(a, b Run) int {
			return cmp.Or(b.StartedAt.Compare(a.StartedAt), cmp.Compare(b.ID, a.ID))
		})
	}
	return limited(out, q.Limit), nil
}

// RunsByIDPrefix returns the runs whose id begins with prefix, in id
// order, at most limit (DefaultLimit when 0 or less).
func (m *Memory) RunsByIDPrefix(_ context.Context, prefix string, limit int) ([]Run, error) {
	m.mu.RLock()
	out := []Run{}
	for id, r := range m.runs {
		if strings.HasPrefix(id, prefix) {
			out = append(out, r.run)
		}
	}
	m.mu.RUnlock()
	slices.SortFunc(out, func(a, b Run) int { return strings.Compare(a.ID, b.ID) })
	return limited(out, limit), nil
}

// limited is runs cut to limit (DefaultLimit when 0 or less).
func limited[T any](runs []T, limit int) []T {
	if limit <= 0 {
		limit = DefaultLimit
	}
	if len(runs) > limit {
		runs = runs[:limit]
	}
	return runs
}

// Timeline returns a run's events in order, or an error matching
// ErrRunNotFound.
func (m *Memory) Timeline(_ context.Context, id string) ([]Event, error) {
	m.mu.RLock()
	r, ok := m.runs[id]
	if !ok {
		m.mu.RUnlock()
		return nil, fmt.Errorf("%w: %q", ErrRunNotFound, id)
	}
	out := make([]Event, 0, len(r.events))
	for _, e := range r.events {
		out = append(out, e)
	}
	m.mu.RUnlock()
	SortTimeline(out)
	return out, nil
}

// StepInputs returns the latest input kept of each step of run id
// (journal.StepInputs), or an error matching ErrRunNotFound.
func (m *Memory) StepInputs(_ context.Context, id string) ([]StepInput, error) {
	m.mu.RLock()
	r, ok := m.runs[id]
	if !ok {
		m.mu.RUnlock()
		return nil, fmt.Errorf("%w: %q", ErrRunNotFound, id)
	}
	all := make([]StepInput, 0, len(r.inputs))
	for _, in := range r.inputs {
		in.Input = slices.Clone(in.Input)
		all = append(all, in)
	}
	m.mu.RUnlock()
	return LatestInputs(all), nil
}

// SortTimeline orders a run's events as Timeline returns them: by Seq,
// then by when they ended, then by key.
func SortTimeline(events []Event) {
	slices.SortFunc(events, func(a, b Event) int {
		if c := cmp.Compare(a.Seq, b.Seq); c != 0 {
			return c
		}
		if c := a.EndedAt.Compare(b.EndedAt); c != 0 {
			return c
		}
		return cmp.Compare(a.Key, b.Key)
	})
}
