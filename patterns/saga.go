package patterns

import (
	"context"
	"errors"
	"fmt"
	"time"
)

// DefaultCompensationTimeout bounds a saga's compensations when
// CompensationTimeout was not set.
const DefaultCompensationTimeout = 30 * time.Second

// ErrInvalidSaga: a saga built wrongly (a step without a name or an
// action, a compensation before any step); Run reports it as the failure
// without running anything.
var ErrInvalidSaga = errors.New("invalid saga")

// SagaFunc is a saga step's action or compensation, given the value the
// saga runs on.
type SagaFunc[T any] func(ctx context.Context, v T) error

// Saga is a sequence of steps where each one knows how to undo itself,
// run in-process: if a step fails, the compensations of the steps that
// completed run in reverse order, the order the world was changed in.
// Nothing here touches a broker and nothing is durable: a crash midway
// leaves the saga half-applied (the engine's durable compensation is the
// answer to that).
//
// Build it with Step and CompensateWith, which mutate the saga and return
// it so the calls chain; a saga is safe to Run from several goroutines
// once built.
type Saga[T any] struct {
	name    string
	steps   []sagaStep[T]
	timeout time.Duration
	err     error
}

type sagaStep[T any] struct {
	name       string
	action     SagaFunc[T]
	compensate SagaFunc[T]
}

// NewSaga returns an empty saga called name.
func NewSaga[T any](name string) *Saga[T] {
	return &Saga[T]{name: name, timeout: DefaultCompensationTimeout}
}

// Name is the saga's name.
func (s *Saga[T]) Name() string { return s.name }

// Step appends a step called name that runs action. A step with no name
// or no action is remembered as ErrInvalidSaga, which Run reports.
func (s *Saga[T]) Step(name string, action SagaFunc[T]) *Saga[T] {
	if (name == "" || action == nil) && s.err == nil {
		s.err = fmt.Errorf("%w: %q: step %d needs a name and an action", ErrInvalidSaga, s.name, len(s.steps))
	}
	s.steps = append(s.steps, sagaStep[T]{name: name, action: action})
	return s
}

// CompensateWith sets how the step added last is undone. A step with no
// compensation is skipped when compensating: one that only read something
// needs no undoing. Called before any Step, or with nil, it is remembered
// as ErrInvalidSaga.
func (s *Saga[T]) CompensateWith(compensate SagaFunc[T]) *Saga[T] {
	if (len(s.steps) == 0 || compensate == nil) && s.err == nil {
		s.err = fmt.Errorf("%w: %q: a compensation needs a step before it and a function", ErrInvalidSaga, s.name)
	}
	if len(s.steps) > 0 {
		s.steps[len(s.steps)-1].compensate = compensate
	}
	return s
}

// CompensationTimeout bounds all of a run's compensations together
// (default DefaultCompensationTimeout). Compensations run on a context the
// caller's cancellation does not cut short, since a cancelled request is
// exactly when the undoing must still happen; this bound is what stops
// them running for ever. d <= 0 is remembered as ErrInvalidSaga.
func (s *Saga[T]) CompensationTimeout(d time.Duration) *Saga[T] {
	if d <= 0 && s.err == nil {
		s.err = fmt.Errorf("%w: %q: compensation timeout %s, want a positive duration", ErrInvalidSaga, s.name, d)
	}
	s.timeout = d
	return s
}

// Run runs the steps in order on v. When one fails (or ctx is done before
// a step starts), the completed steps' compensations run in reverse order
// on a context detached from ctx's cancellation and bounded by the
// compensation timeout; a compensation that fails is collected into the
// result's Unresolved and the rest still run, because stopping would leave
// more undone. Run returns a result rather than an error: a failed saga is
// an outcome the caller decides about (SagaResult.Err turns it into one).
//
// A panic in a step or a compensation is not an ordinary failure: nothing
// more is compensated and it propagates to the caller.
func (s *Saga[T]) Run(ctx context.Context, v T) *SagaResult {
	r := &SagaResult{saga: s.name}
	if s.err != nil {
		r.failure = s.err
		return r
	}
	r.completed = make([]string, 0, len(s.steps))
	for i := range s.steps {
		st := &s.steps[i]
		err := ctx.Err()
		if err == nil {
			err = st.action(ctx, v)
		}
		if err != nil {
			r.failedAt, r.failure = st.name, err
			r.unresolved = s.compensate(ctx, v, i)
			return r
		}
		r.completed = append(r.completed, st.name)
	}
	r.complete = true
	return r
}

// compensate undoes steps [0, failed) in reverse and returns those it
// could not undo.
func (s *Saga[T]) compensate(ctx context.Context, v T, failed int) []UnresolvedStep {
	if failed == 0 {
		return nil
	}
	ctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), s.timeout)
	defer cancel()
	var unresolved []UnresolvedStep
	for i := failed - 1; i >= 0; i-- {
		st := &s.steps[i]
		if st.compensate == nil {
			continue
		}
		if err := st.compensate(ctx, v); err != nil {
			unresolved = append(unresolved, UnresolvedStep{Step: st.name, Err: err})
		}
	}
	return unresolved
}
