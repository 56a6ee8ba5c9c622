package engine

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"reflect"
	"slices"
	"time"

	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/codes"

	"github.com/acemq/acemq-flow/broker"
	"github.com/acemq/acemq-flow/broker/transport"
	"github.com/acemq/acemq-flow/dsl"
	"github.com/acemq/acemq-flow/engine/journal"
	"github.com/acemq/acemq-flow/patterns"
)

// stepResult is what a step handler decided about a delivery, for the
// journal events recorded once the consumer carries it out.
type stepResult uint8

// The step handler's decisions.
const (
	resultFailed         stepResult = iota // the step failed (retried or given up); until decided
	resultContinued                        // the step ran and the run went on
	resultDone                             // the step ran and the route is done
	resultEnded                            // the step ended the run (dsl.End)
	resultResent                           // done before; its kept hop was sent again
	resultDuplicate                        // done before and passed on; nothing to do
	resultBusy                             // running elsewhere; put back
	resultCancelled                        // cancelled while it waited; dropped
	resultCompensating                     // given up; its compensation has the run, so the message was accepted
	resultHopFailed                        // the step ran, its next message could not be sent: sent again on retry
	resultForked                           // a fork took the run in and sent its branches
	resultArrived                          // a branch came back to its fork, which waits for others
	resultStopped                          // a branch stopped: another was given up
	resultChildStarted                     // a Child step started its child run, and waits for it
	resultHoldEnded                        // a held branch's hold ended: it is undone, its join failed
	resultHoldDropped                      // a held branch's timer, after its run was replayed or cancelled
	resultWaiting                          // a WaitFor took the run in: it waits for its signal
	resultTimerDropped                     // a wait's timer, after its signal came
	resultSignalReceived                   // a signal another service sent: delivered (Signal records it), or set aside
	resultLimited                          // every place of its key was taken: it waits for one, parked in the journal
	resultRateLimited                      // over its step's rate: put back until the turn reserved for it
)

// stepRunner works one step's queue.
type stepRunner struct {
	e      *Engine
	f      *flow
	spec   dsl.StepSpec
	policy broker.RetryPolicy
	queue  string
	// spanName is the step's span's name, "step <flow>/<step>".
	spanName string
	// tidy takes a run's message out of a dead-letter queue once its
	// compensation has the run (the worker's tidier).
	tidy func(queue, runID string)
	// forks are the runners of the flow's forks in this worker, by step:
	// where a branch's last step settles its branch (arriveHere).
	forks map[string]*stepRunner
}

// stepAttempt is one delivery of a step, as its handler saw it: what its
// BeforeSettle function and its settle hook read (from the Ack's note).
type stepAttempt struct {
	recording
	d delivery
	// adopted says the flow gave the run its current route (flow.reroute).
	adopted bool
	result  stepResult
	plan    hop
	// resentTo is the step a kept hop was sent again to, when the kept
	// record did not say where the run went (see kept.planned).
	resentTo string
	// compensation says what this failure did to the run's compensation;
	// holdUntil is when a held one starts.
	compensation compensationStart
	holdUntil    time.Time
	// join runs a fork's join, for the arrival that fires it (nil
	// otherwise); extra is what an arrival records of itself (at the
	// fork, or on the branch's last step that settled it: arriveHere).
	join  func(context.Context) (any, error)
	extra []journal.Event
	// joined is the join an arrival fired (the delivery is then the run's
	// at the fork); forked is the join a fork opened.
	joined *branchRef
	forked journal.JoinStatus
	// child is the child run a Child step started.
	child string
	// waitUntil is when the wait a WaitFor took the run in at times out,
	// or when a rate-limited step's turn comes.
	waitUntil time.Time
	// limitKey is the key of a limited step's limit the delivery came
	// under; asked says it asked for a place under it.
	limitKey string
	asked    bool
	// claimed is the claim of the step's work made with its place
	// (placeClaimer), 0 when the step's unit claims it.
	claimed patterns.Claim
}

// recording is what a step's or a compensation's handler leaves for
// Engine.written, which records the delivery's events before the consumer
// settles it.
type recording struct {
	// start is when the handler took the delivery.
	start time.Time
	// expect is the consumer's outcome (a broker.OutcomeLabel) the events
	// are recorded for before the delivery is settled, with the error,
	// reason and retry delay they say; the settle hook records again only
	// when the consumer did something else. Empty when nothing is to be
	// recorded first.
	expect string
	err    error
	reason string
	delay  time.Duration
	// confirm is the key to confirm once the events are recorded.
	confirm string
	// kept says the events of the outcome the handler expects were
	// recorded with the unit's result (stepRunner.keep): written records
	// nothing more. early is those events, built once (and the delivery's
	// metrics counted for them): written records them when keeping them
	// failed.
	kept  bool
	early []journal.Event
	// finish, when not nil, is what is left of the handler's work, done
	// before the delivery's events are recorded (off the handler's slot):
	// its Ack replaces the one the handler returned.
	finish func(context.Context) broker.Ack
	// release is the place of a limited step that the confirm gives back
	// (placeClaimer), nil when there is none or it is given back apart;
	// released is what giving it back came to.
	release  *journal.Slot
	released error
}

