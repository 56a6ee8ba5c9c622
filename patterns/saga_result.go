package patterns

import (
	"fmt"
	"slices"
	"strings"
)

// UnresolvedStep is a completed step whose compensation failed: a
// real-world effect that happened, was meant to be undone, and was not.
type UnresolvedStep struct {
	Step string
	Err  error
}

// SagaResult is what a saga run did. It describes something that has
// already happened, so it cannot be changed: every accessor returns a
// copy.
type SagaResult struct {
	saga       string
	complete   bool
	failedAt   string
	failure    error
	completed  []string
	unresolved []UnresolvedStep
}

// Saga is the name of the saga that ran.
func (r *SagaResult) Saga() string { return r.saga }

// Complete reports whether every step ran.
func (r *SagaResult) Complete() bool { return r.complete }

// Compensated reports whether a step failed and every earlier step with a
// compensation was undone.
func (r *SagaResult) Compensated() bool {
	return !r.complete && r.failedAt != "" && len(r.unresolved) == 0
}

// FailedAt is the step that failed ("" when the saga completed, or was
// invalid and ran nothing).
func (r *SagaResult) FailedAt() string { return r.failedAt }

// Failure is what the failing step returned (an error matching
// ErrInvalidSaga for a saga built wrongly), or nil.
func (r *SagaResult) Failure() error { return r.failure }

// Completed is the steps that ran to completion, in order.
func (r *SagaResult) Completed() []string { return slices.Clone(r.completed) }

// Unresolved is the steps whose compensation failed, in the order they
// were compensated (the reverse of the order they ran).
func (r *SagaResult) Unresolved() []UnresolvedStep { return slices.Clone(r.unresolved) }

// HasUnresolved is the flag to alert on: no retry resolves these, a
// person has to.
func (r *SagaResult) HasUnresolved() bool { return len(r.unresolved) > 0 }

// Err is nil for a complete saga and a *SagaError otherwise, for a caller
// that wants the failure as an error.
func (r *SagaResult) Err() error {
	if r.complete {
		return nil
	}
	return &SagaError{Saga: r.saga, Step: r.failedAt, Err: r.failure, Unresolved: r.Unresolved()}
}

// String summarises the run for a log line.
func (r *SagaResult) String() string {
	switch {
	case r.complete:
		return fmt.Sprintf("saga %s: complete (%s)", r.saga, strings.Join(r.completed, ", "))
	case r.failedAt == "":
		return fmt.Sprintf("saga %s: not run: %v", r.saga, r.failure)
	case len(r.unresolved) == 0:
		return fmt.Sprintf("saga %s: failed at %s and compensated: %v", r.saga, r.failedAt, r.failure)
	default:
		names := make([]string, len(r.unresolved))
		for i, u := range r.unresolved {
			names[i] = u.Step
		}
		return fmt.Sprintf("saga %s: failed at %s, unresolved: %s: %v", r.saga, r.failedAt, strings.Join(names, ", "), r.failure)
	}
}

// SagaError is a saga run that did not complete: where it failed, why,
// and what could not be undone. It unwraps to the step's failure.
type SagaError struct {
	Saga       string
	Step       string
	Err        error
	Unresolved []UnresolvedStep
}

// Error says which saga failed at which step, and what was left unresolved.
func (e *SagaError) Error() string {
	msg := fmt.Sprintf("saga %s failed at %q: %v", e.Saga, e.Step, e.Err)
	if len(e.Unresolved) > 0 {
		msg += fmt.Sprintf(" (%d compensation(s) failed)", len(e.Unresolved))
	}
	return msg
}

// Unwrap is the step's failure.
func (e *SagaError) Unwrap() error { return e.Err }
