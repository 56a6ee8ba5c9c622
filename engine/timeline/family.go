package timeline

import (
	"strings"

	"github.com/acemq/acemq-flow/engine/journal"
)

// How the start of a child run reads in the parent's timeline and in the
// child's: the engine writes both through StartedChild and StartedBy.
const (
	childPrefix  = "started child run "
	parentPrefix = "started by run "
	parentStep   = ", step "
)

// StartedChild is the outcome of a Child step that started child run
// run: what [Child] reads back.
func StartedChild(run string) string { return childPrefix + run }

// StartedBy is the outcome of the start event of a child run that step
// of run parent started: what [Parent] reads back.
func StartedBy(parent, step string) string { return parentPrefix + parent + parentStep + step }

// Child returns the run id of the child run e, a Child step's event,
// started; ok is false for any other event.
func Child(e journal.Event) (run string, ok bool) {
	if e.Kind != journal.KindStep {
		return "", false
	}
	run, ok = strings.CutPrefix(e.Outcome, childPrefix)
	return run, ok && run != ""
}

// Parent returns the run and the step that started the run of events as
// their child, when it is a child run (a start event says so).
func Parent(events []journal.Event) (run, step string, ok bool) {
	for _, e := range events {
		if e.Kind != journal.KindStart {
			continue
		}
		rest, found := strings.CutPrefix(e.Outcome, parentPrefix)
		// The step's name is last: a run id may hold anything.
		i := strings.LastIndex(rest, parentStep)
		if found && i > 0 {
			return rest[:i], rest[i+len(parentStep):], true
		}
	}
	return "", "", false
}
