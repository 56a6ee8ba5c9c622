package dsl

import (
	"context"
	"errors"
	"fmt"
	"reflect"
	"time"
)

// Signalled is what a WaitFor step passes on: the payload that reached
// the wait (Input) and the signal's (Signal), or, when the wait timed out
// and the flow said what to go on with (OnTimeout), that value with
// TimedOut set.
type Signalled[In, T any] struct {
	Input    In   `json:"input"`
	Signal   T    `json:"signal"`
	TimedOut bool `json:"timed_out,omitempty"`
}

// WaitSpec is a WaitFor step as the engine reads it.
type WaitSpec struct {
	// Signal is the type of the signal's payload.
	Signal reflect.Type
	// Timeout is how long a run waits at most.
	Timeout time.Duration
	// signalled builds what the step passes on from the payload that
	// reached it and the signal's; timedOut from the payload alone, nil
	// when the wait fails the run on its timeout.
	signalled func(ctx context.Context, in, signal func(any) error) (any, error)
	timedOut  func(ctx context.Context, in func(any) error) (any, error)
}

// ErrTimedOut is what a WaitFor step without OnTimeout fails with when
// its wait times out.
var ErrTimedOut = errors.New("the wait for its signal timed out")

// Signalled is what the step passes on once the signal came: in decodes
// the payload that reached the wait, signal the signal's.
func (w *WaitSpec) Signalled(ctx context.Context, in, signal func(any) error) (any, error) {
	return w.signalled(ctx, in, signal)
}

// TimedOut is what the step passes on when its wait timed out: what
// OnTimeout gives, or ErrTimedOut when the flow gave nothing.
func (w *WaitSpec) TimedOut(ctx context.Context, in func(any) error) (any, error) {
	if w.timedOut == nil {
		return nil, fmt.Errorf("%w (after %s)", ErrTimedOut, w.Timeout)
	}
	return w.timedOut(ctx, in)
}

// GoesOnAtTimeout says the flow said what to go on with when the wait
// times out (OnTimeout).
func (w *WaitSpec) GoesOnAtTimeout() bool { return w.timedOut != nil }

// WaitDef is a WaitFor step: a StepDef whose OnTimeout says what a run
// goes on with when no signal came in time.
type WaitDef[In, T any] struct {
	*StepDef[In, Signalled[In, T]]
}

// WaitFor describes a point in a flow, called name, where a run waits for
// a signal of that name carrying a T, for at most timeout: delivered with
// engine.Signal, `acemq-flow signal`, or a message (docs/wire.md). A
// signal that comes before the run reaches the wait is kept for it. The
// step passes on a Signalled[In, T]: what reached it and the signal. A
// wait that times out fails the step (given up: compensated, or held for
// replay, as the flow says) unless OnTimeout says what to go on with.
// The timeout must be at least 1s (the scheduler ladder's shortest
// rung). A WaitFor cannot be on a branch of a Parallel or a ForEach, nor
// in a flow with an Itinerary.
func WaitFor[In, T any](name string, timeout time.Duration) *WaitDef[In, T] {
	s := &StepDef[In, Signalled[In, T]]{}
	s.spec.Name = name
	s.spec.In = reflect.TypeFor[In]()
	s.spec.Out = reflect.TypeFor[Signalled[In, T]]()
	if timeout < time.Second {
		s.errs = append(s.errs, fmt.Errorf("WaitFor with a timeout of %s, want at least 1s (the scheduler ladder's shortest rung)", timeout))
	}
	s.spec.Wait = &WaitSpec{
		Signal: reflect.TypeFor[T](), Timeout: timeout,
		signalled: func(_ context.Context, in, signal func(any) error) (any, error) {
			var out Signalled[In, T]
			if err := in(&out.Input); err != nil {
				return nil, err
			}
			if err := signal(&out.Signal); err != nil {
				return nil, err
			}
			return out, nil
		},
	}
	return &WaitDef[In, T]{StepDef: s}
}

// OnTimeout makes a wait that times out go on with what fn gives for the
// payload that reached it (Signalled.TimedOut set) instead of failing. An
// error from fn fails the step as a step's error does.
func (w *WaitDef[In, T]) OnTimeout(fn func(context.Context, In) (T, error)) *WaitDef[In, T] {
	if fn == nil {
		w.errs = append(w.errs, errors.New("OnTimeout with no function"))
		return w
	}
	w.spec.Wait.timedOut = func(ctx context.Context, in func(any) error) (any, error) {
		out := Signalled[In, T]{TimedOut: true}
		if err := in(&out.Input); err != nil {
			return nil, err
		}
		var err error
		out.Signal, err = fn(ctx, out.Input)
		if err != nil {
			return nil, err
		}
		return out, nil
	}
	return w
}
