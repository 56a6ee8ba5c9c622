package engine

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"reflect"
	"time"

	"github.com/acemq/acemq-flow/broker"
	"github.com/acemq/acemq-flow/dsl"
	"github.com/acemq/acemq-flow/engine/journal"
	"github.com/acemq/acemq-flow/patterns"
)

// A WaitFor step (dsl.WaitFor) waits for its signal without a message in
// flight. Its wait is a join of two in the journal (journal.JoinStore),
// under signal/<replays>/<position>/<step>: branch 0 is the run reaching
// the wait, settled with the message that resumes it (addressed to the
// step again, with the run's route and state, and acemq-flow-signal), and
// branch 1 the signal, settled with its payload, or given up by the
// wait's timer (a message on the ladder to the step's queue, due at the
// timeout). Whichever settles second goes on: the run reaching its wait
// after the signal goes on at once, a signal reaching a waiting run sends
// the message that resumes it, and the timer settling first times the
// wait out. The join decides once, so a signal is never lost between the
// two nor taken twice, on any number of workers.

// Which branch of a wait's join is which.
const (
	waitReached = 0
	waitSignal  = 1
)

// waitKey is the key of the join of the wait at position pos of a run in
// its replays-th replay.
func waitKey(replays, pos int, step string) string {
	return fmt.Sprintf("signal/%d/%d/%s", replays, pos, step)
}

// signalRef is the acemq-flow-signal header: on the message that resumes
// a run at its wait (Wait, the wait's join), and on the wait's timer
// (Timeout).
type signalRef struct {
	Wait    string `json:"wait,omitempty"`
	Timeout bool   `json:"timeout,omitempty"`
	// Send is on a signal another service sends (docs/wire.md): the name
	// of the wait it is for, its payload the message's body.
	Send string `json:"send,omitempty"`
}

// SignalSent is what Signal did: the run's signal is kept (Resumed false:
// the run had not reached its wait yet) or resumed the waiting run.
type SignalSent struct {
	RunID   string `json:"run_id"`
	Flow    string `json:"flow"`
	Signal  string `json:"signal"`
	Resumed bool   `json:"resumed"`
}

// Signal delivers the signal name with payload (encoded in the flow's
// codec; a json.RawMessage is taken as it is) to run runID, whose flow
// must have a WaitFor of that name: a run waiting there goes on with it,
// a run that has not reached it yet finds it there when it does. Sending
// the same signal again with the same payload does nothing more. It
// refuses, with errors.Is matching: journal.ErrRunNotFound for an unknown
// run, ErrNoSuchWait for a flow without that wait, ErrRunEnded for a run
// that is over (completed, failed, compensated, cancelled...),
// ErrInvalidPayload for a payload that is not the wait's signal type,
// ErrSignalTaken for a second signal with another payload, and
// ErrSignalTimedOut for a wait that timed out before it came.
func (e *Engine) Signal(ctx context.Context, runID, name string, payload any) (SignalSent, error) {
	return e.SignalWith(ctx, runID, name, payload, Action{})
}

