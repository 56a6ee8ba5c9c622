package engine

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"slices"
	"strings"
	"time"

	"github.com/acemq/acemq-flow/broker"
	"github.com/acemq/acemq-flow/dsl"
	"github.com/acemq/acemq-flow/engine/journal"
	"github.com/acemq/acemq-flow/patterns"
)

// What a compensation handler decided, for its settle hook.
const (
	compDone       = "compensated" // undone; more may follow
	compSuperseded = "superseded"  // a held compensation of a run replayed (or compensated) since
	compGivenUp    = "unresolved"  // given up; the rest still run
	compNothing    = "nothing"     // compensate-now of a run with nothing to undo
	compDeadline   = "deadline"    // a deadline's timer: CancelRun recorded what it did
	compStarted    = "started"     // compensate-now started the chain
	compRetrying   = "retrying"    // failed; will be retried
	compBusy       = "busy"        // running elsewhere, or could not pass on; put back
	compDuplicate  = "duplicate"   // done before and passed on
	compMalformed  = "malformed"   // no readable compensation state
	compResent     = "resent"      // done before; its kept next message was sent again
)

// compensationStart is what giving a run up did to its compensation.
type compensationStart uint8

// What giving a run up did to its compensation.
const (
	// compensationNone: nothing was started (nothing to compensate).
	compensationNone compensationStart = iota
	// compensationStarted: the first compensation was sent.
	compensationStarted
	// compensationHeld: it waits on the ladder until the hold ends.
	compensationHeld
	// compensationUnresolved: nothing can be compensated, since every
	// step to undo lacks what its compensation needs: the run is
	// unresolved at once.
	compensationUnresolved
)

// startCompensation sends the first compensation of a run whose step
// failed for good: now, or on the ladder after hold (the flow's
// HoldForReplay). st lists what to compensate, unresolved the steps already
// known to be beyond it. It says which it did, and until when a held one
// waits.
func (e *Engine) startCompensation(ctx context.Context, f *flow, m *broker.Message, st runState, unresolved []string, failed, reason string, hold time.Duration) (compensationStart, time.Time, error) {
	cs := compState{Failed: failed, Error: journal.Truncate(reason), Replays: replays(m.Headers), Held: hold > 0,
		Unresolved: slices.Clone(unresolved)}
	out, cs, ok, err := e.nextCompensation(ctx, f, m, st.Compensate, cs)
	switch {
	case err != nil:
		return compensationNone, time.Time{}, err
	case !ok:
		return compensationUnresolved, time.Time{}, nil
	}
	first := strings.TrimPrefix(out.RoutingKey, compensateKey+".")
	if hold > 0 {
		until := e.now().Add(hold)
		if err := e.conn.Schedule(ctx, until, out); err != nil {
			return compensationNone, time.Time{}, fmt.Errorf("hold run %s for replay: %w", m.RunID, err)
		}
		e.log.Info("compensation held for a replay: it starts when the hold ends unless the run is replayed",
			slog.String("run_id", m.RunID), slog.String("flow", f.name), slog.String("step", failed),
			slog.String("compensate", first), slog.Time("until", until), slog.String("error", cs.Error))
		return compensationHeld, until, nil
	}
	if err := e.conn.Send(ctx, out); err != nil {
		return compensationNone, time.Time{}, fmt.Errorf("start compensating run %s: %w", m.RunID, err)
	}
	e.log.Info("compensation started", slog.String("run_id", m.RunID), slog.String("flow", f.name), slog.String("step", failed),
		slog.String("compensate", first), slog.String("error", cs.Error))
	return compensationStarted, time.Time{}, nil
}

