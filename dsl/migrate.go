package dsl

import (
	"fmt"
	"slices"
)

// Migration is what a flow says became of a step an earlier version of it
// had: Renamed, Old is now called New.
type Migration struct {
	Old, New string
}

// migrationPart is a Renamed.
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

// Migrations are what the flow says became of steps of earlier versions
// (Renamed), in the order given.
func (f *FlowDef) Migrations() []Migration { return slices.Clone(f.migrations) }

// checkMigrations refuses a Renamed from a step the flow has, to one it
// does not have, or of a name given twice.
func (f *FlowDef) checkMigrations() error {
	var names []string
	for _, s := range f.all() {
		names = append(names, s.Name)
	}
	var olds []string
	for _, m := range f.migrations {
		switch {
		case slices.Contains(names, m.Old):
			return f.fail(m.Old, "Renamed(%q, %q): the flow still has a step %q", m.Old, m.New, m.Old)
		case !slices.Contains(names, m.New):
			return f.fail(m.New, "Renamed(%q, %q): the flow has no step %q", m.Old, m.New, m.New)
		case m.Old == CompensateQueueInfix:
			return f.fail(m.Old, "Renamed(%q, %q): %q is reserved for the flow's compensation queues", m.Old, m.New, CompensateQueueInfix)
		case slices.Contains(olds, m.Old):
			return f.fail(m.Old, "Renamed(%q, ...) twice", m.Old)
		}
		olds = append(olds, m.Old)
	}
	return nil
}
