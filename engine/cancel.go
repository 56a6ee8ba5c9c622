package engine

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"sync"
	"time"

	"github.com/acemq/acemq-flow/broker"
	"github.com/acemq/acemq-flow/engine/journal"
)

// Cancelling a run (CancelRun) records it cancelled in the journal, with
// a Seq after anything else of its replay (journal.CancelledStage), so
// that nothing recorded after moves it out of Cancelled. Every worker
// learns of it from the journal (journal.CancelFeed, read every
// cancelPoll, and once before its consumers start): a step of the run
// that would start does not, and what the run completed is compensated
// from there (its message carries what to compensate); a step in flight
// in that worker sees its context cancelled (ErrRunCancelled as its
// cause). A run waiting for a signal is woken to be compensated, a run
// waiting on the ladder is compensated when its message comes due, and
// its child runs are cancelled too.

// cancelPoll is how often a worker asks the journal which runs were
// cancelled; cancelWindow how far back it looks when it starts, and how
// long it remembers a cancelled run.
const (
	cancelPoll   = 250 * time.Millisecond
	cancelWindow = 24 * time.Hour
	// cancelOverlap is how far before the last cancellation it saw a
	// worker asks from: clocks of the workers that cancel differ.
	cancelOverlap = 5 * time.Second
)

// ErrRunCancelled is the cause of the context of a step whose run was
// cancelled while it ran.
var ErrRunCancelled = errors.New("the run was cancelled")

// CancelRequest is what CancelRun is asked: why, and who asks (an
// operator's name, a token's, "deadline"), both kept in the run's
// timeline.
type CancelRequest struct {
	Reason string
	Actor  string
}

// CancelledRun is what CancelRun did.
type CancelledRun struct {
	RunID  string `json:"run_id"`
	Flow   string `json:"flow"`
	Step   string `json:"step"`
	Reason string `json:"reason"`
	Actor  string `json:"actor,omitempty"`
	// Children are the child runs cancelled with it.
	Children []string `json:"children,omitempty"`
}

// CancelRun cancels a run that has not ended: no further step of it
// starts, a step in flight sees its context cancelled (and finishes or is
// abandoned as its retry policy says), every completed step with a
// Compensate is compensated, newest first, and the run ends cancelled,
// its timeline saying who asked and why. It works for a run on any
// worker that shares the journal, waiting on the ladder or for a signal,
// on branches of a fork, and for its child runs, which are cancelled too.
// It refuses, with errors.Is matching: journal.ErrRunNotFound for an
// unknown run, ErrRunEnded for a run that is over.
func (e *Engine) CancelRun(ctx context.Context, runID string, req CancelRequest) (CancelledRun, error) {
	out := CancelledRun{RunID: runID, Reason: req.Reason, Actor: req.Actor}
	fail := func(err error) (CancelledRun, error) { return out, fmt.Errorf("cancel run %s: %w", runID, err) }
	run, err := e.runOf(ctx, runID)
	if err != nil {
		return fail(err)
	}
	out.Flow, out.Step = run.Flow, run.Step
	if run.Status.Stopped() {
		return fail(fmt.Errorf("%w: it is %s", ErrRunEnded, run.Status))
	}
	why := cancelReason(req)
	now := e.now()
	ev := journal.Event{RunID: runID, Flow: run.Flow, Kind: journal.KindCancel, Step: run.Step, Outcome: why,
		Error: journal.Truncate(why), StartedAt: now, EndedAt: now, Status: journal.Cancelled, RunStep: run.Step,
		Replays: run.Replays, Seq: journal.Seq(run.Replays, journal.CancelledStage, 0, 0), Key: fmt.Sprintf("cancel/%d", run.Replays)}
	if err := e.writer.RecordSync(ctx, ev); err != nil {
		return fail(err)
	}
	e.cancels.add(runID, why, now)
	if err := e.wakeWaiting(ctx, run); err != nil {
		return fail(err)
	}
	if err := e.unpark(ctx, runID); err != nil {
		return fail(err)
	}
	children, err := e.journal.RunsByIDPrefix(ctx, runID+".", 1000)
	if err != nil {
		return fail(fmt.Errorf("its child runs: %w", err))
	}
	for _, c := range children {
		if c.Status.Stopped() {
			continue
		}
		if _, err := e.CancelRun(ctx, c.ID, CancelRequest{Reason: "its parent run " + runID + " was cancelled", Actor: req.Actor}); err != nil && !errors.Is(err, ErrRunEnded) {
			return fail(err)
		}
		out.Children = append(out.Children, c.ID)
	}
	return out, nil
}

