package engine

import (
	"context"
	"fmt"
	"log/slog"
	"slices"
	"time"

	"github.com/acemq/acemq-flow/broker"
	"github.com/acemq/acemq-flow/engine/journal"
	"github.com/acemq/acemq-flow/engine/timeline"
)

// record hands events to the journal writer. It waits while the writer's
// queue is full (backpressure on the consumer that settled them) and only
// gives up when the writer is closed, which the worker does last.
func (e *Engine) record(ctx context.Context, events ...journal.Event) {
	if len(events) == 0 {
		return
	}
	if err := e.writer.Record(context.WithoutCancel(ctx), events...); err != nil {
		e.log.Error("journal events not recorded", slog.Int("events", len(events)), slog.String("run_id", events[0].RunID),
			slog.String("flow", events[0].Flow), slog.String("step", events[0].Step), slog.Any("error", err))
	}
}

// settled records what became of one delivery of a step, once its
// consumer carried it out, unless the handler recorded exactly that before
// it returned. A delivery given up where the handler did not expect it
// (before it ran, or a retry the ladder refused) has its run's
// compensation started here; one that could not be read at all is still
// recorded against the run it names, if it names one.
func (r *stepRunner) settled(ctx context.Context, s broker.Settlement) {
	m := s.Message
	if m == nil {
		r.e.recordUnread(ctx, r.f, r.spec.Name, r.queue, r.f.index[r.spec.Name]+1, s)
		return
	}
	a, _ := s.Note.(*stepAttempt)
	if m.RunID == "" && (s.Outcome == broker.OutcomeLabelDeadLettered || s.Outcome == broker.OutcomeLabelParked) {
		r.e.log.Warn("a message that names no run was given up", slog.String("flow", r.f.name), slog.String("step", r.spec.Name),
			slog.String("queue", r.queue), slog.String("message_id", m.ID), slog.String("error", s.Reason))
	}
	if m.RunID == "" || a != nil && a.expect == s.Outcome {
		return
	}
	if a == nil {
		// Given up (or parked) before the handler ran.
		a = &stepAttempt{d: readStep(m), result: resultFailed}
		if s, held := r.held(a); held {
			// It may have been handed a place while it waited (and then
			// waited longer than its retry policy's age allows).
			if err := r.release(ctx, s); err != nil {
				r.e.log.Error("a given-up message's place not given back; it stays taken (docs/operations.md, \"Limits\")",
					slog.String("flow", r.f.name), slog.String("step", r.spec.Name), slog.String("run_id", m.RunID), slog.Any("error", err))
			}
		}
	}
	if a.compensation == compensationNone && s.Outcome == broker.OutcomeLabelDeadLettered {
		r.compensateUnexpected(ctx, a, s)
	}
	r.e.record(ctx, r.outcome(ctx, a, s)...)
}

// compensateUnexpected starts the compensation of a run whose message the
// consumer gave up where the handler did not expect it. Begun now, the
// compensation has the run, and the message the consumer already moved to
// the dead-letter queue is taken out of it again.
func (r *stepRunner) compensateUnexpected(ctx context.Context, a *stepAttempt, s broker.Settlement) {
	if a.d.err != nil || len(a.d.state.Compensate) == 0 {
		return
	}
	m := a.d.m
	kind, until, err := r.e.startCompensation(ctx, r.f, m, a.d.state, nil, r.spec.Name, s.Reason, r.f.hold)
	if err != nil {
		r.e.log.Error("a failed run's compensation could not be started; run acemq-flow compensate on it",
			slog.String("flow", r.f.name), slog.String("run_id", m.RunID), slog.String("step", r.spec.Name), slog.Any("error", err))
		return
	}
	a.compensation, a.holdUntil = kind, until
	if kind != compensationHeld && r.tidy != nil {
		r.tidy(r.queue+broker.DeadLetterSuffix, m.RunID)
	}
}