// settlement is the settlement the handler expects the consumer of queue
// to carry out for m.
func (p *recording) settlement(queue string, m *broker.Message) broker.Settlement {
	return broker.Settlement{Queue: queue, Message: m, Started: p.start, Outcome: p.expect, Err: p.err, Reason: p.reason, Delay: p.delay}
}

func (p *recording) rec() *recording { return p }

// attempt is a handler's view of one delivery (*stepAttempt,
// *compAttempt), noted on its Ack for its BeforeSettle function and its
// settle hook.
type attempt interface {
	rec() *recording
	// accepting says the handler decided on what the consumer reports as
	// accepted, and records it so.
	accepting() bool
}

// noted notes a on ack; when a is accepting, its events are recorded as
// accepted before the consumer settles the delivery.
func noted(ack broker.Ack, a attempt) broker.Ack {
	if a.accepting() {
		a.rec().expect = broker.OutcomeLabelAccepted
	}
	return ack.With(a)
}

// beforeSettle is the BeforeSettle function of a consumer whose handler
// notes attempts of type A: it records the events the attempt comes to
// (events) before the broker hears of the delivery (Engine.written).
func beforeSettle[A attempt](e *Engine, flow, step, queue string, events func(context.Context, A, broker.Settlement) []journal.Event) func(context.Context, *broker.Message, broker.Ack) broker.Ack {
	return func(ctx context.Context, m *broker.Message, ack broker.Ack) broker.Ack {
		a, ok := ack.Note().(A)
		if !ok {
			return ack
		}
		p := a.rec()
		if finish := p.finish; finish != nil {
			p.finish = nil
			ack = noted(finish(ctx), a)
		}
		return e.written(ctx, m, p, flow, step, ack, func() []journal.Event { return events(ctx, a, p.settlement(queue, m)) })
	}
}

func newStepRunner(e *Engine, f *flow, i int, tidy func(queue, runID string)) *stepRunner {
	s := f.steps[i]
	return &stepRunner{e: e, f: f, spec: s, policy: f.retry[i], queue: f.queue(s.Name), spanName: "step " + f.name + "/" + s.Name, tidy: tidy}
}

// handle is the step's broker.Handler: it works out what becomes of the
// delivery (running the step unless it ran before) and leaves recording
// it to written, which the consumer calls before it settles the delivery;
// what it found out travels with its Ack (Ack.With).
func (r *stepRunner) handle(ctx context.Context, m *broker.Message) broker.Ack {
	a := &stepAttempt{d: readStep(m), result: resultFailed, recording: recording{start: r.e.now()}}
	r.f.migrate(&a.d)
	a.adopted = r.f.reroute(&a.d)
	return noted(r.decide(ctx, a), a)
}

func (a *stepAttempt) accepting() bool {
	switch a.result {
	case resultContinued, resultDone, resultEnded, resultResent, resultCancelled, resultCompensating,
		resultForked, resultArrived, resultStopped, resultChildStarted, resultHoldEnded, resultHoldDropped,
		resultWaiting, resultTimerDropped, resultSignalReceived, resultLimited:
		return true
	}
	return false
}

// written records what a delivery came to (events, built when the
// recording expects an outcome) before the broker hears of it, so that a
// worker killed, or a connection lost, between the two leaves a
// redelivery and a complete journal, never a run whose step is done and
// unrecorded. Only then is the key confirmed, so that a redelivery of a
// step whose events were not yet written writes them. It runs as the
// consumers' broker.BeforeSettle, off the handler's slot: the handlers go
// on with the next deliveries while the journal commits.
func (e *Engine) written(ctx context.Context, m *broker.Message, p *recording, flow, step string, ack broker.Ack, events func() []journal.Event) broker.Ack {
	if p.expect != "" && !p.kept {
		if p.early == nil {
			p.early = events()
		}
		if events := p.early; len(events) > 0 {
			if err := e.writer.RecordSync(ctx, events...); err != nil {
				e.log.Warn("journal events not written before their delivery's settlement; they are still queued",
					slog.String("flow", flow), slog.String("run_id", m.RunID), slog.String("step", step), slog.Any("error", err))
				if p.confirm != "" {
					// The outcome is kept under its key: put the message back,
					// and its redelivery records the events (again).
					p.expect = ""
					return broker.InProgress(e.cfg.InProgressDelay).With(ack.Note())
				}
			}
		}
	}
	switch {
	case p.release != nil:
		p.released = e.confirmReleasing(ctx, p.confirm, *p.release)
	case p.confirm != "":
		e.confirm(ctx, p.confirm)
	}
	return ack
}

