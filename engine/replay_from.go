package engine

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"slices"
	"strings"
	"time"

	"github.com/acemq/acemq-flow/broker"
	"github.com/acemq/acemq-flow/engine/journal"
	"github.com/acemq/acemq-flow/patterns"
)

// The refusals of ReplayFrom, beside ErrNotReplayable (a run in a status
// it does not apply to) and ErrUnknownStep (a step the flow's current
// route does not have).
var (
	// ErrBranchStep: the step is on a branch of a fork (a Parallel or a
	// ForEach); a run is replayed from the fork step instead, which sends
	// every branch again.
	ErrBranchStep = errors.New("the step is on a branch of a fork")
	// ErrStepNotReached: the run never reached the step (or the journal
	// no longer has its events), so there is no input to run it on.
	ErrStepNotReached = errors.New("the run never reached that step")
	// ErrInputNotKept: the run reached the step, and the journal did not
	// keep its input: it was over journal.MaxStepInput, it was recorded
	// before the journal kept steps' inputs, or the journal keeps none.
	ErrInputNotKept = errors.New("the step's input is not kept")
)

// ReplayFromRequest says where ReplayFrom re-runs a run from, and why.
type ReplayFromRequest struct {
	// Step is the step to re-run the run from: a step of the current
	// version's route (not one on a branch of a fork) that the run
	// reached. A step's old name (dsl.Renamed) is its new one.
	Step string
	// Reason, when set, is recorded on the replay's event in the run's
	// timeline.
	Reason string
	// Actor, when set, is who asked (the dashboard, a person's name): it
	// is recorded with the reason.
	Actor string
}

// ReplayedFrom is what ReplayFrom did.
type ReplayedFrom struct {
	RunID string `json:"run_id"`
	Flow  string `json:"flow"`
	// Was is the run's status before the replay.
	Was journal.Status `json:"was"`
	// Step is the step the run was sent to, Queue its queue, and Route
	// the steps from Step on, as the flow's current version (Version)
	// has them: the run goes on on that version.
	Step    string   `json:"step"`
	Queue   string   `json:"queue"`
	Route   []string `json:"route"`
	Version string   `json:"version,omitempty"`
	// Replays is the run's replay count now: every step from Step on runs
	// under fresh idempotency keys.
	Replays int `json:"replays"`
	// InputFrom is the event (key) of the earlier attempt whose input the
	// step gets, InputReplay that attempt's replay count, and InputSize
	// the input's size in bytes.
	InputFrom   string `json:"input_from"`
	InputReplay int    `json:"input_replay"`
	InputSize   int    `json:"input_size"`
	// Carried lists the steps before Step whose compensations the run
	// still owes and carries on (a later failure compensates them):
	// those it had completed, with a compensation, when it reached Step.
	// None for a compensated run: they ran.
	Carried []string `json:"carried"`
	// Discarded is how many copies of a failed run's given-up message
	// were taken out of its dead-letter queues: the run goes on from
	// Step, and that message would otherwise be there to replay later.
	Discarded int `json:"discarded"`
}

// replayableFrom are the statuses ReplayFrom applies to.
var replayableFrom = []journal.Status{journal.Completed, journal.Ended, journal.Failed, journal.Compensated}

// ReplayableFrom reports whether ReplayFrom applies to a run in status s:
// completed, ended, failed or compensated.
func ReplayableFrom(s journal.Status) bool { return slices.Contains(replayableFrom, s) }