// recordUnread records a delivery of flow's step (or compensation: queue)
// that was set aside before anything could read it, against the run it
// names: failed (unresolved, for a compensation), where it was parked and
// why, so that runs list and the dashboard find it. stage places it in the
// run (Seq): what cannot be read of it cannot say how far the run had got.
func (e *Engine) recordUnread(ctx context.Context, f *flow, step, queue string, stage int, s broker.Settlement) {
	if s.Outcome != broker.OutcomeLabelParked && s.Outcome != broker.OutcomeLabelDeadLettered {
		return
	}
	if s.RunID == "" || !journal.Text(s.RunID) {
		e.log.Warn("a message that names no run was set aside unread", slog.String("flow", f.name), slog.String("step", step),
			slog.String("queue", queue), slog.String("message_id", s.MessageID), slog.String("error", s.Reason))
		return
	}
	dead := queue + broker.DeadLetterSuffix
	if s.Outcome == broker.OutcomeLabelParked {
		dead = queue + broker.ParkedSuffix
	}
	now := e.now()
	ev := journal.Event{RunID: s.RunID, Flow: f.name, Kind: journal.KindStep, Step: step, Outcome: s.Outcome,
		StartedAt: s.Started, EndedAt: now, Error: s.Reason, Queue: queue, Status: journal.Failed, RunStep: step,
		DeadLetter: dead, Seq: journal.Seq(0, stage, 1, 2), Key: "unread/" + s.MessageID}
	if stage >= journal.CompensationStage {
		ev.Kind, ev.Outcome, ev.Status = journal.KindCompensation, "compensation_failed", journal.Unresolved
		e.log.Error("a compensation's message was set aside unread: the run is unresolved, a person has to look",
			slog.String("run_id", s.RunID), slog.String("flow", f.name), slog.String("step", step),
			slog.String("error", s.Reason), slog.String("dead_letter", dead))
	} else {
		e.metrics.left(ctx, f.name, step, RunFailed, 0, 0)
		e.log.Warn("step given up: its message was set aside unread",
			slog.String("run_id", s.RunID), slog.String("flow", f.name), slog.String("step", step),
			slog.String("error", s.Reason), slog.String("dead_letter", dead))
	}
	e.record(ctx, ev)
}

// outcome is the journal events of one delivery of a step, a the handler's
// view of it and s what the consumer did with it (or will do), with the
// run's metrics counted for it.
func (r *stepRunner) outcome(ctx context.Context, a *stepAttempt, s broker.Settlement) []journal.Event {
	events := r.events(a, s, r.e.now())
	for _, e := range events {
		if e.Kind != journal.KindStep && e.Kind != journal.KindHandOff {
			continue
		}
		r.logOutcome(ctx, a, s, e)
		m := a.d.m
		left := func(step, outcome string) {
			now := r.e.now()
			r.e.metrics.left(ctx, r.f.name, step, outcome, now.Sub(m.FirstSeen), now.Sub(r.e.runStarted(ctx, m)))
		}
		switch e.Status {
		case journal.Completed:
			left(e.RunStep, RunCompleted)
		case journal.Ended:
			left(r.spec.Name, RunEndedEarly)
		case journal.Failed, journal.Compensating, journal.Unresolved:
			if e.Kind == journal.KindStep && e.Step == r.spec.Name {
				left(r.spec.Name, RunFailed)
			}
		}
	}
	return events
}

