package dsl

import (
	"context"
	"fmt"
	"slices"
)

// Migration is what a flow says became of a step an earlier version of it
// had: Renamed (Old is now called New), or Removed (Removed set: its runs
// go on at New, or fail when New is empty).
type Migration struct {
	Old, New string
	Removed  bool
}

// migrationPart is a Renamed or a Removed.
type migrationPart struct {
	m   Migration
	err error
}

func (*migrationPart) part() {}

// Renamed says that the step now called new was called old in an earlier
// version of the flow. Runs and messages at old (left by that version,
// or sent by one of its workers still running during a rolling deploy)
// go on at new, a run whose route still names old takes new in its
// place, and a completed old is compensated by new's compensation:
// workers consume old's queue and its compensation's, as new's, for as
// long as the flow says Renamed. Take it out once `acemq-flow flows check`
// finds nothing left at old. old must not be a step of the flow; new must
// be one (of the flow's own route or a branch's); a step renamed twice,
// or a name renamed to two steps, is refused when the flow is built.
func Renamed(old, new string) Part {
	if !stepName.MatchString(old) {
		return &migrationPart{err: fmt.Errorf("Renamed(%q, %q): %q is not a step name (letters, digits, '-' and '_', at most 64)", old, new, old)}
	}
	return &migrationPart{m: Migration{Old: old, New: new}}
}

// Destination is where Removed sends the runs of a removed step: To.
type Destination struct{ step string }

// To is the step of the flow's own route that the runs of a removed step
// go on at (Removed).
func To(step string) Destination { return Destination{step: step} }

// Removed says that an earlier version of the flow had a step called old
// that this one does not. A run that reaches old (its message waiting in
// old's queue, or sent there by a worker of that version during a rolling
// deploy) goes on at the step given by To, with the payload old would have
// taken, and from there on the flow's route as it is now; without To, it
// fails at old with ErrStepRemoved's reason, to be replayed from another
// step (`acemq-flow replay <run> --from <step>`) or compensated. Workers
// consume old's queue for as long as the flow says Removed: take it out
// once `acemq-flow flows check` finds nothing left at old.
//
// A removed step's compensation is gone with it: a run that owes one and
// is compensated skips it and ends unresolved, for a person to see.
// old must not be a step of the flow, To's step must be one of its own
// route (not a branch's), and at most one To may be given.
func Removed(old string, to ...Destination) Part {
	if !stepName.MatchString(old) {
		return &migrationPart{err: fmt.Errorf("Removed(%q): %q is not a step name (letters, digits, '-' and '_', at most 64)", old, old)}
	}
	if len(to) > 1 {
		return &migrationPart{err: fmt.Errorf("Removed(%q): %d destinations, at most one To", old, len(to))}
	}
	m := Migration{Old: old, Removed: true}
	if len(to) == 1 {
		if to[0].step == "" {
			return &migrationPart{err: fmt.Errorf("Removed(%q, To(\"\")): To needs a step", old)}
		}
		m.New = to[0].step
	}
	return &migrationPart{m: m}
}

// PayloadMap turns the payload an earlier version of a flow sent to a step
// into the one the step now takes (MapPayload): for Adopt.
type PayloadMap struct {
	// Step is the step whose payloads are mapped.
	Step string
	// Map decodes the old payload with decode and returns the new one.
	Map func(ctx context.Context, decode func(any) error) (any, error)
}

// MapPayload maps, for Adopt, the payload a run on an older route brings
// to step: decoded as Old (with the flow's codec), given to fn, and what
// fn returns is what step runs on. An error from fn fails the run at step
// for good.
func MapPayload[Old, New any](step string, fn func(context.Context, Old) (New, error)) PayloadMap {
	return PayloadMap{Step: step, Map: func(ctx context.Context, decode func(any) error) (any, error) {
		var old Old
		if err := decode(&old); err != nil {
			return nil, fmt.Errorf("MapPayload(%q): decode the old payload: %w", step, err)
		}
		return fn(ctx, old)
	}}
}

// adoptPart is an Adopt.
type adoptPart struct{ maps []PayloadMap }

func (*adoptPart) part() {}

// Adopt says that runs started on an older route of the flow take its
// route as it is now from their next step on, instead of finishing on the
// route they started with (the default). A run is on an older route when
// what is left of the route its message carries differs from the flow's
// from the same step: a step inserted after it then runs, one taken out
// does not. maps turn what such a run brings to a step into what the step
// now takes (MapPayload); they apply only to runs whose route the flow
// adopted, since nothing else tells an old payload from a new one.
// Runs on a branch of a fork keep their branch's route; they adopt the
// flow's after the join. Adopt once per flow; each step's map at most once,
// for a step of the flow's own route.
func Adopt(maps ...PayloadMap) Part { return &adoptPart{maps: maps} }

// Adopts reports whether the flow says Adopt, with its payload maps by step.
func (f *FlowDef) Adopts() (bool, map[string]PayloadMap) {
	if f.adopt == nil {
		return false, nil
	}
	out := map[string]PayloadMap{}
	for _, m := range f.adopt.maps {
		out[m.Step] = m
	}
	return true, out
}

// Migrations are what the flow says became of steps of earlier versions
// (Renamed, Removed), in the order given.
func (f *FlowDef) Migrations() []Migration { return slices.Clone(f.migrations) }

// checkMigrations refuses a Renamed or Removed of a step the flow has, to
// one it does not have, or of a name given twice, and an Adopt's map of a
// step not on the flow's own route, or given twice.
func (f *FlowDef) checkMigrations() error {
	var names, own []string
	for _, s := range f.all() {
		names = append(names, s.Name)
	}
	for _, s := range f.steps {
		own = append(own, s.Name)
	}
	var olds []string
	for _, m := range f.migrations {
		what := fmt.Sprintf("Renamed(%q, %q)", m.Old, m.New)
		if m.Removed {
			what = fmt.Sprintf("Removed(%q, To(%q))", m.Old, m.New)
			if m.New == "" {
				what = fmt.Sprintf("Removed(%q)", m.Old)
			}
		}
		switch {
		case slices.Contains(names, m.Old):
			return f.fail(m.Old, "%s: the flow still has a step %q", what, m.Old)
		case m.Removed && m.New != "" && !slices.Contains(own, m.New):
			return f.fail(m.New, "%s: %q is not a step of the flow's own route (a branch's step cannot take a run that is not on its branch)", what, m.New)
		case !m.Removed && !slices.Contains(names, m.New):
			return f.fail(m.New, "%s: the flow has no step %q", what, m.New)
		case m.Old == CompensateQueueInfix:
			return f.fail(m.Old, "%s: %q is reserved for the flow's compensation queues", what, CompensateQueueInfix)
		case slices.Contains(olds, m.Old):
			return f.fail(m.Old, "%q renamed or removed twice", m.Old)
		}
		olds = append(olds, m.Old)
	}
	if f.adopt != nil {
		var mapped []string
		for _, m := range f.adopt.maps {
			switch {
			case m.Map == nil:
				return f.fail(m.Step, "Adopt: a PayloadMap without a function (build it with MapPayload)")
			case !slices.Contains(own, m.Step):
				return f.fail(m.Step, "Adopt: MapPayload(%q): not a step of the flow's own route", m.Step)
			case slices.Contains(mapped, m.Step):
				return f.fail(m.Step, "Adopt: MapPayload(%q) twice", m.Step)
			}
			mapped = append(mapped, m.Step)
		}
	}
	return nil
}
