package journal

import (
	"context"
	"fmt"
	"slices"
)

// memJoin is one join a Memory journal keeps.
type memJoin struct {
	st       JoinStatus
	items    [][]byte
	settled  map[int]Arrival
	decision map[int]Decision
}

// OpenJoin records j with its items, once (see JoinStore).
func (m *Memory) OpenJoin(_ context.Context, j Join, items [][]byte) (JoinStatus, bool, error) {
	if err := CheckJoin(j); err != nil {
		return JoinStatus{}, false, err
	}
	if items != nil && len(items) != j.Total {
		return JoinStatus{}, false, fmt.Errorf("%w: join %q of run %q: %d items for a total of %d", ErrInvalidJoin, j.Key, j.RunID, len(items), j.Total)
	}
	m.mu.Lock()
	defer m.mu.Unlock()
	byKey := m.joins[j.RunID]
	if byKey == nil {
		byKey = map[string]*memJoin{}
		m.joins[j.RunID] = byKey
	}
	if mj, ok := byKey[j.Key]; ok {
		return mj.status(), false, nil
	}
	j.Parent = slices.Clone(j.Parent)
	mj := &memJoin{st: JoinStatus{Join: j, Dispatched: j.Limit}, settled: map[int]Arrival{}, decision: map[int]Decision{}}
	for _, it := range items {
		mj.items = append(mj.items, slices.Clone(it))
	}
	byKey[j.Key] = mj
	return mj.status(), true, nil
}

func (mj *memJoin) status() JoinStatus {
	st := mj.st
	st.Parent = slices.Clone(st.Parent)
	return st
}

// joinLocked returns the join under (runID, key); the caller holds the lock.
func (m *Memory) joinLocked(runID, key string) (*memJoin, error) {
	if err := checkJoinKey(runID, key); err != nil {
		return nil, err
	}
	mj, ok := m.joins[runID][key]
	if !ok {
		return nil, fmt.Errorf("%w: %q of run %q", ErrJoinNotFound, key, runID)
	}
	return mj, nil
}

// JoinItems returns at most n of the join's items from index from.
func (m *Memory) JoinItems(_ context.Context, runID, key string, from, n int) ([][]byte, error) {
	m.mu.RLock()
	defer m.mu.RUnlock()
	mj, err := m.joinLocked(runID, key)
	if err != nil {
		return nil, err
	}
	if from < 0 || n < 0 {
		return nil, fmt.Errorf("%w: items from %d, %d of them", ErrInvalidJoin, from, n)
	}
	var out [][]byte
	for i := from; i < len(mj.items) && len(out) < n; i++ {
		out = append(out, slices.Clone(mj.items[i]))
	}
	return out, nil
}

// FailJoin marks the join failed (see JoinStore).
func (m *Memory) FailJoin(_ context.Context, runID, key string) error {
	m.mu.Lock()
	defer m.mu.Unlock()
	mj, err := m.joinLocked(runID, key)
	if err != nil {
		return err
	}
	mj.st.Failed = true
	return nil
}

// Settle records how branch ended, once (see JoinStore and Decide).
func (m *Memory) Settle(_ context.Context, runID, key string, branch int, s Settled) (Decision, error) {
	m.mu.Lock()
	defer m.mu.Unlock()
	mj, err := m.joinLocked(runID, key)
	if err != nil {
		return Decision{}, err
	}
	if d, ok := mj.decision[branch]; ok {
		return d, nil
	}
	if branch < 0 || branch >= mj.st.Dispatched {
		return Decision{}, fmt.Errorf("%w: branch %d of join %q of run %q, which handed out %d", ErrInvalidJoin, branch, key, runID, mj.st.Dispatched)
	}
	d := Decide(&mj.st, s)
	mj.decision[branch] = d
	mj.settled[branch] = Arrival{Branch: branch, Settled: Settled{OK: s.OK, Output: slices.Clone(s.Output), Entries: slices.Clone(s.Entries)}}
	return d, nil
}

// JoinStatus returns where the join stands.
func (m *Memory) JoinStatus(_ context.Context, runID, key string) (JoinStatus, error) {
	m.mu.RLock()
	defer m.mu.RUnlock()
	mj, err := m.joinLocked(runID, key)
	if err != nil {
		return JoinStatus{}, err
	}
	return mj.status(), nil
}

// Arrivals returns at most n settled branches from branch from on.
func (m *Memory) Arrivals(_ context.Context, runID, key string, from, n int) ([]Arrival, error) {
	m.mu.RLock()
	defer m.mu.RUnlock()
	mj, err := m.joinLocked(runID, key)
	if err != nil {
		return nil, err
	}
	var out []Arrival
	for b := max(from, 0); b < mj.st.Dispatched && len(out) < n; b++ {
		if a, ok := mj.settled[b]; ok {
			a.Output, a.Entries = slices.Clone(a.Output), slices.Clone(a.Entries)
			out = append(out, a)
		}
	}
	return out, nil
}
