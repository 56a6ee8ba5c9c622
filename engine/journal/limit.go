package journal

import (
	"context"
	"errors"
	"fmt"
	"time"
)

// ErrInvalidLimit is what a LimitStore's refusals match: a slot or a
// reservation it cannot keep (an empty or non-Text flow, step or holder, a
// key that is not Text, a limit below 1, a non-positive interval).
var ErrInvalidLimit = errors.New("invalid limit")

// Slot is one holder's claim on one of Limit places of a step's key
// (dsl.ConcurrencyKey): Flow and Step name the step, Key the runs that
// share the limit, Holder the step of one run that claims a place (the
// same for every delivery of it, so a redelivery finds its place kept).
// RunID is the holder's run, by which Unpark finds its waiters.
type Slot struct {
	Flow, Step, Key string
	Holder, RunID   string
	Limit           int
}

// Rate is one holder's turn under a step's rate limit (dsl.RateLimit):
// the step's key starts at most once per Interval.
type Rate struct {
	Flow, Step, Key string
	Holder          string
	Interval        time.Duration
}

// LimitStore is a journal that also keeps the state of steps' limits,
// which every worker must agree on. Both shipped journals implement it;
// with the Memory journal the limits hold in one process only.
//
// A holder that finds every place of its key taken is parked: the store
// keeps the message that brings it back (opaque to the store), in the
// order holders came, and hands it out when a place is free; the
// caller sends it. A handed-out message is kept until its holder comes
// back (Acquire), so that one the caller failed to send is handed out
// again (Granted): a holder may come back twice, never not at all.
type LimitStore interface {
	// Acquire gives s.Holder one of the key's s.Limit places (granted), or
	// keeps parked as waiting (not granted). A holder that has a place
	// already (a redelivery, or a waiter handed one) keeps it.
	Acquire(ctx context.Context, s Slot, parked []byte) (granted bool, err error)
	// Release frees s.Holder's place, if it has one, and hands free places
	// to the key's oldest waiters: their parked messages, to send.
	Release(ctx context.Context, s Slot) (send [][]byte, err error)
	// Granted hands out again the parked messages of waiters given a
	// place more than age ago whose holder has not come back, and hands
	// free places (a release that did not finish) to waiters: the
	// messages to send.
	Granted(ctx context.Context, age time.Duration) (send [][]byte, err error)
	// Unpark hands the parked message of each of runID's waiters without
	// a place to send (the run was cancelled: it stops at the step before
	// it takes a place), and takes the waiter out of its queue once send
	// returned nil: a message send could not send stays parked.
	Unpark(ctx context.Context, runID string, send func([]byte) error) error
	// Reserve gives r.Holder its turn under the key's rate: now, or the
	// time it may start at, kept for it so that it asks again then and
	// is let go. Turns are r.Interval apart.
	Reserve(ctx context.Context, r Rate, now time.Time) (at time.Time, err error)
}

// CheckSlot refuses, with an error matching ErrInvalidLimit, a slot no
// LimitStore can keep.
func CheckSlot(s Slot) error {
	if err := checkLimitNames(s.Flow, s.Step, s.Key, s.Holder); err != nil {
		return err
	}
	if s.Limit < 1 || !Text(s.RunID) {
		return fmt.Errorf("%w: step %s/%s: limit %d (want at least 1), run %q", ErrInvalidLimit, s.Flow, s.Step, s.Limit, s.RunID)
	}
	return nil
}

// CheckRate refuses, with an error matching ErrInvalidLimit, a turn no
// LimitStore can keep.
func CheckRate(r Rate) error {
	if err := checkLimitNames(r.Flow, r.Step, r.Key, r.Holder); err != nil {
		return err
	}
	if r.Interval <= 0 {
		return fmt.Errorf("%w: step %s/%s: interval %s, want a positive one", ErrInvalidLimit, r.Flow, r.Step, r.Interval)
	}
	return nil
}

func checkLimitNames(flow, step, key, holder string) error {
	if flow == "" || step == "" || holder == "" || !Text(flow) || !Text(step) || !Text(key) || !Text(holder) {
		return fmt.Errorf("%w: flow %q, step %q, key %q, holder %q: want non-empty text (the key may be empty)", ErrInvalidLimit, flow, step, key, holder)
	}
	return nil
}
