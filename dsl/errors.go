package dsl

import (
	"errors"
	"fmt"
)

// ErrInvalidFlow is what every build error matches: a flow built wrongly.
var ErrInvalidFlow = errors.New("invalid flow")

// End is what a step returns as its error to end its run there, well: the
// run is recorded ended (not failed), nothing is published, and no
// compensation runs.
//
//	func route(ctx context.Context, o Order) (Order, error) {
//		if o.Digital {
//			return o, dsl.End
//		}
//		return o, nil
//	}
var End = errors.New("the run ends here")

// BuildError is a flow that cannot be built: which flow, which step ("" for
// the flow as a whole), and what is wrong. It matches ErrInvalidFlow.
type BuildError struct {
	Flow string
	Step string
	Err  error
}

// Error names the flow and the step, then says what is wrong.
func (e *BuildError) Error() string {
	if e.Step == "" {
		return fmt.Sprintf("flow %q: %v", e.Flow, e.Err)
	}
	return fmt.Sprintf("flow %q: step %q: %v", e.Flow, e.Step, e.Err)
}

// Unwrap is what is wrong.
func (e *BuildError) Unwrap() error { return e.Err }

// Is makes a BuildError match ErrInvalidFlow.
func (e *BuildError) Is(target error) bool { return target == ErrInvalidFlow }

// ErrStepRemoved is the reason a run fails at a step its flow says was
// removed without a destination (Removed(old)).
var ErrStepRemoved = errors.New("the step was removed from the flow (dsl.Removed)")