// SignalWith is Signal, recording who sent the signal and why (act) in
// the outcome of the signal's event ("signal received by ada: reason").
// It refuses what Signal refuses.
func (e *Engine) SignalWith(ctx context.Context, runID, name string, payload any, act Action) (SignalSent, error) {
	sent := SignalSent{RunID: runID, Signal: name}
	fail := func(err error) (SignalSent, error) {
		return sent, fmt.Errorf("signal %q to run %s: %w", name, runID, err)
	}
	run, err := e.runOf(ctx, runID)
	if err != nil {
		return fail(err)
	}
	sent.Flow = run.Flow
	f, err := e.flow(run.Flow)
	if err != nil {
		return fail(err)
	}
	pos, wait := f.wait(name)
	switch {
	case wait == nil:
		return fail(fmt.Errorf("%w: flow %q has no WaitFor %q", ErrNoSuchWait, f.name, name))
	case run.Status.Stopped():
		return fail(fmt.Errorf("%w: it is %s", ErrRunEnded, run.Status))
	case e.joins == nil:
		return fail(fmt.Errorf("%w: the engine's journal (%T) keeps none, and a wait is one", ErrNoJoins, e.journal))
	}
	body, err := f.signalBody(wait.Signal, payload)
	if err != nil {
		return fail(err)
	}
	key := waitKey(run.Replays, pos, name)
	if k, ok := f.waitedKey(run, name); ok {
		key = k
	}
	if _, _, err := e.joins.OpenJoin(ctx, journal.Join{RunID: runID, Key: key, Total: 2, Limit: 2}, nil); err != nil {
		return fail(err)
	}
	dec, err := e.joins.Settle(ctx, runID, key, waitSignal, journal.Settled{OK: true, Output: body})
	if err != nil {
		return fail(err)
	}
	settled, err := e.waitBranch(ctx, runID, key, waitSignal)
	switch {
	case err != nil:
		return fail(err)
	case !settled.OK:
		return fail(fmt.Errorf("%w (%s)", ErrSignalTimedOut, wait.Timeout))
	case !bytes.Equal(settled.Output, body):
		return fail(fmt.Errorf("%w: it came before, with another payload", ErrSignalTaken))
	}
	now := e.now()
	ev := journal.Event{RunID: runID, Flow: f.name, Kind: journal.KindStep, Step: name, Outcome: act.outcome("signal received"),
		StartedAt: now, EndedAt: now, Replays: run.Replays, Seq: journal.Seq(run.Replays, pos+1, 0, 1), Key: "signal/" + key}
	if dec.Last {
		// The run waits: resume it.
		if err := e.resumeWait(ctx, runID, key); err != nil {
			return fail(err)
		}
		sent.Resumed = true
		ev.Outcome = "signal received: the run goes on"
		if !act.IsZero() {
			ev.Outcome = act.outcome("signal received") + "; the run goes on"
		}
	}
	if err := e.writer.RecordSync(ctx, ev); err != nil {
		e.log.Warn("a signal's event was not written", "flow", f.name, "run_id", runID, "step", ev.Step, "signal", name, "error", err)
	}
	return sent, nil
}

// waitBranch is branch (waitReached, waitSignal) of the wait's join under
// key, once settled; an error matching journal.ErrJoinNotFound when it is
// not.
func (e *Engine) waitBranch(ctx context.Context, runID, key string, branch int) (journal.Arrival, error) {
	got, err := e.joins.Arrivals(ctx, runID, key, branch, 1)
	switch {
	case err != nil:
		return journal.Arrival{}, fmt.Errorf("wait %s: %w", key, err)
	case len(got) != 1 || got[0].Branch != branch:
		return journal.Arrival{}, fmt.Errorf("wait %s: %w: branch %d not settled", key, journal.ErrJoinNotFound, branch)
	}
	return got[0], nil
}

// resumeWait sends the message that resumes the run waiting at the wait
// under key, kept with the run's arrival there. Sent again, it is the
// same message, and the wait's step finds its work done.
func (e *Engine) resumeWait(ctx context.Context, runID, key string) error {
	reached, err := e.waitBranch(ctx, runID, key, waitReached)
	if err != nil {
		return err
	}
	var resume broker.Outgoing
	if err := resume.UnmarshalBinary(reached.Output); err != nil {
		return fmt.Errorf("the message that resumes run %s: %w", runID, err)
	}
	if err := e.conn.Send(ctx, resume); err != nil {
		return fmt.Errorf("resume run %s: %w", runID, err)
	}
	return nil
}

// waitedKey is the key of the wait a waiting run is at (or is held on the
// ladder before), when that is name or a name name had before
// (dsl.Renamed): the key the wait opens, from the name and the position
// the run has on the route it carries, which differ from the flow's own
// when an earlier version named the wait otherwise or had other steps
// before it. The position is the stage of
// the run's last event (journal.Seq: a step's position plus one).
func (f *flow) waitedKey(run journal.Run, name string) (string, bool) {
	if run.Status != journal.Waiting || run.Seq < 0 || f.renamed.of(run.Step) != name {
		return "", false
	}
	stage := int(run.Seq>>24) & 0xffffff
	if stage < 1 || stage >= journal.CompensationStage {
		return "", false
	}
	return waitKey(run.Replays, stage-1, run.Step), true
}