// logOutcome writes the line an operator reads for what became of one
// delivery of a step, e being one of its events: a retry at DEBUG, a step
// given up at WARN, a run left unresolved (nothing it did can be
// compensated) at ERROR; nothing for a step that went on.
func (r *stepRunner) logOutcome(ctx context.Context, a *stepAttempt, s broker.Settlement, e journal.Event) {
	if e.Kind != journal.KindStep || e.Step != r.spec.Name {
		return
	}
	m := a.d.m
	switch e.Status {
	case journal.Running:
		if e.DueAt == nil || !r.e.log.Enabled(ctx, slog.LevelDebug) {
			return
		}
		r.e.log.LogAttrs(ctx, slog.LevelDebug, "step retried", slog.String("run_id", m.RunID), slog.String("flow", r.f.name),
			slog.String("step", r.spec.Name), slog.Int("attempt", m.Attempt), slog.Duration("delay", s.Delay),
			slog.String("error", e.Error))
	case journal.Failed, journal.Compensating, journal.Unresolved:
		attrs := []slog.Attr{slog.String("run_id", m.RunID), slog.String("flow", r.f.name), slog.String("step", r.spec.Name),
			slog.Int("attempt", m.Attempt), slog.String("error", e.Error), slog.String("status", string(e.Status))}
		if e.DeadLetter != "" {
			attrs = append(attrs, slog.String("dead_letter", e.DeadLetter))
		}
		r.e.log.LogAttrs(ctx, slog.LevelWarn, "step given up", attrs...)
		if e.Status == journal.Unresolved {
			r.e.log.LogAttrs(ctx, slog.LevelError, "run unresolved: nothing it did can be compensated, a person has to look",
				slog.String("run_id", m.RunID), slog.String("flow", r.f.name), slog.String("step", r.spec.Name), slog.String("error", e.Error))
		}
	}
}

// events are the journal events of one delivery of a step, a the
// handler's view of it and s what the consumer did with it (or will do),
// at now.
func (r *stepRunner) events(a *stepAttempt, s broker.Settlement, now time.Time) []journal.Event {
	d := &a.d
	if a.result == resultSignalReceived {
		// Not a step of its run: Signal recorded what it did.
		return nil
	}
	m := d.m
	base := journal.Event{
		RunID: m.RunID, Flow: r.f.name, Kind: journal.KindStep, Step: r.spec.Name, Attempt: m.Attempt,
		StartedAt: s.Started, EndedAt: now, Queue: r.queue, Replays: d.replays, RunStep: r.spec.Name,
		Seq: journal.Seq(d.replays, d.pos+1, m.Attempt, 2), Key: fmt.Sprintf("step/%d/%d/%d", d.replays, d.pos, m.Attempt),
	}
	if a.joined == nil && a.result != resultArrived {
		// What a replay from this step sends it again.
		keepInput(&base, d)
	}
	var events []journal.Event
	if d.outbox {
		// Started in a transaction (StartTx): nobody recorded its start.
		// Its version is the one of the worker that takes it in, which is
		// the starter's unless a deploy came between.
		start := journal.Event{RunID: m.RunID, Flow: r.f.name, Kind: journal.KindStart, Outcome: "started (outbox)",
			StartedAt: m.FirstSeen, EndedAt: m.FirstSeen, Status: journal.Running, RunStep: r.spec.Name,
			Seq: journal.Seq(0, 0, 1, 0), Key: "start", Version: r.f.version}
		if r.f.json {
			start.Input = append([]byte(nil), m.Body...)
		}
		events = append(events, start)
	}
	if d.pos > 0 && d.pos < len(d.route) && r.f.external(d.route[d.pos-1]) {
		// The run came back from a step another service served.
		prev := d.route[d.pos-1]
		events = append(events, journal.Event{RunID: m.RunID, Flow: r.f.name, Kind: journal.KindStep, Step: prev,
			Outcome: "completed", StartedAt: m.Timestamp, EndedAt: m.Timestamp, Queue: r.f.queue(prev),
			Seq: journal.Seq(d.replays, d.pos, 0, 3), Key: fmt.Sprintf("external/%d/%d", d.replays, d.pos-1)})
	}
	switch s.Outcome {
	case broker.OutcomeLabelAccepted:
		switch a.result {
		case resultCancelled:
			base.Kind, base.Outcome, base.Status = journal.KindCancel, "dropped: the run was cancelled while it waited", ""
			if !d.held && d.signal == nil {
				base.Outcome = "not run: the run was cancelled"
			}
			base.Key = fmt.Sprintf("dropped/%d/%d", d.replays, d.pos)
			events = append(events, base)
		case resultCompensating:
			events = append(events, r.givenUp(a, base, s))
		default:
			events = append(events, r.accepted(a, base, now)...)
		}
	case broker.OutcomeLabelRetried:
		base.Outcome, base.Status, base.Error = "retried", journal.Running, errText(s.Err)
		if a.result == resultHopFailed {
			// The step is done: only its next message is to be sent again.
			base.Outcome = "hop failed"
		}
		due := now.Add(s.Delay)
		base.DueAt = &due
		events = append(events, base)
	case broker.OutcomeLabelDeadLettered, broker.OutcomeLabelParked:
		events = append(events, r.givenUp(a, base, s))
	case broker.OutcomeLabelInProgress:
		if a.result != resultRateLimited {
			return nil
		}
		events = append(events, r.rateEvent(d, a.limitKey, a.waitUntil, now))
	default:
		// Put back or unsettled: it comes again, and is recorded then.
		return nil
	}
	switch {
	case a.joined != nil:
		for i := range events {
			joinedEvent(&events[i], a.joined)
		}
		events = append(slices.Clip(a.extra), events...)
	case d.branch != nil && a.result != resultArrived:
		// (An arrival's own event is placed already.)
		for i := range events {
			inBranch(&events[i], d.branch, d.pos)
		}
		if s.Outcome == broker.OutcomeLabelAccepted {
			// Its branch settled at the fork here (arriveHere).
			events = append(events, a.extra...)
		}
	}
	return events
}