// ReplayFrom re-runs a run that has stopped (completed, ended early,
// failed or compensated) from req.Step, on the input that step had in the
// run, on the flow's current version: it sends an ordinary step message
// to the step's queue, as a hop of the run would, with the kept input (the
// journal keeps each step's input, up to journal.MaxStepInput, as long as
// it keeps the run's events), the route the current version has from that
// step, a replay count one above the run's (so that every step from there
// on runs again, under fresh idempotency keys) and the acemq-replayed-*
// stamps (acemq-replayed-from is the step's queue); and it records the
// replay: the run is running again, at req.Step, on the current version,
// its timeline saying it was replayed from there.
//
// What is compensated first: nothing. Steps before req.Step do not run
// again, and what they did stands; the compensations the run owed for
// them when it reached req.Step (kept with that step's input) are carried
// on, so that a later failure undoes them with the rest, except for a
// compensated run, whose compensations ran (it owes none). Steps from
// req.Step on that completed before are not undone before they run again:
// their effects must be idempotent, or undone by the user first. A failed
// run held for replay (HoldForReplay) is never compensated by its hold:
// the replay count supersedes it. A failed run's given-up message is taken
// out of its dead-letter queue (and, for a failure on a branch, those of
// the branches held with it), waiting for it as Replay does when the run
// failed moments ago, so that it cannot be replayed a second time later; a
// parked message is left where it is, for a person to look at. A delay or
// a When before req.Step is not waited for or asked again: the step is
// what was asked for. The flow's deadline applies to the replay as to a
// start: Deadline from the replay on, DeadlineAt as the run's input says
// (one that has passed cancels the replayed run at once).
//
// It refuses, with errors naming the run: a run the journal does not know
// (journal.ErrRunNotFound); a run in another status (ErrNotReplayable:
// running, waiting, compensating, unresolved or cancelled); a flow whose
// route is chosen per run (an Itinerary), and a child run
// (ErrNotReplayable: replay its parent); a step on a branch of a fork
// (ErrBranchStep, naming the fork to replay from); a step the flow does
// not have (ErrUnknownStep, listing the steps the run can be replayed
// from); a step the run never reached (ErrStepNotReached); and a step
// whose input the journal did not keep (ErrInputNotKept).
func (e *Engine) ReplayFrom(ctx context.Context, runID string, req ReplayFromRequest) (ReplayedFrom, error) {
	res := ReplayedFrom{RunID: runID, Carried: []string{}}
	p, err := e.planReplayFrom(ctx, runID, req.Step)
	if err != nil {
		return res, err
	}
	run, f := p.run, p.f
	res.Flow, res.Was, res.Step, res.Queue, res.Version = run.Flow, run.Status, p.step, f.queue(p.step), f.version
	res.Route = slices.Clone(p.route[p.pos:])
	res.InputFrom, res.InputReplay, res.InputSize = p.input.Key, p.input.Replays, p.input.Size
	for _, c := range p.state.Compensate {
		res.Carried = append(res.Carried, c.Step)
	}
	if run.Status == journal.Failed {
		n, err := e.discardFailed(ctx, f, run)
		res.Discarded = n
		if err != nil {
			return res, err
		}
	}
	if err := e.declare(ctx, f); err != nil {
		return res, fmt.Errorf("replay run %s from %q: %w", runID, p.step, err)
	}
	n := run.Replays + 1
	now := e.now()
	out, err := f.replayFromMessage(ctx, e.conn, runID, n, p.route, p.pos, p.input.Input, p.state, now)
	if err != nil {
		return res, fmt.Errorf("replay run %s from %q: %w", runID, p.step, err)
	}
	// The flow's deadline holds for the replay as for a start, from now
	// (a DeadlineAt from the run's input): the timer of the run's first
	// deadline is for its earlier replay count, which it no longer has.
	deadline, err := f.deadline(json.RawMessage(run.Input), now)
	if err != nil {
		return res, fmt.Errorf("replay run %s from %q: its deadline: %w", runID, p.step, err)
	}
	if err := e.scheduleDeadline(ctx, f.name, started{res: Started{RunID: runID, Flow: f.name, Replays: n}, deadline: deadline}); err != nil {
		return res, fmt.Errorf("replay run %s from %q: %w", runID, p.step, err)
	}
	if err := e.conn.Send(ctx, out); err != nil {
		return res, fmt.Errorf("replay run %s from %q: send its message to %s: %w", runID, p.step, res.Queue, err)
	}
	res.Replays = n
	ev := journal.Event{RunID: runID, Flow: run.Flow, Kind: journal.KindReplay, Step: p.step,
		Outcome:   Action{Actor: req.Actor, Reason: req.Reason}.outcome("replayed from " + p.step),
		StartedAt: now, EndedAt: now, Queue: res.Queue, Status: journal.Running, RunStep: p.step,
		Replays: n, Seq: journal.Seq(n, 0, 0, 0), Key: fmt.Sprintf("replay/%d", n), Version: f.version}
	if len(run.Input) > 0 {
		// The run's input stays; the version it goes on on is this one.
		ev.Input = run.Input
	}
	e.record(ctx, ev)
	return res, e.writer.Flush(ctx)
}