// decide works out what becomes of a delivery: it runs the step unless it
// ran before, and passes what it produced on. A message that cannot be
// where it is (another step's, a route naming a step the flow does not
// have, one every worker died holding) is given up before the step runs.
func (r *stepRunner) decide(ctx context.Context, a *stepAttempt) broker.Ack {
	d := &a.d
	if ref, ok := sentSignal(d.m); ok && r.spec.Wait != nil && d.m.RunID != "" {
		return r.receive(ctx, a, ref)
	}
	if d.err != nil {
		return broker.Reject(broker.Fatal(fmt.Errorf("flow %q step %q: %w", r.f.name, r.spec.Name, d.err)))
	}
	if ack, removed := r.removedHere(ctx, a); removed {
		return ack
	}
	if d.step() != r.spec.Name {
		return r.giveUp(ctx, a, d.state, nil, broker.Fatal(fmt.Errorf("%w: flow %q step %q got a message for step %q", ErrMisrouted, r.f.name, r.spec.Name, d.step())))
	}
	if err := r.f.knows(d.route[d.pos:]); err != nil {
		return r.giveUp(ctx, a, d.state, nil, broker.Fatal(fmt.Errorf("flow %q step %q: %w", r.f.name, r.spec.Name, err)))
	}
	if err := r.e.overDeliveryLimit(d); err != nil {
		return r.giveUp(ctx, a, d.state, nil, broker.Fatal(fmt.Errorf("flow %q step %q: %w", r.f.name, r.spec.Name, err)))
	}
	if a.adopted {
		if err := r.mapPayload(ctx, d); err != nil {
			return r.giveUp(ctx, a, d.state, nil, broker.Fatal(fmt.Errorf("flow %q step %q: %w", r.f.name, r.spec.Name, err)))
		}
	}
	if arriving := d.branch != nil && r.spec.Fork != nil; !arriving {
		why, cancelled := r.e.cancels.why(d.m.RunID)
		if !cancelled && d.parent != nil {
			// A child run started a moment before its parent was cancelled
			// may not have been in the journal for CancelRun to find.
			if pwhy, ok := r.e.cancels.why(d.parent.Run); ok {
				if _, err := r.e.CancelRun(ctx, d.m.RunID, CancelRequest{Reason: "its parent run " + d.parent.Run + " was cancelled (" + pwhy + ")"}); err != nil && !errors.Is(err, ErrRunEnded) {
					return broker.Retry(err)
				}
				why, cancelled = r.e.cancels.why(d.m.RunID)
			}
		}
		if !cancelled && (d.held || d.signal != nil) {
			// It waited (on the ladder, for a signal), maybe longer than
			// this worker remembers cancellations: the journal knows.
			run, err := r.e.journal.Run(ctx, d.m.RunID)
			switch {
			case err != nil && !errors.Is(err, journal.ErrRunNotFound):
				return broker.Retry(fmt.Errorf("look up run %s before running it: %w", d.m.RunID, err))
			case err == nil && run.Status == journal.Cancelled:
				why, cancelled = run.Error, true
			}
		}
		if cancelled {
			return r.cancelledHere(ctx, a, why)
		}
	}
	if d.branch != nil {
		if r.spec.Fork != nil {
			return r.arrive(ctx, a)
		}
		if ack, stopped := r.stopIfFailed(ctx, a); stopped {
			return ack
		}
	} else if r.spec.Fork != nil {
		return r.fork(ctx, a)
	}
	if r.spec.Wait != nil {
		return r.wait(ctx, a)
	}
	if r.spec.Child != nil {
		if d.child == nil {
			return r.startChild(ctx, a, 1)
		}
		return r.childReturned(ctx, a)
	}
	if r.spec.Limit != nil || r.spec.Rate != nil {
		return r.limitedUnit(ctx, a)
	}
	return r.runUnit(ctx, a, d.stepKey(r.spec.Name))
}

// cancelledHere stops a cancelled run at the step, which does not run:
// what the run completed is compensated from here (on a branch, the
// branch is given up, which fails its join and has the run compensated
// once every branch has stopped), and a child run's parent is told.
func (r *stepRunner) cancelledHere(ctx context.Context, a *stepAttempt, why string) broker.Ack {
	d := &a.d
	a.result = resultCancelled
	if why == "" {
		why = "cancelled"
	}
	if d.branch != nil {
		if err := r.e.branchGivenUp(ctx, r.f, d.m, *d.branch, d.state, r.spec.Name, why); err != nil {
			return broker.Retry(err)
		}
		return broker.Accept()
	}
	if len(d.state.Compensate) > 0 {
		if _, _, err := r.e.startCompensation(ctx, r.f, d.m, d.state, nil, r.spec.Name, why, 0); err != nil {
			return broker.Retry(err)
		}
	}
	if d.parent != nil {
		// A child run: its parent's step, which waits for it with no
		// message in flight, hears that it failed (and finds its own run
		// cancelled, when it is).
		if err := r.e.childFailed(ctx, d, errors.New(why)); err != nil {
			return broker.Retry(err)
		}
	}
	return broker.Accept()
}