func errText(err error) string {
	if err == nil {
		return ""
	}
	return err.Error()
}

// accepted is the events of a step that ran (or was passed on again): the
// run goes on, waits, is handed to another service, or has ended.
func (r *stepRunner) accepted(a *stepAttempt, base journal.Event, now time.Time) []journal.Event {
	d := &a.d
	base.Outcome, base.Status = "completed", journal.Running
	switch a.result {
	case resultDuplicate:
		return nil
	case resultArrived:
		return a.extra
	case resultForked:
		// Before anything of its branches, whose events share its stage.
		base.Outcome, base.Seq = forkOutcome(r.spec.Fork, a.forked), journal.Seq(d.replays, d.pos+1, 0, 1)
		return []journal.Event{base}
	case resultStopped:
		base.Outcome = "stopped: another branch was given up"
		return []journal.Event{base}
	case resultHoldEnded, resultHoldDropped:
		base.Outcome, base.Status = "hold ended: the branch is undone and the run compensated", ""
		if a.result == resultHoldDropped {
			base.Outcome = "hold ended: not needed, the run was replayed or cancelled meanwhile"
		}
		base.Key = fmt.Sprintf("hold/%s/%d/%d", d.branch.Join, d.branch.Branch, d.hold.Replays)
		return []journal.Event{base}
	case resultWaiting:
		base.Outcome, base.Status = waitOutcome(r.spec.Name, a.waitUntil), journal.Waiting
		due := a.waitUntil
		base.DueAt = &due
		base.Key = fmt.Sprintf("wait/%d/%d", d.replays, d.pos)
		return []journal.Event{base}
	case resultTimerDropped:
		return nil
	case resultLimited:
		base.Outcome, base.Status = limitOutcome(r.spec.Limit.N, a.limitKey), journal.Waiting
		base.Key = fmt.Sprintf("limit/%d/%d/%d", d.replays, d.pos, d.m.Attempt)
		base.Seq = journal.Seq(d.replays, d.pos+1, d.m.Attempt, 1)
		return []journal.Event{base}
	case resultChildStarted:
		base.Outcome = timeline.StartedChild(a.child)
		base.Key = fmt.Sprintf("child/%s/%d", d.at(), d.m.Attempt)
		if d.child != nil {
			// Started again after the child failed.
			base.Key = fmt.Sprintf("child/%s/again/%d", d.at(), d.child.Attempt)
		}
		return []journal.Event{base}
	case resultEnded:
		base.Outcome, base.Status = "ended", journal.Ended
		return []journal.Event{base}
	case resultDone:
		base.Status = journal.Completed
		return append([]journal.Event{base}, r.skips(a, now)...)
	case resultResent:
		base.RunStep = a.resentTo
		if a.plan.due.After(now) {
			base.Status, base.DueAt = journal.Waiting, &a.plan.due
		}
		return []journal.Event{base}
	}
	next := d.route[a.plan.next]
	base.RunStep = next
	events := append([]journal.Event{base}, r.skips(a, now)...)
	stage := a.plan.next + 1
	if !a.plan.due.IsZero() {
		due := a.plan.due
		events = append(events, journal.Event{RunID: d.m.RunID, Flow: r.f.name, Kind: journal.KindDelay, Step: next,
			Outcome: "waiting", StartedAt: now, EndedAt: now, DueAt: &due, Status: journal.Waiting, RunStep: next,
			Replays: d.replays, Seq: journal.Seq(d.replays, stage, 0, 0), Key: fmt.Sprintf("delay/%d/%d", d.replays, a.plan.next)})
	}
	if r.f.external(next) {
		// From here another service has the run: the engine only sees it
		// again at the step after, if there is one.
		h := journal.Event{RunID: d.m.RunID, Flow: r.f.name, Kind: journal.KindHandOff, Step: next,
			Outcome: "handed off", StartedAt: now, EndedAt: now, Queue: r.f.queue(next), Status: journal.Running, RunStep: next,
			Replays: d.replays, Seq: journal.Seq(d.replays, stage, 0, 1), Key: fmt.Sprintf("handoff/%d/%d", d.replays, a.plan.next)}
		if a.plan.next == len(d.route)-1 {
			h.Status = journal.Completed
		}
		events = append(events, h)
	}
	return events
}