// replayPlan is what ReplayFrom worked out before it touches anything.
type replayPlan struct {
	run   journal.Run
	f     *flow
	step  string
	route []string
	pos   int
	input journal.StepInput
	// state is the run state the step's message carries: the
	// compensations the run goes on owing.
	state runState
}

// planReplayFrom checks that run runID can be replayed from step, and
// works out how.
func (e *Engine) planReplayFrom(ctx context.Context, runID, step string) (replayPlan, error) {
	var p replayPlan
	run, err := e.journal.Run(ctx, runID)
	if err != nil {
		return p, fmt.Errorf("replay run %s from %q: %w", runID, step, err)
	}
	f, err := e.flow(run.Flow)
	if err != nil {
		return p, fmt.Errorf("replay run %s from %q: %w", runID, step, err)
	}
	p.run, p.f = run, f
	if !ReplayableFrom(run.Status) {
		return p, fmt.Errorf("%w: run %s of %s is %s: only a completed, ended, failed or compensated run is replayed from a step",
			ErrNotReplayable, runID, run.Flow, run.Status)
	}
	if f.def.HasItinerary() {
		return p, fmt.Errorf("%w: run %s: flow %q chooses each run's route (an itinerary), which a replay from a step cannot choose again; start the run again (StartAgain)",
			ErrNotReplayable, runID, f.name)
	}
	route, err := f.def.Route(ctx, func(any) error { return nil })
	if err != nil {
		return p, fmt.Errorf("replay run %s from %q: %w", runID, step, err)
	}
	inputs, err := e.stepInputs(ctx, f, runID)
	if err != nil {
		return p, err
	}
	p.step = f.renamed.of(step)
	p.route, p.pos = route, slices.Index(route, p.step)
	if p.pos < 0 {
		if fork, ok := f.forkOf(p.step); ok {
			return p, fmt.Errorf("%w: run %s: step %q is on a branch of %q; replay the run from %q, which sends its branches again",
				ErrBranchStep, runID, p.step, fork, fork)
		}
		return p, fmt.Errorf("%w: run %s: flow %q has no step %q on its route; the run can be replayed from %s",
			ErrUnknownStep, runID, f.name, step, stepList(replayable(route, inputs)))
	}
	in, ok := inputs[p.step]
	switch {
	case !ok:
		return p, fmt.Errorf("%w: run %s of %s never reached %q; it can be replayed from %s",
			ErrStepNotReached, runID, f.name, p.step, stepList(replayable(route, inputs)))
	case !in.Kept():
		return p, fmt.Errorf("%w: run %s: the input of %q was %d bytes, over the %d the journal keeps (journal.MaxStepInput); replay it from an earlier step",
			ErrInputNotKept, runID, p.step, in.Size, journal.MaxStepInput)
	}
	p.input = in
	st, err := readInputState(in.State)
	if err != nil {
		return p, fmt.Errorf("replay run %s from %q: the kept input's state: %w", runID, p.step, err)
	}
	if st.Parent != "" {
		return p, fmt.Errorf("%w: run %s is a child run: its parent waits for it no longer; replay the parent from its Child step",
			ErrNotReplayable, runID)
	}
	if run.Status != journal.Compensated && st.Run != "" {
		if err := json.Unmarshal([]byte(st.Run), &p.state); err != nil {
			return p, fmt.Errorf("replay run %s from %q: the kept run state: %w", runID, p.step, err)
		}
		// Kept as they were written: an old name's compensation is taken
		// by its new name's (dsl.Renamed), and one this version has no
		// compensation for leaves the run unresolved when it is
		// compensated (nextCompensation), rather than dropped here.
	}
	return p, nil
}