// runUnit runs the step's work (a step's function, a join's) once under
// key and decides what becomes of the delivery.
func (r *stepRunner) runUnit(ctx context.Context, a *stepAttempt, key string) broker.Ack {
	d := &a.d
	var w worked
	u := patterns.Unit[kept]{
		Key: key, InTx: r.spec.Transactional, Claimed: a.claimed,
		Do: func(ctx context.Context) (kept, error) {
			ids := []string{d.m.RunID}
			if d.parent != nil {
				ids = append(ids, d.parent.Run)
			}
			ctx, done := r.e.cancels.track(ctx, ids...)
			defer done()
			r.e.metrics.reached(ctx, r.f.name, r.f.version, d.m, d.pos, d.replays)
			w = r.work(ctx, a)
			return w.kept, errors.Join(w.stepErr, w.giveUp)
		},
		Encode: kept.encode,
		Decode: decodeKept,
		Keep: func(ctx context.Context, k kept, b []byte) error {
			return r.keep(ctx, a, key, k, b)
		},
		CarryOut: func(ctx context.Context, k kept) error {
			if at := r.arrivesAt(d, k); at != nil {
				return r.arriveHere(ctx, a, at, k)
			}
			return r.e.carryOut(ctx, r.spec.Name, d.m.RunID, k)
		},
	}
	done := patterns.Begin(ctx, r.e.once, u)
	if done.Pending && r.finishesLater(a) {
		// The step's work is done: keeping and sending what it produced
		// waits on the database and the broker, which need not hold one
		// of the step's handlers (BeforeSettle finishes it).
		a.finish = func(ctx context.Context) broker.Ack {
			return r.unitDone(ctx, a, key, &w, patterns.Finish(ctx, r.e.once, u, done))
		}
		return broker.Accept()
	}
	return r.unitDone(ctx, a, key, &w, patterns.Finish(ctx, r.e.once, u, done))
}

// finishesLater says whether a step's unit whose work is done is kept and
// carried out off the handler's slot: not on a branch, at a fork's join,
// for a limited step (whose place is given back with its confirm) or a
// child run going back to its parent, whose handlers decide more once it
// is carried out.
func (r *stepRunner) finishesLater(a *stepAttempt) bool {
	return a.d.branch == nil && a.joined == nil && a.d.parent == nil && a.claimed == 0 &&
		r.spec.Fork == nil && r.spec.Limit == nil && r.spec.Rate == nil
}

// unitDone decides what becomes of a delivery from what its step's unit
// came to (w being what its work came to).
func (r *stepRunner) unitDone(ctx context.Context, a *stepAttempt, key string, w *worked, done patterns.Done[kept]) broker.Ack {
	d := &a.d
	if done.Err != nil {
		// What was recorded with the result said the run went on: the
		// outcome is another (its events are built anew), and the key is
		// not to be confirmed, so that a redelivery sends its result.
		a.kept, a.early, a.confirm = false, nil, ""
	}
	if ack, settled := r.e.unsettled(done, a.setBusy); settled {
		return ack
	}
	switch {
	case done.Failed && w.stepErr != nil:
		return r.failed(ctx, a, w.stepErr)
	case done.Failed && w.giveUp != nil:
		if r.spec.Transactional {
			// The step's writes were rolled back with the transaction:
			// there is nothing of it to compensate.
			w.after, w.unresolved = d.state, nil
		}
		return r.giveUp(ctx, a, w.after, w.unresolved, w.giveUp)
	case done.Failed:
		return broker.Retry(&patterns.StepError{Step: r.spec.Name, Err: done.Err})
	case !done.Kept:
		a.result = resultDuplicate
		return broker.Accept().As(patterns.IdempotencyOutcomeDuplicate)
	case done.Err != nil:
		return r.notCarriedOut(ctx, a, done.Result, done.Err)
	}
	if !a.kept {
		r.carried(a, key, done.Result)
	}
	return broker.Accept()
}

// keep keeps what the step came to (k, encoded b) under key in the
// journal writer's next batch and waits until it is written. When what
// follows cannot change what the journal says of the delivery (a hop
// sent on, the run completed or ended there: see recordsWithKeep), the
// events recorded for the delivery accepted go in the same batch, so that
// the step costs one commit where the result and the events took two, and
// a run that completed or ended there has its key confirmed in it too:
// nothing is left to carry out.
func (r *stepRunner) keep(ctx context.Context, a *stepAttempt, key string, k kept, b []byte) error {
	if !r.recordsWithKeep(a, k) {
		return r.e.writer.Keep(ctx, journal.Kept{Key: key, Result: b})
	}
	r.carried(a, key, k)
	a.expect = broker.OutcomeLabelAccepted
	a.early = r.outcome(ctx, a, a.settlement(r.queue, a.d.m))
	over := k.kind == keptDone || k.kind == keptEnded
	if err := r.e.writer.Keep(ctx, journal.Kept{Key: key, Result: b, Confirmed: over}, a.early...); err != nil {
		return err
	}
	a.kept = true
	if over {
		a.confirm = ""
	}
	return nil
}

