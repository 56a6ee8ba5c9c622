package steps

import (
	"context"
	"errors"
	"fmt"
	"strings"

	"github.com/acemq/acemq-flow/broker"
	"github.com/acemq/acemq-flow/patterns"
)

// SagaPart is one part of a saga step, built by Do: an action on the
// step's payload, and how to undo it (Undo).
type SagaPart[T any] struct {
	name string
	do   func(context.Context, T) (T, error)
	undo func(context.Context, T) error
	err  error
}

// Do describes a part of a saga step called name that runs fn: fn gets the
// payload as the part before it left it (the step's input, for the first
// part) and returns it for the next part. An error fails the saga there.
func Do[T any](name string, fn func(context.Context, T) (T, error)) *SagaPart[T] {
	p := &SagaPart[T]{name: name, do: fn}
	switch {
	case name == "":
		p.err = errors.New("a part with no name")
	case fn == nil:
		p.err = fmt.Errorf("part %q has no function", name)
	}
	return p
}

// Undo sets how the part is undone should a later part fail: fn gets what
// the part returned. A part without one is passed over when undoing (one
// that only read something needs no undoing). Undo(nil) is a build error,
// reported when the step runs.
func (p *SagaPart[T]) Undo(fn func(context.Context, T) error) *SagaPart[T] {
	if fn == nil && p.err == nil {
		p.err = fmt.Errorf("part %q: nil undo", p.name)
	}
	p.undo = fn
	return p
}

// sagaRun is what one run of a saga step works on: the payload as it
// stands, and what each part returned, for its undo.
type sagaRun[T any] struct {
	v    T
	outs []T
}

// Saga returns a step function that runs parts, in order, as an in-process
// saga called name (patterns.NewSaga): see the package documentation for
// what it returns when the saga completes, is compensated, or leaves
// something unresolved. The saga is built once; the function is safe to
// call from concurrent deliveries.
func Saga[T any](name string, parts ...*SagaPart[T]) func(context.Context, T) (T, error) {
	saga, err := buildSaga(name, parts)
	if err != nil {
		return func(context.Context, T) (T, error) {
			var zero T
			return zero, broker.Fatal(err)
		}
	}
	return func(ctx context.Context, v T) (T, error) {
		run := &sagaRun[T]{v: v, outs: make([]T, len(parts))}
		res := saga.Run(ctx, run)
		var zero T
		switch {
		case res.Complete():
			return run.v, nil
		case res.HasUnresolved():
			return zero, broker.Fatal(res.Err())
		default:
			return zero, fmt.Errorf("%w; %s", res.Err(), undone(parts, res.Completed()))
		}
	}
}

// buildSaga turns parts into a patterns.Saga on a *sagaRun, each part
// threading the payload on and keeping what it returned for its undo.
func buildSaga[T any](name string, parts []*SagaPart[T]) (*patterns.Saga[*sagaRun[T]], error) {
	if len(parts) == 0 {
		return nil, fmt.Errorf("%w: %q has no parts", patterns.ErrInvalidSaga, name)
	}
	saga := patterns.NewSaga[*sagaRun[T]](name)
	for i, p := range parts {
		if p == nil {
			return nil, fmt.Errorf("%w: %q: part %d is nil", patterns.ErrInvalidSaga, name, i)
		}
		if p.err != nil {
			return nil, fmt.Errorf("%w: %q: %w", patterns.ErrInvalidSaga, name, p.err)
		}
		saga.Step(p.name, func(ctx context.Context, r *sagaRun[T]) error {
			out, err := p.do(ctx, r.v)
			if err != nil {
				return err
			}
			r.v, r.outs[i] = out, out
			return nil
		})
		if p.undo != nil {
			saga.CompensateWith(func(ctx context.Context, r *sagaRun[T]) error { return p.undo(ctx, r.outs[i]) })
		}
	}
	return saga, nil
}

// undone says which completed parts a compensated saga took back, newest
// first, so that the run's journal shows it.
func undone[T any](parts []*SagaPart[T], completed []string) string {
	var names []string
	for i := len(completed) - 1; i >= 0; i-- {
		if parts[i].undo != nil {
			names = append(names, completed[i])
		}
	}
	if len(names) == 0 {
		return "nothing to undo"
	}
	return "undone: " + strings.Join(names, ", ")
}