// skips are the events of the steps the hop jumped over.
func (r *stepRunner) skips(a *stepAttempt, now time.Time) []journal.Event {
	var out []journal.Event
	for _, p := range a.plan.skipped {
		out = append(out, journal.Event{RunID: a.d.m.RunID, Flow: r.f.name, Kind: journal.KindSkip, Step: a.d.route[p],
			Outcome: "skipped", StartedAt: now, EndedAt: now, Queue: r.f.queue(a.d.route[p]),
			Seq: journal.Seq(a.d.replays, p+1, 0, 1), Key: fmt.Sprintf("skip/%d/%d", a.d.replays, p)})
	}
	return out
}

// givenUp is the event of a step given up for good: the run has failed,
// and is being compensated (its message accepted, or, when the consumer
// gave it up, in its dead-letter queue), held for a replay, unresolved
// (nothing it did could be compensated), or just failed. s.Reason is the
// consumer's reason when it set the message aside; a.reason the handler's
// otherwise.
func (r *stepRunner) givenUp(a *stepAttempt, base journal.Event, s broker.Settlement) journal.Event {
	base.Outcome, base.Status, base.Error = "failed", journal.Failed, s.Reason
	switch s.Outcome {
	case broker.OutcomeLabelDeadLettered:
		base.DeadLetter = r.queue + broker.DeadLetterSuffix
	case broker.OutcomeLabelParked:
		base.Outcome, base.DeadLetter = "parked", r.queue+broker.ParkedSuffix
	default:
		base.Error = a.reason
	}
	switch a.compensation {
	case compensationStarted, compensationUnresolved:
		base.Status = journal.Compensating
		if a.compensation == compensationUnresolved {
			base.Status = journal.Unresolved
		}
		if s.Outcome != broker.OutcomeLabelParked {
			// Accepted, or taken out of the dead-letter queue again: the
			// compensation has the run.
			base.DeadLetter = ""
		}
	case compensationHeld:
		until := a.holdUntil
		base.DueAt = &until
	}
	return base
}

// external reports whether the step called name is served elsewhere.
func (f *flow) external(name string) bool {
	i, ok := f.index[name]
	return ok && f.steps[i].External
}

