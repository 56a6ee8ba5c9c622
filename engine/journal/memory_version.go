package journal

import (
	"context"
	"slices"
	"time"
)

// memVersions are the flow versions a Memory journal remembers, by flow,
// the first seen first.
type memVersions map[string][]FlowVersion

// RecordVersion remembers v (VersionStore). It refuses what CheckVersion
// refuses.
func (m *Memory) RecordVersion(_ context.Context, v FlowVersion, at time.Time) error {
	if err := CheckVersion(v); err != nil {
		return err
	}
	m.mu.Lock()
	defer m.mu.Unlock()
	if m.versions == nil {
		m.versions = memVersions{}
	}
	vs := m.versions[v.Flow]
	for i := range vs {
		if vs[i].Version == v.Version {
			vs[i].LastSeen = at
			return nil
		}
	}
	v.Steps, v.FirstSeen, v.LastSeen = slices.Clone(v.Steps), at, at
	m.versions[v.Flow] = append(vs, v)
	return nil
}

// Versions are flow's versions recorded, the first seen first
// (VersionStore).
func (m *Memory) Versions(_ context.Context, flow string) ([]FlowVersion, error) {
	m.mu.RLock()
	defer m.mu.RUnlock()
	out := make([]FlowVersion, 0, len(m.versions[flow]))
	for _, v := range m.versions[flow] {
		v.Steps = slices.Clone(v.Steps)
		out = append(out, v)
	}
	return out, nil
}

// InFlight counts flow's running and waiting runs by step (VersionStore).
func (m *Memory) InFlight(_ context.Context, flow string) (map[string]int, error) {
	m.mu.RLock()
	defer m.mu.RUnlock()
	out := map[string]int{}
	for _, r := range m.runs {
		if r.run.Flow == flow && (r.run.Status == Running || r.run.Status == Waiting) {
			out[r.run.Step]++
		}
	}
	return out, nil
}
