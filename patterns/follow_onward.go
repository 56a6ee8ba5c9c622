package patterns

import (
	"context"
	"errors"
	"fmt"
	"reflect"

	"github.com/acemq/acemq-flow/broker"
	"github.com/acemq/acemq-flow/broker/transport"
)

// End is what a step of a follower (FollowSlip, Pipeline.Follow,
// ThenPublish) returns to end its run there on purpose: nothing is
// published, the message is accepted, and a pipeline counts the run
// ended_early. An untyped nil means the same, as the seeds have it; a
// typed nil (a nil *Order in the any) is refused rather than published as
// JSON null.
var End = endRun{}

type endRun struct{}

// ErrNilResult is a step returning a typed nil (a nil *Order in an any):
// given up rather than published as JSON null. Return End to end a run.
var ErrNilResult = errors.New("step returned a typed nil")

// StepError is a follower's step failing: the Err of the Ack the follower
// returns (and so of a settle hook's Settlement), so that a caller can
// tell the step's own failure from a failure to pass its result on
// (*HopError). It unwraps to what the step returned, broker.Fatal
// included.
type StepError struct {
	// Step names the step (empty for ThenPublish).
	Step string
	Err  error
}

// Error names the step and what it returned.
func (e *StepError) Error() string {
	if e.Step == "" {
		return "step: " + e.Err.Error()
	}
	return fmt.Sprintf("step %q: %v", e.Step, e.Err)
}

// Unwrap is the step's error.
func (e *StepError) Unwrap() error { return e.Err }

// HopError is a follower failing to pass on what its step produced: the
// next message could not be built, or its publish was refused or its fate
// is unknown. The step's work was done. Under Idempotent with a
// ResultStore, the message it produced is kept under the key before it is
// sent, so the retry or redelivery sends that message again, with the same
// message id, instead of running the step a second time.
type HopError struct {
	// Step is the step whose result was being passed on ("" for
	// ThenPublish); To says where it was going.
	Step string
	To   string
	Err  error
}

// Error says which hop failed and why (the publish error names the
// destination).
func (e *HopError) Error() string {
	if e.Step == "" {
		return "hop: " + e.Err.Error()
	}
	return fmt.Sprintf("hop from %q: %v", e.Step, e.Err)
}

// Unwrap is the publish's error.
func (e *HopError) Unwrap() error { return e.Err }

// stepFailed turns a step's error into the ack broker.Func would give it,
// marked as the step's.
func stepFailed(step string, err error) broker.Ack {
	se := &StepError{Step: step, Err: err}
	var fatal *broker.FatalError
	if errors.As(err, &fatal) {
		return broker.Reject(se)
	}
	return broker.Retry(se)
}

// ending reports whether a step's result ends the run; a typed nil is an
// error, never a message carrying null.
func ending(payload any) (bool, error) {
	if payload == nil || payload == End {
		return true, nil
	}
	v := reflect.ValueOf(payload)
	switch v.Kind() {
	case reflect.Pointer, reflect.Map, reflect.Slice, reflect.Interface, reflect.Func, reflect.Chan:
		if v.IsNil() {
			return false, fmt.Errorf("%w (%T); return patterns.End to end the run", ErrNilResult, payload)
		}
	}
	return false, nil
}

// guarded is what Idempotent hands the handler it guards, through the
// context: a follower under the guard does not send the message its step
// produced, it hands it over (hop), for the guard to keep under its key and
// send; and a redelivery of work done before has the follower send the
// message kept then (resend) rather than call the step.
type guarded struct {
	hop    guardedHop
	resend *broker.Outgoing
}

// guardedHop is what a follower under the guard produced: its next message
// and how to send it (nil for one read back from the store).
type guardedHop struct {
	out  *broker.Outgoing
	send func(ctx context.Context, out broker.Outgoing) broker.Ack
}

// encode is what the guard keeps of h: nothing when there is no message.
func (h guardedHop) encode() ([]byte, error) {
	if h.out == nil {
		return nil, nil
	}
	return h.out.MarshalBinary()
}

func decodeGuardedHop(b []byte) (guardedHop, error) {
	var out broker.Outgoing
	if err := out.UnmarshalBinary(b); err != nil {
		return guardedHop{}, err
	}
	out.Mandatory = true
	return guardedHop{out: &out}, nil
}

type guardedKey struct{}

func withGuarded(ctx context.Context, g *guarded) context.Context {
	return context.WithValue(ctx, guardedKey{}, g)
}

func guardedFrom(ctx context.Context) *guarded {
	g, _ := ctx.Value(guardedKey{}).(*guarded)
	return g
}

// resent sends again the message kept for work done before, when the
// guard handed one over; ok is false when there is none and the step must
// run.
func resent(ctx context.Context, conn *broker.Conn, step string) (ack broker.Ack, ok bool) {
	g := guardedFrom(ctx)
	if g == nil || g.resend == nil {
		return broker.Ack{}, false
	}
	return send(ctx, conn, step, *g.resend), true
}

// onward sends out, what a follower's step produced, mandatory and
// confirmed; under the guard it hands it over instead, for the guard to
// keep and send.
func onward(ctx context.Context, conn *broker.Conn, step string, out broker.Outgoing) broker.Ack {
	if g := guardedFrom(ctx); g != nil {
		g.hop = guardedHop{out: &out, send: func(ctx context.Context, out broker.Outgoing) broker.Ack {
			return send(ctx, conn, step, out)
		}}
		return broker.Accept()
	}
	return send(ctx, conn, step, out)
}

func send(ctx context.Context, conn *broker.Conn, step string, out broker.Outgoing) broker.Ack {
	err := conn.Send(ctx, out)
	if err == nil {
		return broker.Accept()
	}
	he := &HopError{Step: step, To: hopDestination(out), Err: err}
	if errors.Is(err, transport.ErrInvalidHeader) {
		// It will not be sendable next time either.
		return broker.Reject(broker.Fatal(he))
	}
	return broker.Retry(he)
}

func hopDestination(out broker.Outgoing) string {
	if out.Exchange == "" {
		return fmt.Sprintf("queue %q", out.RoutingKey)
	}
	return fmt.Sprintf("exchange %q key %q", out.Exchange, out.RoutingKey)
}