// stepInputs are the inputs the journal kept of run runID's steps, by the
// step's name in this version of f.
func (e *Engine) stepInputs(ctx context.Context, f *flow, runID string) (map[string]journal.StepInput, error) {
	si, ok := e.journal.(journal.StepInputs)
	if !ok {
		return nil, fmt.Errorf("%w: run %s: the journal (%T) keeps no step inputs", ErrInputNotKept, runID, e.journal)
	}
	list, err := si.StepInputs(ctx, runID)
	if err != nil {
		return nil, fmt.Errorf("replay run %s: read its steps' inputs: %w", runID, err)
	}
	out := make(map[string]journal.StepInput, len(list))
	for _, in := range list {
		name := f.renamed.of(in.Step)
		if cur, ok := out[name]; !ok || in.Seq > cur.Seq {
			out[name] = in
		}
	}
	return out, nil
}

// replayable are the steps of route a run with inputs can be replayed
// from, in route order.
func replayable(route []string, inputs map[string]journal.StepInput) []string {
	var out []string
	for _, s := range route {
		if in, ok := inputs[s]; ok && in.Kept() {
			out = append(out, s)
		}
	}
	return out
}

func stepList(steps []string) string {
	if len(steps) == 0 {
		return "none of its steps (no input of its is kept)"
	}
	return "its steps " + strings.Join(steps, ", ")
}

// ReplayStep is a step a run could be replayed from (ReplaySteps).
type ReplayStep struct {
	Step string `json:"step"`
	// Kept says the journal kept its input; Size is the input's size in
	// bytes, At when the attempt it is of started.
	Kept bool      `json:"kept"`
	Size int       `json:"size"`
	At   time.Time `json:"at"`
}

// ReplaySteps lists the steps of the current route of run runID's flow
// that the run reached, in route order, with whether their input is kept:
// those ReplayFrom can re-run the run from, for a run in a status it
// applies to (ReplayableFrom). A journal that keeps no step inputs has
// none; an unknown run is an error matching journal.ErrRunNotFound, and a
// flow this engine does not have one matching ErrUnknownFlow.
func (e *Engine) ReplaySteps(ctx context.Context, runID string) ([]ReplayStep, error) {
	run, err := e.journal.Run(ctx, runID)
	if err != nil {
		return nil, fmt.Errorf("steps to replay run %s from: %w", runID, err)
	}
	f, err := e.flow(run.Flow)
	if err != nil {
		return nil, fmt.Errorf("steps to replay run %s from: %w", runID, err)
	}
	if _, ok := e.journal.(journal.StepInputs); !ok || f.def.HasItinerary() {
		return []ReplayStep{}, nil
	}
	inputs, err := e.stepInputs(ctx, f, runID)
	if err != nil {
		return nil, err
	}
	route, err := f.def.Route(ctx, func(any) error { return nil })
	if err != nil {
		return nil, fmt.Errorf("steps to replay run %s from: %w", runID, err)
	}
	out := []ReplayStep{}
	for _, s := range route {
		if in, ok := inputs[s]; ok {
			out = append(out, ReplayStep{Step: s, Kept: in.Kept(), Size: in.Size, At: in.At})
		}
	}
	return out, nil
}

// discardFailed takes a failed run's given-up messages out of its
// dead-letter queue (and, for a failure on a branch, those of the
// branches held with it), and says how many went. A run recorded failed
// less than settleWindow ago whose message is not there yet is waited for
// (it is on its way), every 100 ms, until it arrives, the window passes
// or ctx ends.
func (e *Engine) discardFailed(ctx context.Context, f *flow, run journal.Run) (int, error) {
	if run.DeadLetter == "" || !strings.HasSuffix(run.DeadLetter, broker.DeadLetterSuffix) {
		return 0, nil
	}
	queues := []string{run.DeadLetter}
	if fork, ok := f.forkOf(run.Step); ok {
		queues = append(queues, f.branchDeadLetters(fork, run.Step)...)
	}
	ofRun := patterns.ReplayFilter(func(env broker.Envelope, _ []byte) bool { return env.RunID == run.ID })
	total := 0
	for i, q := range queues {
		for {
			r, err := patterns.Replay(ctx, e.conn, q, patterns.ReplayDiscard(), ofRun)
			if err != nil && !notFound(err) {
				return total, fmt.Errorf("replay run %s: take its given-up message out of %s: %w", run.ID, q, err)
			}
			total += r.Discarded
			// Only the run's own dead-letter queue is waited for: the
			// branches held with it may have had none.
			if r.Discarded > 0 || i > 0 || e.now().Sub(run.UpdatedAt) > settleWindow {
				break
			}
			select {
			case <-ctx.Done():
				return total, fmt.Errorf("replay run %s: wait for its given-up message in %s: %w", run.ID, q, ctx.Err())
			case <-time.After(100 * time.Millisecond):
			}
		}
	}
	return total, nil
}