// recordsWithKeep says whether a's events can be recorded with the
// step's result k: the step's message is then accepted with nothing more
// to record, whatever happens next (a hop that fails records its own
// events, in their place). Not for a step of a branch, a fork's join, a
// limited step (whose confirm gives its place back) or a child run going
// back to its parent: what those carry out decides what they record.
func (r *stepRunner) recordsWithKeep(a *stepAttempt, k kept) bool {
	switch {
	case a.d.branch != nil || a.joined != nil || r.spec.Fork != nil, r.spec.Limit != nil || r.spec.Rate != nil:
		return false
	}
	return k.kind == keptHop || k.kind == keptDone || k.kind == keptEnded
}

// unsettled says what the outcomes of a unit that have nothing to do with
// its step come to (settled is true then): found running elsewhere, lost
// to another holder, or a store that did not answer. busy marks the
// attempt as put back.
func (e *Engine) unsettled(done patterns.Done[kept], busy func()) (ack broker.Ack, settled bool) {
	switch {
	case done.Lost || done.Claim == patterns.ClaimInProgress:
		busy()
		return broker.InProgress(e.cfg.InProgressDelay).As(broker.OutcomeLabelInProgress), true
	case errors.Is(done.Err, patterns.ErrStore):
		return broker.Retry(done.Err), true
	case done.Unreadable:
		return broker.Reject(broker.Fatal(done.Err)), true
	}
	return broker.Ack{}, false
}

// setBusy marks the attempt as put back: running elsewhere.
func (a *stepAttempt) setBusy() { a.result = resultBusy }

// carried says what the run came to at the step, carried out: k was sent
// on (again, for a redelivery), or the run ended or completed there. The
// key is confirmed once the run's events are recorded.
func (r *stepRunner) carried(a *stepAttempt, key string, k kept) {
	switch {
	case k.kind == keptEnded:
		a.result = resultEnded
	case k.kind == keptDone, k.kind == keptReturn:
		a.result, a.plan = resultDone, k.plan()
	default:
		a.result, a.plan = resultContinued, k.plan()
		if !k.planned {
			a.result, a.resentTo, a.plan.due = resultResent, k.out.RoutingKey, k.due
		}
	}
	a.confirm = key
}

// notCarriedOut handles a step whose work is done and kept but whose next
// message did not go: the broker refused it for what it is, which no retry
// changes (the run is given up, the step's effect compensated with the
// rest), or it may well go next time (retried: the redelivery sends the
// kept message, the step is not run again).
func (r *stepRunner) notCarriedOut(ctx context.Context, a *stepAttempt, k kept, err error) broker.Ack {
	if !unsendable(err) {
		a.result, a.err = resultHopFailed, err
		a.expect, a.reason, a.delay = expected(err, false, r.policy, a.d.m, r.e.now())
		return broker.Retry(err)
	}
	var after runState
	if _, herr := readJSONHeader(k.out.Message.Headers, HeaderRun, &after); herr != nil {
		return r.giveUp(ctx, a, a.d.state, []string{r.spec.Name}, broker.Fatal(err))
	}
	return r.giveUp(ctx, a, after, nil, broker.Fatal(err))
}

// stepKey is what a step's run is claimed under: the run, the position of
// the step in its route, and the step. A run started again (StartAgain)
// runs every step anew, so its replay count is part of the key; a replay
// of a failed run reaches only steps that never completed in it, whose
// keys are free either way.
func stepKey(runID string, replays, pos int, step string) string {
	if replays == 0 {
		return fmt.Sprintf("%s/%d/%s", runID, pos, step)
	}
	return fmt.Sprintf("%s/r%d/%d/%s", runID, replays, pos, step)
}

// stepKey is what the step of d's delivery is claimed under: stepKey's,
// and on a branch the join's and the branch's too, since a ForEach runs
// the same step at the same position for every item.
func (d *delivery) stepKey(step string) string {
	step = d.named(step)
	if d.branch != nil {
		return fmt.Sprintf("%s/%s/%d/%d/%s", d.m.RunID, d.branch.Join, d.branch.Branch, d.pos, step)
	}
	return stepKey(d.m.RunID, d.replays, d.pos, step)
}

// overDeliveryLimit says why d is not to be run again: it came back
// unsettled (its x-delivery-count, which quorum queues keep) as often as
// the engine's DeliveryLimit allows, every worker that took it having died
// or lost its connection holding it.
func (e *Engine) overDeliveryLimit(d *delivery) error {
	if e.cfg.DeliveryLimit <= 0 || d.returns < int64(e.cfg.DeliveryLimit) {
		return nil
	}
	return fmt.Errorf("%w: delivered %d times without being settled: every worker that took it died or lost its connection holding it", ErrDeliveryLimit, d.returns+1)
}

// worked is what running a step came to.
type worked struct {
	// kept is what the run came to at the step, to keep and carry out.
	kept kept
	// stepErr is the step's own failure (retried or given up by its
	// policy); giveUp a result that cannot go on, on this attempt or any
	// other.
	stepErr, giveUp error
	// after is the run's compensation state once the step's effect
	// happened (its own entry added when it is compensable), and
	// unresolved the step itself when its effect happened and its
	// compensation cannot be given what it needs: what a give-up after
	// the step ran compensates.
	after      runState
	unresolved []string
}