// runOf is the run as the journal has it, after writing what this engine
// has not written yet when the journal does not know it: a run this
// engine started a moment ago.
func (e *Engine) runOf(ctx context.Context, runID string) (journal.Run, error) {
	run, err := e.journal.Run(ctx, runID)
	if !errors.Is(err, journal.ErrRunNotFound) {
		return run, err
	}
	if ferr := e.writer.Flush(ctx); ferr != nil {
		return run, errors.Join(err, ferr)
	}
	return e.journal.Run(ctx, runID)
}

// deadlineRef is the acemq-flow-deadline header, on the timer of a run's
// dsl.Deadline: the replay of the run it is for.
type deadlineRef struct {
	Replays int `json:"replays"`
}

// deadline is when a run started at start on input is stopped: the
// flow's Deadline after its start, or its DeadlineAt of the input (zero:
// no deadline).
func (f *flow) deadline(input any, start time.Time) (time.Time, error) {
	switch {
	case f.def.DeadlineAt() != nil:
		return f.def.DeadlineAt().Time(input)
	case f.def.Deadline() > 0:
		return start.Add(f.def.Deadline()), nil
	}
	return time.Time{}, nil
}

// scheduleDeadline puts the timer of a new run's deadline on the ladder,
// for a flow with one (deadlineTimer).
func (e *Engine) scheduleDeadline(ctx context.Context, flowName string, p started) error {
	out, ok, err := e.deadlineTimer(ctx, flowName, p)
	if err != nil || !ok {
		return err
	}
	if err := e.conn.Schedule(ctx, p.deadline, out); err != nil {
		return fmt.Errorf("schedule its deadline: %w", err)
	}
	return nil
}

// deadlineTimer is the timer of a new run's deadline, for a flow with one
// (ok false otherwise): a message to the flow's compensate-now queue, to
// be due at p.deadline, which cancels the run if it has not ended by then
// (nowRunner.deadline).
func (e *Engine) deadlineTimer(ctx context.Context, flowName string, p started) (_ broker.Outgoing, ok bool, _ error) {
	res := p.res
	f, err := e.flow(flowName)
	if err != nil || p.deadline.IsZero() || res.Existing {
		return broker.Outgoing{}, false, err
	}
	h, err := jsonHeader(deadlineRef{Replays: res.Replays})
	if err != nil {
		return broker.Outgoing{}, false, err
	}
	out, err := e.conn.Prepare(ctx, json.RawMessage(`{}`), broker.ToExchange(f.name), broker.To(compensateKey), broker.Mandatory(),
		broker.RunID(res.RunID), broker.MessageID(fmt.Sprintf("%s/deadline/%d", res.RunID, res.Replays)),
		broker.Headers(broker.Table{HeaderDeadline: h}))
	if err != nil {
		return broker.Outgoing{}, false, fmt.Errorf("its deadline: %w", err)
	}
	return out, true, nil
}

// deadline cancels the run of a deadline's timer unless it ended, or was
// replayed since (a replay's own start has its own deadline).
func (e *Engine) deadline(ctx context.Context, f *flow, m *broker.Message, ref deadlineRef) error {
	run, err := e.journal.Run(ctx, m.RunID)
	switch {
	case errors.Is(err, journal.ErrRunNotFound):
		return nil
	case err != nil:
		return err
	case run.Status.Stopped() || run.Replays != ref.Replays:
		return nil
	}
	why := "its deadline passed"
	if d := f.def.Deadline(); d > 0 {
		why = fmt.Sprintf("its deadline, %s after its start, passed", d)
	}
	_, err = e.CancelRun(ctx, m.RunID, CancelRequest{Reason: why, Actor: "deadline"})
	if errors.Is(err, ErrRunEnded) {
		return nil
	}
	return err
}

// cancelReason is what a cancellation's event says.
func cancelReason(req CancelRequest) string {
	return Action{Actor: req.Actor, Reason: req.Reason}.outcome("cancelled")
}

