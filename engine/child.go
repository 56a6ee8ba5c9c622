package engine

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"strings"

	"github.com/acemq/acemq-flow/broker"
	"github.com/acemq/acemq-flow/engine/journal"
	"github.com/acemq/acemq-flow/engine/timeline"
)

// A Child step (dsl.Child) starts a run of another flow and waits for it
// without a message in flight: the message that will resume the parent,
// addressed to the step again with the parent's route and state, is kept
// in the parent's run data, and the child's messages carry where
// (acemq-flow-parent). When the child's route is done, its last step
// sends that message with the child's output as its body and the child's
// outcome (acemq-flow-child); a child given up sends it with its error.
// The parent's step then goes on with the output, or starts another child
// run (<parent>.<step>.<attempt>) while its retry policy allows.

// childRunID is the run id of the child run the Child step of d starts
// on its attempt-th start: the parent's and the step's (on a replay or a
// branch, where in the parent it is too), and from the second start on the
// attempt: each start is a run of its own.
func childRunID(d *delivery, step string, attempt int) string {
	id := d.m.RunID + "." + step
	if d.replays > 0 || d.branch != nil {
		id = d.m.RunID + "." + strings.ReplaceAll(d.at(), "/", ".") + "." + step
	}
	if attempt > 1 {
		id += fmt.Sprintf(".%d", attempt)
	}
	return id
}

// startChild starts the child run of the step (attempt counts the starts,
// 1 first) and keeps the message that resumes the parent once the child
// is over.
func (r *stepRunner) startChild(ctx context.Context, a *stepAttempt, attempt int) broker.Ack {
	d := &a.d
	// Its body is the step's input until the child's output replaces it:
	// a child that failed is started again on it.
	resume, err := r.f.hopMessage(ctx, r.e.conn, d.m, d.wireRoute(), d.pos, json.RawMessage(d.m.Body), d.state, d.slip)
	if err != nil {
		return r.giveUp(ctx, a, d.state, nil, broker.Fatal(fmt.Errorf("child step %q: the message that resumes the run: %w", r.spec.Name, err)))
	}
	b, err := resume.MarshalBinary()
	if err != nil {
		return r.giveUp(ctx, a, d.state, nil, broker.Fatal(err))
	}
	key := "child/" + d.at() + "/" + r.spec.Name
	if err := r.e.data.PutData(ctx, d.m.RunID, key, b); err != nil {
		return broker.Retry(fmt.Errorf("child step %q: keep the message that resumes the run: %w", r.spec.Name, err))
	}
	h, err := jsonHeader(parentRef{Run: d.m.RunID, Flow: r.f.name, Step: r.spec.Name, Data: key, Attempt: attempt})
	if err != nil {
		return broker.Retry(err)
	}
	child := childRunID(d, r.spec.Name, attempt)
	// Start is idempotent on the run id: a redelivery starts it once.
	_, err = r.e.Start(ctx, r.spec.Child.Flow, json.RawMessage(d.m.Body), RunID(child),
		startOutcome(timeline.StartedBy(d.m.RunID, r.spec.Name)),
		func(c *startConfig) error { c.headers = broker.Table{HeaderParent: h}; return nil })
	switch {
	case errors.Is(err, ErrInvalidPayload):
		return r.giveUp(ctx, a, d.state, nil, broker.Fatal(fmt.Errorf("child step %q: %w", r.spec.Name, err)))
	case err != nil:
		return broker.Retry(fmt.Errorf("child step %q: start child run %s: %w", r.spec.Name, child, err))
	}
	a.result, a.child = resultChildStarted, child
	return broker.Accept()
}

// childReturned goes on with the parent once its child run is over: with
// the child's output when it completed; otherwise the child is started
// again while the step's retry policy allows, then the step is given up.
func (r *stepRunner) childReturned(ctx context.Context, a *stepAttempt) broker.Ack {
	d := &a.d
	c := d.child
	if c.Completed {
		m := d.m
		a.join = func(context.Context) (any, error) { return r.f.decodeAs(r.spec.Out, m.Body) }
		return r.runUnit(ctx, a, d.stepKey(r.spec.Name))
	}
	err := fmt.Errorf("%w: child run %s: %s", ErrChildFailed, c.Run, c.Error)
	if why := r.policy.GiveUp(c.Attempt, d.m.FirstSeen, r.e.now()); why != "" {
		return r.giveUp(ctx, a, d.state, nil, broker.Fatal(fmt.Errorf("%w (%s)", err, why)))
	}
	return r.startChild(ctx, a, c.Attempt+1)
}

// returnToParent is the message that resumes d's parent run: the one its
// Child step kept, with out, the child's output, as its body; a failed
// child (out nil, why saying why) leaves the step's input there.
func (e *Engine) returnToParent(ctx context.Context, d *delivery, out any, why string) (broker.Outgoing, error) {
	p := d.parent
	if e.data == nil {
		return broker.Outgoing{}, fmt.Errorf("%w: run %s returns to parent run %s, whose resuming message is kept in run data, and this engine's journal keeps none", journal.ErrDataNotFound, d.m.RunID, p.Run)
	}
	b, err := e.data.Data(ctx, p.Run, p.Data)
	if err != nil {
		return broker.Outgoing{}, fmt.Errorf("the message that resumes parent run %s: %w", p.Run, err)
	}
	var ret broker.Outgoing
	if err := ret.UnmarshalBinary(b); err != nil {
		return broker.Outgoing{}, fmt.Errorf("the message that resumes parent run %s: %w", p.Run, err)
	}
	if out != nil {
		if ret.Message.Body, err = json.Marshal(out); err != nil {
			return broker.Outgoing{}, fmt.Errorf("encode child run %s's result: %w", d.m.RunID, err)
		}
	}
	h, err := jsonHeader(childResult{Run: d.m.RunID, Completed: why == "", Error: journal.Truncate(why), Attempt: p.Attempt})
	if err != nil {
		return broker.Outgoing{}, err
	}
	headers := ret.Message.Headers.Clone()
	if headers == nil {
		headers = broker.Table{}
	}
	headers[HeaderChild] = h
	ret.Message.Headers = headers
	// One id per outcome of the child (and attempt), so that one sent
	// again is the same message to the parent's step.
	ret.Message.MessageID = fmt.Sprintf("%s/returns/%d", d.m.RunID, p.Attempt)
	return ret, nil
}

// childFailed tells d's parent run that its child (d's run) was given up,
// err saying why.
func (e *Engine) childFailed(ctx context.Context, d *delivery, err error) error {
	ret, rerr := e.returnToParent(ctx, d, nil, err.Error())
	if rerr != nil {
		return rerr
	}
	if err := e.conn.Send(ctx, ret); err != nil {
		return fmt.Errorf("tell parent run %s that child run %s failed: %w", d.parent.Run, d.m.RunID, err)
	}
	return nil
}

// canRunChildren refuses a flow with a Child step whose child flow is not
// registered, or an engine whose journal keeps no run data (where the
// message that resumes the parent is kept).
func (e *Engine) canRunChildren(f *flow) error {
	for _, s := range f.steps {
		if s.Child == nil {
			continue
		}
		if _, err := e.flow(s.Child.Flow); err != nil {
			return fmt.Errorf("flow %q step %q: its child flow: %w", f.name, s.Name, err)
		}
		if e.data == nil {
			return fmt.Errorf("%w: flow %q step %q starts child runs, and the engine's journal (%T) keeps no run data", ErrInvalidConfig, f.name, s.Name, e.journal)
		}
	}
	return nil
}