// settled records what became of one delivery of a compensation, unless
// the handler recorded exactly that before it returned; one that could
// not be read at all is still recorded against the run it names.
func (c *compRunner) settled(ctx context.Context, s broker.Settlement) {
	m := s.Message
	if m == nil {
		c.e.recordUnread(ctx, c.f, c.spec.Name, c.queue, journal.CompensationStage, s)
		return
	}
	a, _ := s.Note.(*compAttempt)
	if a == nil || m.RunID == "" || a.expect == s.Outcome {
		return
	}
	c.e.record(ctx, c.outcome(ctx, a, s)...)
}

// outcome is the journal event of one delivery of a compensation, with its
// metric counted; none when there is nothing to record.
func (c *compRunner) outcome(ctx context.Context, a *compAttempt, s broker.Settlement) []journal.Event {
	e, ok := c.event(a, s, c.e.now())
	if !ok {
		return nil
	}
	c.logOutcome(ctx, a, s, e)
	switch {
	case e.Outcome == "retried":
		c.e.metrics.compensated(ctx, c.f.name, c.spec.Name, "retried", ErrorType(s.Err))
	case e.Outcome == "compensation_failed":
		c.e.metrics.compensated(ctx, c.f.name, c.spec.Name, "unresolved", compErrorType(a, s))
	case e.Outcome == "compensated":
		c.e.metrics.compensated(ctx, c.f.name, c.spec.Name, "compensated", "")
	}
	return []journal.Event{e}
}

// logOutcome writes the line an operator reads for what became of one
// delivery of a compensation, e being its event: a retry at DEBUG, the
// run compensated (its last compensation done) at INFO, a compensation
// given up and the run left unresolved at ERROR (a compensation its
// handler gave up said so at ERROR already: compRunner.failed).
func (c *compRunner) logOutcome(ctx context.Context, a *compAttempt, s broker.Settlement, e journal.Event) {
	m := a.d.m
	switch {
	case e.Outcome == "retried":
		if c.e.log.Enabled(ctx, slog.LevelDebug) {
			c.e.log.LogAttrs(ctx, slog.LevelDebug, "compensation retried", slog.String("run_id", m.RunID), slog.String("flow", c.f.name),
				slog.String("step", c.spec.Name), slog.Int("attempt", m.Attempt), slog.Duration("delay", s.Delay), slog.String("error", e.Error))
		}
	case e.Outcome == "compensation_failed":
		if a.result != compGivenUp {
			c.e.log.LogAttrs(ctx, slog.LevelError, "compensation given up: the run is unresolved, a person has to look",
				slog.String("run_id", m.RunID), slog.String("flow", c.f.name), slog.String("step", c.spec.Name),
				slog.String("error", e.Error), slog.String("dead_letter", e.DeadLetter))
		}
	case e.Status == journal.Compensated:
		c.e.log.LogAttrs(ctx, slog.LevelInfo, "compensation finished: the run is compensated", slog.String("run_id", m.RunID),
			slog.String("flow", c.f.name), slog.String("step", c.spec.Name), slog.String("failed", a.d.comp.Failed))
	case e.Status == journal.Unresolved:
		c.e.log.LogAttrs(ctx, slog.LevelError, "compensation finished: the run is unresolved, a person has to look",
			slog.String("run_id", m.RunID), slog.String("flow", c.f.name), slog.String("step", c.spec.Name),
			slog.String("failed", a.d.comp.Failed), slog.Any("unresolved", a.d.comp.Unresolved), slog.String("error", e.Error))
	}
}