// nextCompensation is the message for the newest of entries that can be
// compensated, with cs as its state (Remaining: the entries before it).
// An entry whose payload is no longer kept anywhere cannot be compensated:
// it is added to cs.Unresolved, logged, and the one before it is tried. ok
// is false when none is left.
func (e *Engine) nextCompensation(ctx context.Context, f *flow, m *broker.Message, entries []compEntry, cs compState) (broker.Outgoing, compState, bool, error) {
	for len(entries) > 0 {
		entry := entries[len(entries)-1]
		entries = entries[:len(entries)-1]
		if s := f.spec(f.renamed.of(entry.Step)); !s.Compensable && !f.isRemoved(entry.Step) {
			// Renamed to a step without one: nothing in this version undoes it.
			e.log.Error("a step cannot be compensated: this version of the flow has no compensation for it; the run will be unresolved",
				slog.String("flow", f.name), slog.String("run_id", m.RunID), slog.String("step", entry.Step))
			cs.Unresolved = append(cs.Unresolved, entry.Step)
			continue
		}
		body, err := e.entryBody(ctx, m.RunID, entry)
		if errors.Is(err, journal.ErrDataNotFound) {
			e.log.Error("a step cannot be compensated: what it returned is no longer kept; the run will be unresolved",
				slog.String("flow", f.name), slog.String("run_id", m.RunID), slog.String("step", entry.Step), slog.Any("error", err))
			cs.Unresolved = append(cs.Unresolved, entry.Step)
			continue
		}
		if err != nil {
			return broker.Outgoing{}, cs, false, err
		}
		cs.Remaining = entries
		out, err := f.compensationMessage(ctx, e.conn, m, entry.Step, body, cs)
		return out, cs, err == nil, err
	}
	return broker.Outgoing{}, cs, false, nil
}

// compensationMessage is the message that has step undone: its payload,
// body, is what the step returned, its state says what follows. Its
// message id is the run's, the replay's and the compensation's, so that a
// compensation started twice (a redelivered failure, a compensate-now
// racing a held timer) is one message to the idempotency store.
func (f *flow) compensationMessage(ctx context.Context, conn *broker.Conn, m *broker.Message, step string, body []byte, cs compState) (broker.Outgoing, error) {
	h, err := jsonHeader(cs)
	if err != nil {
		return broker.Outgoing{}, err
	}
	headers := carried(m)
	headers[HeaderCompensation] = h
	return conn.Prepare(ctx, body,
		broker.ToExchange(f.name), broker.To(compensateKey+"."+step), broker.Mandatory(),
		broker.CausedBy(m), broker.RunID(m.RunID), broker.FirstSeen(m.FirstSeen),
		broker.MessageID(fmt.Sprintf("%s/compensate/%s", m.RunID, cs.at())),
		broker.Headers(headers), broker.WithCodec(encoded{f.codec.ContentType()}))
}

// encoded publishes bytes already in a codec's form under its content type.
type encoded struct{ contentType string }

func (c encoded) ContentType() string { return c.contentType }

func (c encoded) Encode(v any) ([]byte, error) {
	b, ok := v.([]byte)
	if !ok {
		return nil, fmt.Errorf("%w: encoded payload is a %T", broker.ErrInvalidPayload, v)
	}
	return b, nil
}

func (c encoded) Decode([]byte, any) error {
	return errors.New("encoded: publishing only")
}

// compRunner works the compensation queue of one step.
type compRunner struct {
	e      *Engine
	f      *flow
	spec   dsl.StepSpec
	policy broker.RetryPolicy
	queue  string
	// tidy takes a run's message out of a dead-letter queue once its held
	// compensation starts (the worker's tidier).
	tidy func(queue, runID string)
	// removed says the step was removed from the flow (dsl.Removed): its
	// compensations are given up, and those before them go on.
	removed bool
}

// compAttempt is one delivery of a compensation, as its handler saw it:
// what its BeforeSettle function and its settle hook read (from the Ack's
// note).
type compAttempt struct {
	recording
	d      delivery
	result string
	last   bool
}