// work runs the step's function, in its span, and works out what follows.
func (r *stepRunner) work(ctx context.Context, a *stepAttempt) (w worked) {
	d := &a.d
	ctx, span := r.e.tracer.Start(ctx, r.spanName)
	defer span.End()
	if span.IsRecording() {
		span.SetAttributes(attribute.String("acemq.flow", r.f.name), attribute.String("acemq.step", r.spec.Name),
			attribute.String("acemq.run_id", d.m.RunID), attribute.Int("acemq.attempt", d.m.Attempt))
	}
	out, err := r.call(ctx, a)
	if d.parent != nil && (errors.Is(err, dsl.End) || err == nil && out == patterns.End) {
		w.after = d.state
		w.giveUp = &patterns.StepError{Step: r.spec.Name, Err: broker.Fatal(fmt.Errorf("%w: step %q returned dsl.End", ErrChildEnded, r.spec.Name))}
		return w
	}
	if d.branch != nil && (errors.Is(err, dsl.End) || err == nil && out == patterns.End) {
		// A branch cannot end its run: the other branches and the join
		// would wait for it for ever.
		w.after = d.state
		w.giveUp = &patterns.StepError{Step: r.spec.Name, Err: broker.Fatal(fmt.Errorf("%w: step %q returned dsl.End", ErrEndInBranch, r.spec.Name))}
		return w
	}
	switch {
	case errors.Is(err, dsl.End):
		w.kept = keptOf(keptEnded, hop{}, broker.Outgoing{})
		return w
	case err != nil:
		span.RecordError(err)
		span.SetStatus(codes.Error, err.Error())
		w.stepErr = err
		return w
	}
	w.after = d.state
	if end, err := ended(out); end || err != nil {
		if err != nil {
			w.giveUp = &patterns.StepError{Step: r.spec.Name, Err: broker.Fatal(err)}
			if r.spec.Compensable {
				w.unresolved = []string{r.spec.Name}
			}
			return w
		}
		w.kept = keptOf(keptEnded, hop{}, broker.Outgoing{})
		return w
	}
	if r.spec.Compensable {
		entry, err := r.f.entry(d.named(r.spec.Name), out)
		if err != nil {
			w.giveUp, w.unresolved = &patterns.StepError{Step: r.spec.Name, Err: broker.Fatal(err)}, []string{r.spec.Name}
			return w
		}
		w.after.Compensate = append(slices.Clip(d.state.Compensate), entry)
	}
	plan := hop{next: d.pos + 1}
	if d.slip == nil {
		if plan, err = r.f.plan(d.route, d.pos, out, r.e.now()); err != nil {
			// The work is done but where it goes cannot be worked out, on
			// this attempt or any other: give it up for a person to see.
			w.giveUp = &patterns.HopError{Step: r.spec.Name, To: "?", Err: broker.Fatal(err)}
			return w
		}
	}
	if plan.next == len(d.route) {
		w.kept = keptOf(keptDone, plan, broker.Outgoing{})
		if d.parent != nil {
			// A child run's result goes back to its parent.
			ret, err := r.e.returnToParent(ctx, d, out, "")
			if err != nil {
				w.giveUp = &patterns.HopError{Step: r.spec.Name, To: d.parent.Step, Err: err}
				return w
			}
			w.kept = keptOf(keptReturn, plan, ret)
		}
		return w
	}
	carried, spills := w.after, []spill(nil)
	if r.spec.Compensable {
		carried, spills = r.e.spill(d.m.RunID, d.at(), w.after)
	}
	next, err := r.f.hopMessage(ctx, r.e.conn, d.m, d.wireRoute(), plan.next, out, carried, d.slip)
	if err != nil {
		w.giveUp = &patterns.HopError{Step: r.spec.Name, To: d.route[plan.next], Err: broker.Fatal(err)}
		return w
	}
	if a.joined != nil {
		// The run goes on from its fork: no longer on a branch.
		h := next.Message.Headers.Clone()
		delete(h, HeaderBranch)
		next.Message.Headers = h
	}
	if !plan.due.IsZero() {
		markDue(&next, plan.due)
	}
	w.kept = keptOf(keptHop, plan, next)
	w.kept.spills = spills
	return w
}

// carryOut carries out what a unit of a run (a step, a compensation) came
// to: it keeps what the run's compensations will need in the journal and
// sends the next message on, through the ladder when it is not yet due.
// Both are safe to do again: a redelivery carries the kept value out
// again, the message with its id. Its error is a *patterns.HopError;
// unsendable tells one the broker refused for what it is from one that
// may well go next time (unroutable, nacked: a quorum queue between
// leaders nacks for a while after losing a node, or lost with the
// connection).
func (e *Engine) carryOut(ctx context.Context, step, runID string, k kept) error {
	if k.kind != keptHop && k.kind != keptReturn {
		return nil
	}
	if err := e.putSpills(ctx, runID, k.spills); err != nil {
		return &patterns.HopError{Step: step, To: k.out.RoutingKey, Err: err}
	}
	return e.send(ctx, step, k)
}