// wait is the flow's WaitFor step called name and its position.
func (f *flow) wait(name string) (int, *dsl.WaitSpec) {
	for i, s := range f.def.Steps() {
		if s.Name == name && s.Wait != nil {
			return i, s.Wait
		}
	}
	return -1, nil
}

// signalBody encodes a signal's payload in the flow's codec (a
// json.RawMessage as it is, for a JSON flow) and checks that it decodes
// as t.
func (f *flow) signalBody(t reflect.Type, payload any) ([]byte, error) {
	var body []byte
	if raw, ok := payload.(json.RawMessage); ok && f.json {
		body = raw
	} else {
		b, err := f.codec.Encode(payload)
		if err != nil {
			return nil, fmt.Errorf("%w: %w", ErrInvalidPayload, err)
		}
		body = b
	}
	if _, err := f.decodeAs(t, body); err != nil {
		return nil, fmt.Errorf("%w: not a %s: %w", ErrInvalidPayload, t, err)
	}
	return body, nil
}

// wait takes a run in at its WaitFor: its arrival is settled in the
// wait's join with the message that resumes it; a signal already there
// lets it go on at once, otherwise the wait's timer goes on the ladder
// and the run waits.
func (r *stepRunner) wait(ctx context.Context, a *stepAttempt) broker.Ack {
	d := &a.d
	if d.signal != nil {
		return r.resumed(ctx, a)
	}
	key := waitKey(d.replays, d.pos, d.named(r.spec.Name))
	if _, _, err := r.e.joins.OpenJoin(ctx, journal.Join{RunID: d.m.RunID, Key: key, Total: 2, Limit: 2}, nil); err != nil {
		return broker.Retry(fmt.Errorf("wait %q: %w", r.spec.Name, err))
	}
	resume, err := r.waitMessage(ctx, d, signalRef{Wait: key}, "")
	if err != nil {
		return r.giveUp(ctx, a, d.state, nil, broker.Fatal(err))
	}
	b, err := resume.MarshalBinary()
	if err != nil {
		return r.giveUp(ctx, a, d.state, nil, broker.Fatal(err))
	}
	dec, err := r.e.joins.Settle(ctx, d.m.RunID, key, waitReached, journal.Settled{OK: true, Output: b})
	if err != nil {
		return broker.Retry(fmt.Errorf("wait %q: %w", r.spec.Name, err))
	}
	if dec.Last {
		// The signal came first.
		return r.signalled(ctx, a, key)
	}
	until := r.e.now().Add(r.spec.Wait.Timeout)
	timer, err := r.waitMessage(ctx, d, signalRef{Wait: key, Timeout: true}, "/timeout")
	if err != nil {
		return r.giveUp(ctx, a, d.state, nil, broker.Fatal(err))
	}
	if err := r.e.conn.Schedule(ctx, until, timer); err != nil {
		return broker.Retry(fmt.Errorf("wait %q: schedule its timeout: %w", r.spec.Name, err))
	}
	a.result, a.waitUntil = resultWaiting, until
	return broker.Accept()
}

// waitMessage is the message that comes back to the wait of d: the step's
// own, with the run's route, position and state and ref, under a message
// id of the wait's (with suffix).
func (r *stepRunner) waitMessage(ctx context.Context, d *delivery, ref signalRef, suffix string) (broker.Outgoing, error) {
	out, err := r.f.hopMessage(ctx, r.e.conn, d.m, d.wireRoute(), d.pos, json.RawMessage(d.m.Body), d.state, d.slip)
	if err != nil {
		return broker.Outgoing{}, fmt.Errorf("wait %q: the message that resumes the run: %w", r.spec.Name, err)
	}
	h, err := jsonHeader(ref)
	if err != nil {
		return broker.Outgoing{}, err
	}
	headers := out.Message.Headers.Clone()
	if headers == nil {
		headers = broker.Table{}
	}
	headers[HeaderSignal] = h
	out.Message.Headers = headers
	out.Message.MessageID = d.m.RunID + "/" + ref.Wait + suffix
	return out, nil
}