func newCompRunner(e *Engine, f *flow, i int, tidy func(queue, runID string)) *compRunner {
	s := f.steps[i]
	return &compRunner{e: e, f: f, spec: s, policy: f.compRet[i], queue: f.compensationQueue(s.Name), tidy: tidy}
}

// handle undoes one step, then sends the run on to the compensation of the
// step that completed before it. As a step's, what it came to is recorded
// before the broker hears of it (written).
func (c *compRunner) handle(ctx context.Context, m *broker.Message) broker.Ack {
	a := &compAttempt{d: readCompensation(m), result: compMalformed, recording: recording{start: c.e.now()}}
	return noted(c.decide(ctx, a), a)
}

func (a *compAttempt) accepting() bool {
	return a.result == compDone || a.result == compSuperseded || a.result == compResent
}

func (c *compRunner) decide(ctx context.Context, a *compAttempt) broker.Ack {
	d := &a.d
	if d.err != nil {
		return broker.Reject(broker.Fatal(fmt.Errorf("flow %q: compensation of %q: %w", c.f.name, c.spec.Name, d.err)))
	}
	a.result = compRetrying
	a.last = len(d.comp.Remaining) == 0
	if err := c.e.overDeliveryLimit(d); err != nil {
		return c.failed(ctx, a, broker.Fatal(err))
	}
	if c.removed {
		return c.failed(ctx, a, broker.Fatal(fmt.Errorf("compensation of step %q: %w", c.spec.Name, dsl.ErrStepRemoved)))
	}
	held := d.comp.Held && d.comp.K == 0
	if held {
		if stale, err := c.e.superseded(ctx, d.m.RunID, d.comp.Replays); err != nil {
			return broker.Retry(err)
		} else if stale {
			a.result = compSuperseded
			return broker.Accept()
		}
	}
	key := fmt.Sprintf("%s/compensate/%s/%s", d.m.RunID, d.comp.at(), c.spec.Name)
	var compErr error
	done := patterns.Run(ctx, c.e.once, patterns.Unit[kept]{
		Key: key, InTx: c.spec.Transactional,
		Do: func(ctx context.Context) (kept, error) {
			if held {
				// The hold ended without a replay: the failed message kept for
				// one no longer needs a person.
				c.tidy(c.f.queue(d.comp.Failed)+broker.DeadLetterSuffix, d.m.RunID)
			}
			var k kept
			k, compErr = c.work(ctx, a)
			return k, compErr
		},
		Encode: kept.encode,
		Decode: decodeKept,
		CarryOut: func(ctx context.Context, k kept) error {
			if err := c.e.carryOut(ctx, compensateKey+"."+c.spec.Name, d.m.RunID, k); err != nil {
				return err
			}
			if k.kind == keptDone && d.comp.Branch != nil {
				// The branch's own work is undone: settle it.
				return c.e.settleStopped(ctx, c.f, d.m, *d.comp.Branch, true, d.comp.givenUpWhy())
			}
			return nil
		},
	})
	if ack, settled := c.e.unsettled(done, func() { a.result = compBusy }); settled {
		return ack
	}
	switch {
	case done.Failed && compErr != nil:
		var he *patterns.HopError
		if errors.As(compErr, &he) {
			return broker.Reject(compErr)
		}
		return c.failed(ctx, a, compErr)
	case done.Failed:
		return broker.Retry(&patterns.StepError{Step: compensateKey + "." + c.spec.Name, Err: done.Err})
	case !done.Kept:
		a.result = compDuplicate
		return broker.Accept().As(patterns.IdempotencyOutcomeDuplicate)
	case done.Err != nil && unsendable(done.Err):
		return broker.Reject(broker.Fatal(done.Err))
	case done.Err != nil:
		return broker.Retry(done.Err)
	}
	a.result, a.confirm = compDone, key
	if done.Resent {
		a.result = compResent
	}
	return broker.Accept()
}