// wakeWaiting wakes a run waiting at a WaitFor, which has no message in
// flight: its wait is given up (a signal after it is refused) and the
// message that resumes it is sent, which the step then finds cancelled.
func (e *Engine) wakeWaiting(ctx context.Context, run journal.Run) error {
	f, err := e.flow(run.Flow)
	if err != nil || e.joins == nil || run.Status != journal.Waiting {
		return nil
	}
	pos, w := f.wait(f.renamed.of(run.Step))
	if w == nil {
		return nil
	}
	key := waitKey(run.Replays, pos, run.Step)
	if k, ok := f.waitedKey(run, f.renamed.of(run.Step)); ok {
		key = k
	}
	dec, err := e.joins.Settle(ctx, run.ID, key, waitSignal, journal.Settled{Output: []byte("cancelled")})
	switch {
	case errors.Is(err, journal.ErrJoinNotFound), errors.Is(err, journal.ErrInvalidJoin):
		return nil
	case err != nil:
		return fmt.Errorf("wake it from its wait: %w", err)
	case !dec.Last:
		return nil
	}
	if err := e.resumeWait(ctx, run.ID, key); err != nil {
		return fmt.Errorf("wake it from its wait: %w", err)
	}
	return nil
}

// cancels is what an engine knows of cancelled runs, and the steps in
// flight it can stop.
type cancels struct {
	mu       sync.Mutex
	runs     map[string]cancelled
	inFlight map[string]map[*inFlight]struct{}
	// seen is the latest end of a cancellation read from the journal.
	seen time.Time
}

type cancelled struct {
	why string
	at  time.Time
}

// inFlight is one step running, which a cancellation of its run stops.
type inFlight struct{ cancel context.CancelCauseFunc }

// add records runID cancelled (why, at) and stops its steps in flight.
func (c *cancels) add(runID, why string, at time.Time) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.runs == nil {
		c.runs = map[string]cancelled{}
	}
	c.runs[runID] = cancelled{why: why, at: at}
	for f := range c.inFlight[runID] {
		f.cancel(fmt.Errorf("%w: %s", ErrRunCancelled, why))
	}
}

// why says whether runID is known cancelled, and why.
func (c *cancels) why(runID string) (string, bool) {
	c.mu.Lock()
	defer c.mu.Unlock()
	r, ok := c.runs[runID]
	return r.why, ok
}

// track gives a step a context that the cancellation of any of runIDs
// (its run, and a child run's parent) cancels; done forgets it.
func (c *cancels) track(ctx context.Context, runIDs ...string) (context.Context, func()) {
	ctx, cancel := context.WithCancelCause(ctx)
	f := &inFlight{cancel: cancel}
	c.mu.Lock()
	if c.inFlight == nil {
		c.inFlight = map[string]map[*inFlight]struct{}{}
	}
	for _, id := range runIDs {
		if r, ok := c.runs[id]; ok {
			cancel(fmt.Errorf("%w: %s", ErrRunCancelled, r.why))
		}
		if c.inFlight[id] == nil {
			c.inFlight[id] = map[*inFlight]struct{}{}
		}
		c.inFlight[id][f] = struct{}{}
	}
	c.mu.Unlock()
	return ctx, func() {
		c.mu.Lock()
		for _, id := range runIDs {
			delete(c.inFlight[id], f)
			if len(c.inFlight[id]) == 0 {
				delete(c.inFlight, id)
			}
		}
		c.mu.Unlock()
		cancel(nil)
	}
}

// forget drops what was cancelled before since.
func (c *cancels) forget(since time.Time) {
	c.mu.Lock()
	defer c.mu.Unlock()
	for id, r := range c.runs {
		if r.at.Before(since) {
			delete(c.runs, id)
		}
	}
}

// readCancels reads the runs cancelled since it last read (since
// cancelWindow ago, the first time) from the journal, when it is a
// journal.CancelFeed.
func (e *Engine) readCancels(ctx context.Context) error {
	feed, ok := e.journal.(journal.CancelFeed)
	if !ok {
		return nil
	}
	now := e.now()
	e.cancels.mu.Lock()
	since := e.cancels.seen
	e.cancels.mu.Unlock()
	if since.IsZero() {
		since = now.Add(-cancelWindow)
	} else {
		since = since.Add(-cancelOverlap)
	}
	const page = 1000
	for {
		runs, err := feed.CancelledSince(ctx, since, page)
		if err != nil {
			return fmt.Errorf("read the cancelled runs: %w", err)
		}
		for _, r := range runs {
			if _, known := e.cancels.why(r.ID); !known {
				e.cancels.add(r.ID, r.Error, *r.EndedAt)
			}
			since = *r.EndedAt
		}
		e.cancels.mu.Lock()
		if since.After(e.cancels.seen) {
			e.cancels.seen = since
		}
		e.cancels.mu.Unlock()
		if len(runs) < page {
			break
		}
	}
	e.cancels.forget(now.Add(-cancelWindow))
	return nil
}