// send sends k's message on, through the ladder when it is not yet due.
func (e *Engine) send(ctx context.Context, step string, k kept) error {
	var err error
	if k.due.After(e.now()) {
		err = e.conn.Schedule(ctx, k.due, k.out)
	} else {
		err = e.conn.Send(ctx, k.out)
	}
	if err != nil {
		return &patterns.HopError{Step: step, To: k.out.RoutingKey, Err: err}
	}
	return nil
}

// unsendable reports whether the broker refused a message for what it is
// (its headers, its expiration, its size), which no retry changes.
func unsendable(err error) bool {
	return errors.Is(err, transport.ErrInvalidHeader) || errors.Is(err, transport.ErrInvalidExpiration) ||
		errors.Is(err, transport.ErrTooLarge)
}

// call runs the step's function on the payload under the step's timeout
// (a fork's join, for the delivery that fires it).
func (r *stepRunner) call(ctx context.Context, a *stepAttempt) (any, error) {
	m := a.d.m
	r.e.metrics.active(ctx, r.f.name, r.spec.Name, 1)
	defer r.e.metrics.active(ctx, r.f.name, r.spec.Name, -1)
	sctx := ctx
	if r.spec.Timeout > 0 {
		var cancel context.CancelFunc
		sctx, cancel = context.WithTimeout(ctx, r.spec.Timeout)
		defer cancel()
	}
	start := time.Now()
	var (
		out any
		err error
	)
	if a.join != nil {
		out, err = a.join(sctx)
	} else {
		out, err = r.spec.Run(sctx, decoder(m))
	}
	took := time.Since(start)
	if r.spec.Timeout > 0 && took > r.spec.Timeout && !errors.Is(err, dsl.End) && !undecodable(err) {
		// The work may or may not have happened: only a retry of an
		// idempotent step can make that right, whatever the step said.
		err = fmt.Errorf("%w: ran %s of %s (it returned %v)", ErrStepTimeout, took.Round(time.Millisecond), r.spec.Timeout, err)
	}
	outcome, errType := "completed", ""
	if err != nil && !errors.Is(err, dsl.End) {
		outcome, errType = "failed", ErrorType(err)
	}
	r.e.metrics.step(ctx, r.f.name, r.spec.Name, outcome, errType, took)
	return out, err
}

// decoder reads m's payload with the flow's codec. A body that does not
// fit the type it is read into is a *broker.DecodeError, whatever the codec
// said: the consumer parks it, since no retry makes it fit.
func decoder(m *broker.Message) func(any) error {
	return func(v any) error {
		err := m.Decode(v)
		if err == nil || undecodable(err) {
			return err
		}
		return &broker.DecodeError{ContentType: m.ContentType, Err: err}
	}
}

// undecodable reports whether err is a body that cannot be read.
func undecodable(err error) bool {
	var de *broker.DecodeError
	return errors.As(err, &de)
}

// failed decides what a step's failure becomes: a retry by the step's
// policy, or, once that is spent (or the failure is fatal, or the body
// cannot be read), the end of the run (giveUp). Its key was let go.
func (r *stepRunner) failed(ctx context.Context, a *stepAttempt, err error) broker.Ack {
	m := a.d.m
	var fatal *broker.FatalError
	if errors.As(err, &fatal) || undecodable(err) || r.policy.GiveUp(m.Attempt, m.FirstSeen, r.e.now()) != "" {
		return r.giveUp(ctx, a, a.d.state, nil, err)
	}
	serr := &patterns.StepError{Step: r.spec.Name, Err: err}
	a.err = serr
	a.expect, a.reason, a.delay = expected(serr, false, r.policy, m, r.e.now())
	return broker.Retry(serr)
}