// work undoes the step and works out the message for the compensation
// after it, when there is one. Its error is the compensation's own
// failure, or a *patterns.HopError: the next compensation's message could
// not be built.
func (c *compRunner) work(ctx context.Context, a *compAttempt) (kept, error) {
	c.e.metrics.active(ctx, c.f.name, compensateKey+"."+c.spec.Name, 1)
	err := c.spec.Compensate(ctx, decoder(a.d.m))
	c.e.metrics.active(ctx, c.f.name, compensateKey+"."+c.spec.Name, -1)
	if err != nil {
		return kept{}, err
	}
	if a.last {
		return keptOf(keptDone, hop{}, broker.Outgoing{}), nil
	}
	out, ok, err := c.next(ctx, a)
	switch {
	case err != nil:
		return kept{}, &patterns.HopError{Step: compensateKey + "." + c.spec.Name, Err: broker.Fatal(err)}
	case !ok:
		return keptOf(keptDone, hop{}, broker.Outgoing{}), nil
	}
	return keptOf(keptHop, hop{}, out), nil
}

// failed retries a compensation that failed, or gives it up: the step is
// then unresolved, and the compensations before it still run, because
// stopping would leave more undone. Its key, if it had one, was let go.
func (c *compRunner) failed(ctx context.Context, a *compAttempt, err error) broker.Ack {
	m := a.d.m
	var fatal *broker.FatalError
	serr := &patterns.StepError{Step: compensateKey + "." + c.spec.Name, Err: err}
	a.err = serr
	if !errors.As(err, &fatal) && !undecodable(err) && c.policy.GiveUp(m.Attempt, m.FirstSeen, c.e.now()) == "" {
		a.result = compRetrying
		a.expect, a.reason, a.delay = expected(serr, false, c.policy, m, c.e.now())
		return broker.Retry(serr)
	}
	a.result = compGivenUp
	a.d.comp.Unresolved = append(a.d.comp.Unresolved, c.spec.Name)
	if !a.last {
		out, ok, nerr := c.next(ctx, a)
		if nerr == nil && ok {
			nerr = c.e.conn.Send(ctx, out)
		}
		if nerr != nil {
			// The rest must still run: keep this message, attempt
			// unchanged, and try again.
			c.e.log.Warn("the next compensation could not be sent; this one will be tried again",
				slog.String("flow", c.f.name), slog.String("run_id", m.RunID), slog.String("step", c.spec.Name), slog.Any("error", nerr))
			a.result, a.d.comp.Unresolved = compBusy, a.d.comp.Unresolved[:len(a.d.comp.Unresolved)-1]
			return broker.InProgress(c.e.cfg.InProgressDelay)
		}
	}
	if a.last && a.d.comp.Branch != nil {
		if err := c.e.settleStopped(ctx, c.f, m, *a.d.comp.Branch, true, a.d.comp.givenUpWhy()); err != nil {
			a.result, a.d.comp.Unresolved = compBusy, a.d.comp.Unresolved[:len(a.d.comp.Unresolved)-1]
			return broker.InProgress(c.e.cfg.InProgressDelay)
		}
	}
	c.e.log.Error("compensation given up: the run is unresolved, a person has to look",
		slog.String("flow", c.f.name), slog.String("run_id", m.RunID), slog.String("step", c.spec.Name), slog.Any("error", err))
	a.expect, a.reason, a.delay = expected(serr, true, c.policy, m, c.e.now())
	return broker.Reject(serr)
}

// next is the message for the compensation after a's, carrying a's state on
// with this one counted; ok is false when none of those left can be
// compensated, which makes a's the run's last (its state's Unresolved then
// lists them too).
func (c *compRunner) next(ctx context.Context, a *compAttempt) (broker.Outgoing, bool, error) {
	cs := a.d.comp
	cs.K++
	cs.Held = false
	out, cs, ok, err := c.e.nextCompensation(ctx, c.f, a.d.m, cs.Remaining, cs)
	if err == nil && !ok {
		a.last, a.d.comp.Unresolved = true, cs.Unresolved
	}
	return out, ok, err
}

