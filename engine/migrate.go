package engine

import (
	"context"
	"fmt"
	"log/slog"
	"slices"

	"github.com/acemq/acemq-flow/broker"
	"github.com/acemq/acemq-flow/dsl"
)

// renames are a flow's Renamed migrations, new name by old.
type renames map[string]string

// migrations are what a flow says became of the steps of its earlier
// versions, and whether runs on an older route adopt its current one.
type migrations struct {
	renamed renames
	// removed are the steps the flow says it removed (dsl.Removed), by
	// name: the step their runs go on at, "" when they fail there.
	removed map[string]string
	// adopt says dsl.Adopt; maps are its payload maps, by step.
	adopt bool
	maps  map[string]dsl.PayloadMap
	// own is the flow's own route: its steps, not its branches'.
	own []string
}

func migrationsOf(def *dsl.FlowDef) migrations {
	ms := migrations{renamed: renames{}, removed: map[string]string{}}
	for _, m := range def.Migrations() {
		if m.Removed {
			ms.removed[m.Old] = m.New
		} else {
			ms.renamed[m.Old] = m.New
		}
	}
	ms.adopt, ms.maps = def.Adopts()
	for _, s := range def.Steps() {
		ms.own = append(ms.own, s.Name)
	}
	return ms
}

// migrate reads, in d's route, the steps the flow says were renamed
// (dsl.Renamed) by their new names, and keeps the route as the message
// carried it (d.wire): what the run writes on keeps the old names (the
// route of its next hop, the key its step is claimed under, the
// compensation it will owe), so that a worker of the older version still
// running during a rolling deploy takes it as its own and the two
// versions claim a step under one key. The compensations a run owes keep
// their names too: an old name's compensation queue is this version's
// (bindMigrated), and nextCompensation reads them by their new names.
func (f *flow) migrate(d *delivery) {
	if len(f.renamed) == 0 || !slices.ContainsFunc(d.route, f.renamed.has) {
		return
	}
	d.wire = d.route
	d.route = slices.Clone(d.route)
	for i, s := range d.route {
		d.route[i] = f.renamed.of(s)
	}
}

// reroute gives a step's message the route the flow now has where the
// flow says so: a run at a step removed To another goes on at that step
// and on the flow's route from there (dsl.Removed), and, when the flow
// says dsl.Adopt, a run whose route from its step differs from the flow's
// takes the flow's. adopted reports that the route changed. A message on
// a branch, or travelling as a routing slip, keeps its route.
func (f *flow) reroute(d *delivery) (adopted bool) {
	if (len(f.removed) == 0 && !f.adopt) || d.branch != nil || d.slip != nil || d.pos < 0 || d.pos >= len(d.route) {
		return false
	}
	if to, ok := f.removed[d.step()]; ok && to != "" {
		k := slices.Index(f.own, to)
		d.route, d.wire = append(append(slices.Clip(slices.Clone(d.route[:d.pos])), to), f.own[k+1:]...), nil
		return true
	}
	if !f.adopt {
		return false
	}
	k := slices.Index(f.own, d.step())
	if k < 0 {
		return false
	}
	if want := f.own[k+1:]; !slices.Equal(d.route[d.pos+1:], want) {
		d.route = append(slices.Clip(slices.Clone(d.wireRoute()[:d.pos+1])), want...)
		d.wire = nil
		return true
	}
	return false
}

// mapPayload gives the step the payload its dsl.MapPayload makes of what a
// run on an older route brought it: d's message, with the new body, is a
// copy.
func (r *stepRunner) mapPayload(ctx context.Context, d *delivery) error {
	pm, ok := r.f.maps[r.spec.Name]
	if !ok {
		return nil
	}
	v, err := pm.Map(ctx, decoder(d.m))
	if err != nil {
		return fmt.Errorf("map the payload of a run on an older route: %w", err)
	}
	body, err := r.f.codec.Encode(v)
	if err != nil {
		return fmt.Errorf("encode the payload MapPayload(%q) returned: %w", r.spec.Name, err)
	}
	m := *d.m
	m.Body = body
	d.m = &m
	r.e.log.Debug("a run on an older route adopted the flow's", slog.String("flow", r.f.name), slog.String("run_id", m.RunID), slog.String("step", r.spec.Name))
	return nil
}

func (r renames) has(step string) bool { _, ok := r[step]; return ok }

// of is step's name in this version.
func (r renames) of(step string) string {
	if n, ok := r[step]; ok {
		return n
	}
	return step
}

// bindMigrated adds to the flow's topology the queues of the steps it
// renamed or removed, bound as they were, so that what an older version's
// workers still send lands where this version's workers take it: the old
// step's queue, and its compensation's when the new step has one or the
// step was removed (its compensations are then given up, not left).
func (f *flow) bindMigrated() {
	for _, m := range f.def.Migrations() {
		f.bind(f.queue(m.Old), m.Old)
		if m.Removed || f.steps[f.index[m.New]].Compensable {
			f.bind(f.compensationQueue(m.Old), compensateKey+"."+m.Old)
		}
	}
}

// renamedQueues are the queues of old names a worker of step s consumes
// as s's (dsl.Renamed, dsl.Removed To s), and, when s has a compensation,
// those of its old names' compensations.
func (f *flow) renamedQueues(s dsl.StepSpec) (steps, comps []string) {
	for _, m := range f.def.Migrations() {
		if m.New == s.Name {
			steps = append(steps, f.queue(m.Old))
			if s.Compensable && !m.Removed {
				comps = append(comps, f.compensationQueue(m.Old))
			}
		}
	}
	return steps, comps
}

// removedRunners are, for each step the flow removed, the runner of its
// compensation's queue, which gives each compensation up (the run is
// unresolved, the compensations before it go on), and, for a step
// removed without To, the runner of its queue, which fails each run there
// (dsl.ErrStepRemoved).
func (f *flow) removedRunners(e *Engine, tidy func(queue, runID string)) (steps []*stepRunner, comps []*compRunner) {
	for _, m := range f.def.Migrations() {
		if !m.Removed {
			continue
		}
		if m.New == "" {
			steps = append(steps, &stepRunner{e: e, f: f, spec: dsl.StepSpec{Name: m.Old}, policy: *e.cfg.Retry, queue: f.queue(m.Old),
				spanName: "step " + f.name + "/" + m.Old, tidy: tidy, forks: map[string]*stepRunner{}})
		}
		comps = append(comps, &compRunner{e: e, f: f, spec: dsl.StepSpec{Name: m.Old, Compensable: true}, policy: *e.cfg.Retry,
			queue: f.compensationQueue(m.Old), tidy: tidy, removed: true})
	}
	return steps, comps
}

// removedHere fails a run at a step the flow removed without saying where
// its runs go.
func (r *stepRunner) removedHere(ctx context.Context, a *stepAttempt) (broker.Ack, bool) {
	if to, ok := r.f.removed[a.d.step()]; !ok || to != "" {
		return broker.Ack{}, false
	}
	return r.giveUp(ctx, a, a.d.state, nil, broker.Fatal(fmt.Errorf("flow %q step %q: %w", r.f.name, a.d.step(), dsl.ErrStepRemoved))), true
}