// giveUp ends the run at this step for good, err saying why. What the run
// completed (st; unresolved lists the steps whose effect happened and whose
// compensation cannot be given what it needs) is compensated: now, or on
// the ladder once the flow's HoldForReplay has passed. The consumer sets
// the message aside (its dead-letter queue, or parked when it cannot be
// read), unless the compensation started now: the compensation has the
// run from there, nothing needs a person, and the message is accepted.
// When the compensation cannot be started the message is put back, attempt
// unchanged, rather than the run given up without it.
func (r *stepRunner) giveUp(ctx context.Context, a *stepAttempt, st runState, unresolved []string, err error) broker.Ack {
	m := a.d.m
	var serr error = err
	var se *patterns.StepError
	var he *patterns.HopError
	if !errors.As(err, &se) && !errors.As(err, &he) {
		serr = &patterns.StepError{Step: r.spec.Name, Err: err}
	}
	var fatal *broker.FatalError
	reject := errors.As(err, &fatal) || undecodable(err)
	a.err = serr
	a.expect, a.reason, a.delay = expected(serr, reject, r.policy, m, r.e.now())
	parked := a.expect == broker.OutcomeLabelParked
	if a.d.branch != nil && r.spec.Fork == nil {
		return r.branchGivenUp(ctx, a, st, serr, reject)
	}
	if a.d.parent != nil {
		if err := r.e.childFailed(ctx, &a.d, serr); err != nil {
			r.e.log.Warn("a child run's failure could not be sent to its parent; the failed step will be tried again",
				slog.String("flow", r.f.name), slog.String("run_id", m.RunID), slog.String("step", r.spec.Name), slog.Any("error", err))
			a.result, a.expect = resultBusy, ""
			return broker.InProgress(r.e.cfg.InProgressDelay)
		}
	}
	if len(st.Compensate) > 0 || len(unresolved) > 0 {
		hold := r.f.hold
		if parked {
			hold = 0 // a replay of what cannot be read cannot help: undo it now
		}
		kind, until, cerr := r.e.startCompensation(ctx, r.f, m, st, unresolved, a.d.named(r.spec.Name), err.Error(), hold)
		if cerr != nil {
			// Never give the run up without its compensation under way.
			r.e.log.Warn("compensation could not be started; the failed step will be tried again",
				slog.String("flow", r.f.name), slog.String("run_id", m.RunID), slog.String("step", r.spec.Name), slog.Any("error", cerr))
			a.result, a.expect = resultBusy, ""
			return broker.InProgress(r.e.cfg.InProgressDelay)
		}
		a.compensation, a.holdUntil = kind, until
		if kind != compensationHeld && !parked {
			a.result = resultCompensating
			return broker.Accept()
		}
	}
	if reject {
		return broker.Reject(serr)
	}
	return broker.Retry(serr)
}

// expected is what a consumer with policy p does with the handler's
// broker.Retry(err) (broker.Reject(err) when reject) for m at now, as
// broker.Consumer decides it: the outcome it will report, with its reason
// or retry delay, so that the handler can record it first.
func expected(err error, reject bool, p broker.RetryPolicy, m *broker.Message, now time.Time) (outcome, reason string, delay time.Duration) {
	switch {
	case undecodable(err):
		return broker.OutcomeLabelParked, err.Error(), 0
	case reject:
		return broker.OutcomeLabelDeadLettered, err.Error(), 0
	}
	if why := p.GiveUp(m.Attempt, m.FirstSeen, now); why != "" {
		return broker.OutcomeLabelDeadLettered, fmt.Sprintf("%v (%s)", err, why), 0
	}
	return broker.OutcomeLabelRetried, "", p.Delay(m.Attempt)
}

// ended reports whether a step's result ends its run (patterns.End,
// returned through an any), and refuses a nil result, which would travel
// on as null: a step ends its run with dsl.End.
func ended(out any) (bool, error) {
	if out == patterns.End {
		return true, nil
	}
	if out == nil {
		return false, fmt.Errorf("%w (nil); return dsl.End to end the run", patterns.ErrNilResult)
	}
	if v := reflect.ValueOf(out); v.Kind() == reflect.Pointer && v.IsNil() {
		return false, fmt.Errorf("%w (%T); return dsl.End to end the run", patterns.ErrNilResult, out)
	}
	return false, nil
}

// entry is what a compensable step's compensation will get: its result,
// in the flow's codec.
func (f *flow) entry(step string, out any) (compEntry, error) {
	b, err := f.codec.Encode(out)
	if err != nil {
		return compEntry{}, fmt.Errorf("encode %q's result for its compensation: %w", step, err)
	}
	if f.json {
		return compEntry{Step: step, Data: json.RawMessage(b)}, nil
	}
	return compEntry{Step: step, Data64: b}, nil
}

// hopMessage is the message that carries a run from the step it is at to
// route[next]: a new message (new id, the causation and correlation
// recorded, the run id and x-acemq-first-seen carried, attempt 1), in the
// form the run travels in, with its state.
func (f *flow) hopMessage(ctx context.Context, conn *broker.Conn, m *broker.Message, route []string, next int, payload any, st runState, slip *patterns.RoutingSlip) (broker.Outgoing, error) {
	opts := []broker.PublishOption{
		broker.ToExchange(f.name), broker.To(route[next]), broker.Mandatory(),
		broker.CausedBy(m), broker.RunID(m.RunID), broker.FirstSeen(m.FirstSeen),
		broker.Headers(carried(m)), broker.WithCodec(f.codec),
	}
	if m.Type != "" {
		opts = append(opts, broker.Type(m.Type))
	}
	if slip != nil {
		header, err := json.Marshal(slip.Advance(conn.Clock().Now()))
		if err != nil {
			return broker.Outgoing{}, err
		}
		opts = append(opts, broker.Header(broker.HeaderRoutingSlip, string(header)))
	} else {
		opts = append(opts, broker.Route(route, next))
	}
	if len(st.Compensate) > 0 {
		h, err := jsonHeader(st)
		if err != nil {
			return broker.Outgoing{}, err
		}
		opts = append(opts, broker.Header(HeaderRun, h))
	}
	return conn.Prepare(ctx, payload, opts...)
}
