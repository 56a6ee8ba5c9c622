package engine

import "github.com/acemq/acemq-flow/engine/journal"

// Action is who asks for an operator's action on a run (replay,
// compensate, signal, start) and why: both are kept in the run's
// timeline, in the outcome of the event the action records ("replayed by
// ada: the card was fixed"). The zero Action records the action as it
// always read.
type Action struct {
	// Actor is who asks: a person's name, the dashboard token's name.
	Actor string
	// Reason is why, in the operator's words.
	Reason string
}

// IsZero reports whether a names neither an actor nor a reason.
func (a Action) IsZero() bool { return a.Actor == "" && a.Reason == "" }

// outcome is what, an event's outcome, with who asked and why after it
// ("replayed by ada: reason"), cut to what the journal keeps.
func (a Action) outcome(what string) string {
	if a.Actor != "" {
		what += " by " + a.Actor
	}
	if a.Reason != "" {
		what += ": " + a.Reason
	}
	return journal.Truncate(what)
}
