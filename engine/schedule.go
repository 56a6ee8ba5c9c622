package engine

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/acemq/acemq-flow/engine/journal"
)

// ErrNotCancellable: the run is not waiting for anything that can still be
// cancelled (it already went on, or its due time is too close).
var ErrNotCancellable = errors.New("run cannot be cancelled")

// cancelMargin is how close to its due time a wait can no longer be
// cancelled: the message may be on its way to its step already, which
// would run it before it learnt of the cancellation.
const cancelMargin = time.Second

// Kinds of what a run waits for, in Scheduled.
const (
	// ScheduledStart: a run started with At or In, or whose first step has
	// a delay before it.
	ScheduledStart = "start"
	// ScheduledDelay: a delay before a later step.
	ScheduledDelay = "delay"
	// ScheduledHold: a failed run held for a replay, compensated when its
	// hold ends.
	ScheduledHold = "hold"
	// ScheduledSignal: a run waiting at a WaitFor for its signal; its due
	// time is when the wait times out.
	ScheduledSignal = "signal"
	// ScheduledRate: a run waiting for its turn under a step's rate limit
	// (dsl.RateLimit); its due time is its turn.
	ScheduledRate = "rate"
)

// Scheduled is one thing waiting on the ladder: a run held until DueAt.
type Scheduled struct {
	RunID string `json:"run_id"`
	Flow  string `json:"flow"`
	// Kind is ScheduledStart, ScheduledDelay, ScheduledHold,
	// ScheduledSignal or ScheduledRate.
	Kind string `json:"kind"`
	// Step is the step the run goes on with (or failed at, for a hold).
	Step  string    `json:"step"`
	DueAt time.Time `json:"due_at"`
	// Late is how long past DueAt the run still waits, as the journal
	// sees it (0 while it is not due): a ladder that does not move shows
	// here first.
	Late time.Duration `json:"-"`
	// Compensating, on what Cancel did, says the wait cancelled was a
	// failed run's hold: the run is being compensated now, as Compensate
	// does, rather than left failed with its effects in place.
	Compensating bool `json:"compensating,omitempty"`
}

// Schedules lists the limit waits due soonest on the ladder (at most
// journal.DefaultLimit when limit is 0), soonest first, as the journal
// knows them: delayed starts, delays before steps, and failed runs held
// for replay; of one flow, or of all when flow is "". The journal picks
// them by due time (journal.SoonestDue), so a limit never drops a wait
// due sooner than one listed. Without a shared journal it knows only this
// process's runs.
func (e *Engine) Schedules(ctx context.Context, flow string, limit int) ([]Scheduled, error) {
	runs, err := e.journal.Runs(ctx, journal.Query{Flow: flow, Statuses: []journal.Status{journal.Waiting, journal.Failed},
		Order: journal.SoonestDue, Limit: limit})
	if err != nil {
		return nil, fmt.Errorf("schedules: %w", err)
	}
	now := e.now()
	out := []Scheduled{}
	for _, r := range runs {
		if r.DueAt == nil {
			// Not a journal that keeps SoonestDue's promise: skip rather
			// than crash on what it returned.
			continue
		}
		s := Scheduled{RunID: r.ID, Flow: r.Flow, Step: r.Step, DueAt: *r.DueAt, Kind: e.kindOf(r)}
		if now.After(s.DueAt) {
			s.Late = now.Sub(s.DueAt)
		}
		out = append(out, s)
	}
	return out, nil
}

// kindOf says what a run with a due time waits for.
func (e *Engine) kindOf(r journal.Run) string {
	f, _ := e.flow(r.Flow)
	switch {
	case r.Status == journal.Failed:
		return ScheduledHold
	case f != nil && r.Status == journal.Waiting && waitsAt(f, r.Step):
		return ScheduledSignal
	case f != nil && r.Status == journal.Waiting && rateLimitedAt(f, r.Step):
		return ScheduledRate
	case e.firstStep(r.Flow) == r.Step:
		return ScheduledStart
	}
	return ScheduledDelay
}