// resumed handles a message back at the wait: the signal's, which lets
// the run go on, or the wait's timer, which times the wait out unless the
// signal came first. (A run cancelled meanwhile stops before: decide.)
func (r *stepRunner) resumed(ctx context.Context, a *stepAttempt) broker.Ack {
	d := &a.d
	ref := *d.signal
	if !ref.Timeout {
		return r.signalled(ctx, a, ref.Wait)
	}
	if _, err := r.e.joins.Settle(ctx, d.m.RunID, ref.Wait, waitSignal, journal.Settled{Output: []byte("timed out")}); err != nil {
		return broker.Retry(fmt.Errorf("wait %q: time it out: %w", r.spec.Name, err))
	}
	got, err := r.e.waitBranch(ctx, d.m.RunID, ref.Wait, waitSignal)
	if err != nil {
		return broker.Retry(err)
	}
	if got.OK {
		// The signal came first: the timer has nothing to do.
		a.result = resultTimerDropped
		return broker.Accept()
	}
	w, m := r.spec.Wait, d.m
	if !w.GoesOnAtTimeout() {
		_, err := w.TimedOut(ctx, decoder(m))
		return r.giveUp(ctx, a, d.state, nil, &patterns.StepError{Step: r.spec.Name, Err: broker.Fatal(err)})
	}
	a.join = func(ctx context.Context) (any, error) { return w.TimedOut(ctx, decoder(m)) }
	return r.runUnit(ctx, a, d.stepKey(r.spec.Name))
}

// signalled goes on from the wait with the signal kept in its join.
func (r *stepRunner) signalled(ctx context.Context, a *stepAttempt, key string) broker.Ack {
	m := a.d.m
	got, err := r.e.waitBranch(ctx, m.RunID, key, waitSignal)
	switch {
	case err != nil:
		return broker.Retry(err)
	case !got.OK:
		return broker.Retry(fmt.Errorf("wait %q: %w: its signal is not in it", r.spec.Name, journal.ErrJoinNotFound))
	}
	signal, w := got.Output, r.spec.Wait
	a.join = func(ctx context.Context) (any, error) {
		return w.Signalled(ctx, decoder(m), func(v any) error { return decodeBody(m, signal, v) })
	}
	return r.runUnit(ctx, a, a.d.stepKey(r.spec.Name))
}

// sentSignal reports whether m is a signal another service sent to the
// step's queue (acemq-flow-signal with "send", no route), and which.
func sentSignal(m *broker.Message) (signalRef, bool) {
	var ref signalRef
	found, err := readJSONHeader(m.Headers, HeaderSignal, &ref)
	return ref, found && err == nil && ref.Send != "" && m.Route == nil
}

// receive delivers a signal another service sent to the wait's queue, as
// Signal does. One that cannot be taken (an unknown or finished run, a
// second signal, the wrong payload, a wait that timed out) is set aside
// in the step's dead-letter queue with the reason (parked, for a payload
// that cannot be read as the signal), for a person: it says nothing of
// its run, which is not failed for it. A journal or broker
// that did not answer has it retried.
func (r *stepRunner) receive(ctx context.Context, a *stepAttempt, ref signalRef) broker.Ack {
	m := a.d.m
	_, err := r.e.Signal(ctx, m.RunID, ref.Send, json.RawMessage(m.Body))
	a.result = resultSignalReceived
	switch {
	case err == nil:
		return broker.Accept()
	case errors.Is(err, journal.ErrRunNotFound), errors.Is(err, ErrNoSuchWait), errors.Is(err, ErrRunEnded),
		errors.Is(err, ErrInvalidPayload), errors.Is(err, ErrSignalTaken), errors.Is(err, ErrSignalTimedOut):
		a.expect = broker.OutcomeLabelDeadLettered
		return broker.Reject(broker.Fatal(err))
	}
	a.result = resultBusy
	return broker.Retry(err)
}

// waitOutcome is what a run waiting at a WaitFor records.
func waitOutcome(step string, until time.Time) string {
	return fmt.Sprintf("waiting for signal %s until %s", step, until.UTC().Format(time.RFC3339))
}

// canWait refuses a flow with a WaitFor when the engine's journal keeps no
// joins, where its waits are kept.
func (e *Engine) canWait(f *flow) error {
	for _, s := range f.steps {
		if s.Wait != nil && e.joins == nil {
			return fmt.Errorf("%w: flow %q step %q waits for a signal, and the engine's journal (%T) keeps none, where waits are kept",
				ErrNoJoins, f.name, s.Name, e.journal)
		}
	}
	return nil
}