// event is the journal event of one delivery of a compensation, a the
// handler's view of it and s what the consumer did with it (or will do),
// at now; false when there is nothing to record.
func (c *compRunner) event(a *compAttempt, s broker.Settlement, now time.Time) (journal.Event, bool) {
	if a.result == compDuplicate || a.result == compBusy {
		return journal.Event{}, false
	}
	m, cs := a.d.m, &a.d.comp
	if a.result == compMalformed {
		// Without its state nothing says what is left to undo: the run is
		// unresolved, as with a compensation given up.
		if s.Outcome != broker.OutcomeLabelDeadLettered && s.Outcome != broker.OutcomeLabelParked {
			return journal.Event{}, false
		}
		return journal.Event{RunID: m.RunID, Flow: c.f.name, Kind: journal.KindCompensation, Step: c.spec.Name,
			Attempt: m.Attempt, StartedAt: s.Started, EndedAt: now, Queue: c.queue, RunStep: c.spec.Name,
			Outcome: "compensation_failed", Error: s.Reason, Status: journal.Unresolved, Replays: a.d.replays,
			DeadLetter: c.queue + broker.DeadLetterSuffix, Seq: journal.Seq(a.d.replays, journal.CompensationStage, m.Attempt, 2),
			Key: "unread/" + m.ID}, true
	}
	e := journal.Event{
		RunID: m.RunID, Flow: c.f.name, Kind: journal.KindCompensation, Step: c.spec.Name, Attempt: m.Attempt,
		StartedAt: s.Started, EndedAt: now, Queue: c.queue, Replays: cs.Replays, RunStep: c.spec.Name,
		Error:   cs.Error,
		Seq:     journal.Seq(cs.Replays, journal.CompensationStage+cs.K, m.Attempt, 2),
		Key:     fmt.Sprintf("compensation/%s/%d", cs.at(), m.Attempt),
		Outcome: "compensated", Status: journal.Compensating,
	}
	unresolved := len(cs.Unresolved) > 0
	switch {
	case a.result == compSuperseded:
		e.Outcome, e.Status = "not needed: the run was replayed or compensated meanwhile", ""
		e.Error, e.Key = "", fmt.Sprintf("hold/%d", cs.Replays)
	case s.Outcome == broker.OutcomeLabelRetried:
		e.Outcome, e.Error = "retried", errText(s.Err)
		due := now.Add(s.Delay)
		e.DueAt = &due
	case s.Outcome == broker.OutcomeLabelDeadLettered || s.Outcome == broker.OutcomeLabelParked:
		e.Outcome, e.Error = "compensation_failed", s.Reason
		e.DeadLetter = c.queue + broker.DeadLetterSuffix
		unresolved = true
	case s.Outcome == broker.OutcomeLabelAccepted:
	default:
		return journal.Event{}, false
	}
	if a.last && e.Status != "" && s.Outcome != broker.OutcomeLabelRetried {
		e.Status = journal.Compensated
		if unresolved {
			e.Status = journal.Unresolved
		}
		if cs.Branch != nil && !unresolved {
			// One branch is undone; the chain that undoes the rest says
			// how the run ends.
			e.Status = journal.Compensating
		}
	}
	return e, true
}

// settled records a compensate-now request.
func (n *nowRunner) settled(ctx context.Context, s broker.Settlement) {
	m := s.Message
	result, _ := s.Note.(string)
	if m == nil || m.RunID == "" || s.Outcome != broker.OutcomeLabelAccepted {
		return
	}
	now := n.e.now()
	r := max(replays(m.Headers)-1, 0)
	e := journal.Event{RunID: m.RunID, Flow: n.f.name, Kind: journal.KindCompensation, Outcome: "compensation started on request",
		StartedAt: s.Started, EndedAt: now, Queue: n.f.compensateNowQueue(), Replays: r,
		Seq: journal.Seq(r, journal.CompensationStage-1, 0, 0), Key: fmt.Sprintf("compensate-now/%d", r)}
	switch result {
	case compStarted:
		e.Status = journal.Compensating
	case compNothing:
		// Nothing it did needs undoing: it is as compensated as it will
		// get, and its message is gone from the dead-letter queue.
		e.Outcome, e.Status = "nothing to compensate", journal.Compensated
	case compGivenUp:
		e.Outcome, e.Status = "nothing can be compensated: what its steps returned is no longer kept", journal.Unresolved
	default:
		return
	}
	if run, err := n.e.journal.Run(ctx, m.RunID); err == nil {
		// The run still says where it failed, and why.
		e.RunStep, e.Error = run.Step, run.Error
	}
	n.e.record(ctx, e)
}