// replayFromMessage is the message that re-runs run runID (replay
// replays) from route[pos]: an ordinary step message of the flow, as a
// start or a hop sends it (its route, the run state st it carries), with
// the kept body in the flow's codec, acemq-replay-count and
// acemq-replayed-at. Not acemq-replayed-from: the family reads it as the
// queue a replayed message was taken from, and this one was taken from
// none (it is built from the journal).
func (f *flow) replayFromMessage(ctx context.Context, conn *broker.Conn, runID string, replays int, route []string, pos int, body []byte, st runState, now time.Time) (broker.Outgoing, error) {
	opts := []broker.PublishOption{
		broker.ToExchange(f.name), broker.To(route[pos]), broker.Mandatory(), broker.RunID(runID),
		broker.WithCodec(encoded{f.codec.ContentType()}), broker.Route(route, pos),
		broker.Header(broker.HeaderReplayCount, int64(replays)),
		broker.Header(broker.HeaderReplayedAt, now.UnixMilli()),
	}
	if len(st.Compensate) > 0 {
		h, err := jsonHeader(st)
		if err != nil {
			return broker.Outgoing{}, err
		}
		opts = append(opts, broker.Header(HeaderRun, h))
	}
	return conn.Prepare(ctx, body, opts...)
}

// inputState is what a step's event keeps beside its input
// (journal.Event.StepState): the engine headers of the step's message
// that a replay from the step needs, as they were.
type inputState struct {
	// Run is the acemq-flow-run header: the compensations the run owed.
	Run string `json:"run,omitempty"`
	// Parent is the acemq-flow-parent header of a child run's message.
	Parent string `json:"parent,omitempty"`
}

func readInputState(s string) (inputState, error) {
	var st inputState
	if s == "" {
		return st, nil
	}
	err := json.Unmarshal([]byte(s), &st)
	return st, err
}

// keepInput puts on a step's event the input its delivery d ran on, for a
// replay from the step: the payload and the run state it carried, up to
// journal.MaxStepInput (beyond, only their size). Only the run's own
// route's first arrival at a step is kept: not a branch's (a replay
// starts at the fork), nor the messages that resume a step (a child's
// result, a signal, a hold's timer), whose payload is not the step's
// input.
func keepInput(ev *journal.Event, d *delivery) {
	if d.err != nil || d.branch != nil || d.child != nil || d.signal != nil || d.hold != nil {
		return
	}
	var st inputState
	st.Run, _ = headerText(d.m.Headers, HeaderRun)
	st.Parent, _ = headerText(d.m.Headers, HeaderParent)
	state := ""
	if st.Run != "" || st.Parent != "" {
		b, err := json.Marshal(st)
		if err != nil {
			return
		}
		state = string(b)
	}
	ev.InputSize = len(d.m.Body) + len(state)
	if ev.InputSize > journal.MaxStepInput || !journal.Text(state) {
		return
	}
	ev.StepInput, ev.StepState = append(make([]byte, 0, len(d.m.Body)), d.m.Body...), state
}

// headerText is header name of h as text (a string, or bytes).
func headerText(h broker.Table, name string) (string, bool) {
	switch v := h[name].(type) {
	case string:
		return v, true
	case []byte:
		return string(v), true
	}
	return "", false
}