// waitsAt says step is one of f's WaitFor steps.
func waitsAt(f *flow, step string) bool {
	_, w := f.wait(step)
	return w != nil
}

// rateLimitedAt says step is one of f's steps with a rate limit and
// nothing that holds the hop into it (a delay, which a run would
// otherwise be waiting for).
func rateLimitedAt(f *flow, step string) bool {
	i, ok := f.index[step]
	if !ok {
		return false
	}
	s := f.steps[i]
	return s.Rate != nil && s.Delay == 0 && s.DelayUntil == nil
}

// firstStep is the first step of a registered flow ("" for an unknown one
// or an itinerary flow).
func (e *Engine) firstStep(name string) string {
	f, err := e.flow(name)
	if err != nil || f.def.HasItinerary() {
		return ""
	}
	return f.steps[0].Name
}

// Cancel cancels what a run waits for on the ladder. A delayed start or a
// delay before a step: when its message comes due, the worker drops it,
// acknowledged and recorded, and the run's status becomes cancelled. The
// hold of a failed run (HoldForReplay): cancelling the wait for a replay
// compensates the run now, as Compensate does (Scheduled.Compensating says
// so), since a run left failed would keep its effects with nobody to undo
// them. The journal must know the run: cancelling needs the journal every
// worker reads (a database). It refuses, with ErrNotCancellable naming the
// run, a run that waits for nothing, or whose wait ends within a second
// (its message may already be on its way).
func (e *Engine) Cancel(ctx context.Context, runID string) (Scheduled, error) {
	r, err := e.journal.Run(ctx, runID)
	if err != nil {
		return Scheduled{RunID: runID}, fmt.Errorf("cancel run %s: %w", runID, err)
	}
	s := Scheduled{RunID: r.ID, Flow: r.Flow, Step: r.Step}
	if r.DueAt != nil {
		s.DueAt = *r.DueAt
	}
	waiting := r.Status == journal.Waiting || (r.Status == journal.Failed && r.DueAt != nil)
	switch {
	case !waiting:
		return s, fmt.Errorf("%w: run %s of %s is %s: it waits for nothing (already delivered, or never delayed)", ErrNotCancellable, runID, r.Flow, r.Status)
	case s.DueAt.Sub(e.now()) < cancelMargin:
		return s, fmt.Errorf("%w: run %s was due at %s: already delivered, or too close to its due time to cancel", ErrNotCancellable, runID, s.DueAt.Format(time.RFC3339))
	}
	s.Kind = e.kindOf(r)
	now := e.now()
	if s.Kind == ScheduledHold {
		if _, err := e.Compensate(ctx, runID); err != nil {
			return s, fmt.Errorf("cancel run %s's hold: compensate it: %w", runID, err)
		}
		s.Compensating = true
		e.record(ctx, journal.Event{RunID: runID, Flow: r.Flow, Kind: journal.KindCancel, Step: r.Step,
			Outcome: "hold cancelled (due " + s.DueAt.Format(time.RFC3339) + "): compensating now", StartedAt: now, EndedAt: now,
			Replays: r.Replays, Seq: r.Seq, Key: fmt.Sprintf("cancel/%d", r.Replays)})
		return s, e.writer.Flush(ctx)
	}
	e.record(ctx, journal.Event{RunID: runID, Flow: r.Flow, Kind: journal.KindCancel, Step: r.Step,
		Outcome: "cancelled (" + s.Kind + " due " + s.DueAt.Format(time.RFC3339) + ")", StartedAt: now, EndedAt: now,
		Status: journal.Cancelled, RunStep: r.Step, Replays: r.Replays, DueAt: r.DueAt,
		Seq: r.Seq + 1, Key: fmt.Sprintf("cancel/%d", r.Replays)})
	return s, e.writer.Flush(ctx)
}
