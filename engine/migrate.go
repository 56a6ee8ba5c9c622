package engine

import (
	"slices"

	"github.com/acemq/acemq-flow/dsl"
)

// renames are a flow's Renamed migrations, new name by old.
type renames map[string]string

func renamesOf(def *dsl.FlowDef) renames {
	r := renames{}
	for _, m := range def.Migrations() {
		r[m.Old] = m.New
	}
	return r
}

// migrate renames, in what d carries, the steps the flow says were
// renamed (dsl.Renamed): its route, the compensations its run owes, and
// those still to come after a compensation's own. A message of an older
// version then goes on as one of this version would.
func (f *flow) migrate(d *delivery) {
	if len(f.renamed) == 0 {
		return
	}
	// What d holds may be the message's own: renamed in copies.
	if slices.ContainsFunc(d.route, f.renamed.has) {
		d.route = slices.Clone(d.route)
		for i, s := range d.route {
			d.route[i] = f.renamed.of(s)
		}
	}
	d.state.Compensate = f.renamed.entries(d.state.Compensate)
	d.comp.Remaining = f.renamed.entries(d.comp.Remaining)
}

func (r renames) has(step string) bool { _, ok := r[step]; return ok }

// of is step's name in this version.
func (r renames) of(step string) string {
	if n, ok := r[step]; ok {
		return n
	}
	return step
}

// entries are entries with their steps' names of this version (a copy,
// when any changes).
func (r renames) entries(entries []compEntry) []compEntry {
	if !slices.ContainsFunc(entries, func(e compEntry) bool { return r.has(e.Step) }) {
		return entries
	}
	out := slices.Clone(entries)
	for i := range out {
		out[i].Step = r.of(out[i].Step)
	}
	return out
}

// bindRenamed adds to the flow's topology the queues of the steps it
// renamed, bound as they were, so that what an older version's workers
// still send lands where this version's workers take it: the old step's
// queue, and its compensation's when the new step has one.
func (f *flow) bindRenamed() {
	for _, m := range f.def.Migrations() {
		f.bind(f.queue(m.Old), m.Old)
		if f.steps[f.index[m.New]].Compensable {
			f.bind(f.compensationQueue(m.Old), compensateKey+"."+m.Old)
		}
	}
}

// renamedQueues are the queues of old names a worker of step s consumes
// as s's (dsl.Renamed), and, when s has a compensation, those of the old
// names' compensations.
func (f *flow) renamedQueues(s dsl.StepSpec) (steps, comps []string) {
	for _, m := range f.def.Migrations() {
		if m.New == s.Name {
			steps = append(steps, f.queue(m.Old))
			if s.Compensable {
				comps = append(comps, f.compensationQueue(m.Old))
			}
		}
	}
	return steps, comps
}
