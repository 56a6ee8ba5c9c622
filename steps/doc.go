// Package steps holds reusable building blocks for the steps of a flow.
//
// # An in-process saga as one step
//
// [Saga] runs a saga of package patterns (patterns.NewSaga) as a single
// flow step: its parts run in order inside one delivery, and if one fails
// the parts before it are undone in reverse, in the same process, before
// the step returns.
//
//	dsl.Step("reserve", steps.Saga("reserve",
//		steps.Do("reserve-stock", reserveStock).Undo(releaseStock),
//		steps.Do("book-courier", bookCourier)))
//
// Every part takes the step's payload and returns it, changed or not, for
// the part after it: the step returns what the last part returned. Each
// Undo gets what its own part returned, so it knows what it is undoing
// (the reservation id the part filled in).
//
// What the step returns to the engine follows from how the saga ended:
//
//   - complete: the last part's value, and the run goes on;
//   - failed and compensated: the failure, so the step's retry policy
//     tries the whole saga again, which is safe because everything it did
//     was undone. The error wraps the *patterns.SagaError (errors.As finds
//     it, and through it the part's own error) and its text ends with what
//     was undone, so the run's journal shows it. A part that returned
//     broker.Fatal(err) is seen through it, and the step is given up at
//     once;
//   - failed with compensations that failed too: the step is given up at
//     once (broker.Fatal) with the *patterns.SagaError, whose Unresolved
//     names what could not be undone, since retrying would do the effects
//     again on top of the ones left behind;
//   - built wrongly (no parts, a nil function): given up at once with an
//     error matching patterns.ErrInvalidSaga.
//
// A saga step is no more durable than patterns.Saga: a crash in the middle
// leaves it half applied, and the step's redelivery runs it again from
// its first part. Parts should therefore be idempotent, as every step is.
// The engine's own compensation (dsl's Compensate) is what undoes a
// completed saga step when a later step is given up.
package steps