// entryBody is the payload entry's compensation gets: what it carries, or
// what the journal keeps under its Ref (an error matching
// journal.ErrDataNotFound when nothing is kept there any more).
func (e *Engine) entryBody(ctx context.Context, runID string, entry compEntry) ([]byte, error) {
	if entry.Ref == "" {
		return entry.inline(), nil
	}
	if e.data == nil {
		return nil, fmt.Errorf("%w: step %q's result is kept in a journal under %q, and this engine's journal (%T) keeps no data",
			journal.ErrDataNotFound, entry.Step, entry.Ref, e.journal)
	}
	ctx, cancel := context.WithTimeout(ctx, patterns.DefaultStoreTimeout)
	defer cancel()
	b, err := e.data.Data(ctx, runID, entry.Ref)
	if err != nil {
		return nil, fmt.Errorf("step %q's result for its compensation: %w", entry.Step, err)
	}
	return b, nil
}

// superseded reports whether a held compensation of a run is no longer
// wanted: the run was replayed since it failed, or is no longer failed (a
// person compensated it already). A run the journal does not know is
// compensated: without a shared journal, compensating is the safe way.
func (e *Engine) superseded(ctx context.Context, runID string, replays int) (bool, error) {
	run, err := e.journal.Run(ctx, runID)
	switch {
	case errors.Is(err, journal.ErrRunNotFound):
		return false, nil
	case err != nil:
		return false, fmt.Errorf("look up run %s before compensating it: %w", runID, err)
	}
	return run.Replays > replays || run.Status != journal.Failed, nil
}

// nowRunner works <flow>.compensate: a failed run's message moved there by
// Compensate, whose compensations start now. What it did travels with its
// Ack (compStarted, compNothing, compGivenUp) to its settle hook.
type nowRunner struct {
	e *Engine
	f *flow
}

func (n *nowRunner) handle(ctx context.Context, m *broker.Message) broker.Ack {
	var dl deadlineRef
	if found, err := readJSONHeader(m.Headers, HeaderDeadline, &dl); found && err == nil && m.RunID != "" {
		if err := n.e.deadline(ctx, n.f, m, dl); err != nil {
			return broker.Retry(fmt.Errorf("flow %q: the deadline of run %s: %w", n.f.name, m.RunID, err)).With(compBusy)
		}
		return broker.Accept().With(compDeadline)
	}
	d := readStep(m)
	if d.err != nil {
		return broker.Reject(broker.Fatal(fmt.Errorf("flow %q: compensate now: %w", n.f.name, d.err))).With(compMalformed)
	}
	if len(d.state.Compensate) == 0 && d.branch == nil {
		return broker.Accept().With(compNothing)
	}
	// Moving the message here stamped it as a replay; the run's own count
	// is one less.
	h := m.Headers.Clone()
	h[broker.HeaderReplayCount] = int64(max(d.replays-1, 0))
	moved := *m
	moved.Headers = h
	reason := "compensated on request"
	if run, err := n.e.journal.Run(ctx, m.RunID); err == nil && run.Error != "" {
		reason = run.Error
	}
	if d.branch != nil {
		// A branch held for replay: compensated now as its hold's end
		// would be, the join failed and every branch and what came before
		// undone.
		if err := n.e.branchGivenUp(ctx, n.f, &moved, *d.branch, d.state, d.step(), reason); err != nil {
			return broker.Retry(err).With(compBusy)
		}
		return broker.Accept().With(compStarted)
	}
	kind, _, err := n.e.startCompensation(ctx, n.f, &moved, d.state, nil, d.step(), reason, 0)
	switch {
	case err != nil:
		return broker.Retry(err).With(compBusy)
	case kind == compensationUnresolved:
		return broker.Accept().With(compGivenUp)
	}
	return broker.Accept().With(compStarted)
}
