package broker

import (
	"errors"
	"time"
)

// Outcome is what a handler decided about a message.
type Outcome int

// The outcomes a handler can return.
const (
	// OutcomeAccept: handled; the delivery is acknowledged.
	OutcomeAccept Outcome = iota
	// OutcomeRetry: try again later, through the ladder, with the attempt
	// increased, or give up when the retry policy says so.
	OutcomeRetry
	// OutcomeReject: give up now, into {queue}.dlq with the reason.
	OutcomeReject
	// OutcomeInProgress: somebody else is handling it; put it back after a
	// delay with the attempt unchanged, without asking the retry policy.
	OutcomeInProgress
)

// String is the outcome's name, as logs and spans show it.
func (o Outcome) String() string {
	switch o {
	case OutcomeAccept:
		return "accept"
	case OutcomeRetry:
		return "retry"
	case OutcomeReject:
		return "reject"
	case OutcomeInProgress:
		return "in_progress"
	default:
		return "unknown"
	}
}

// Ack is a handler's decision about one message. Build one with Accept,
// Retry, Reject or InProgress; the zero Ack is Accept.
type Ack struct {
	outcome Outcome
	err     error
	delay   time.Duration
	label   string
	note    any
}

// Accept acknowledges the message: it was handled.
func Accept() Ack { return Ack{outcome: OutcomeAccept} }

// Retry asks for another attempt later; err says why (nil reads as
// "retry requested").
func Retry(err error) Ack {
	if err == nil {
		err = errors.New("retry requested")
	}
	return Ack{outcome: OutcomeRetry, err: err}
}

// Reject gives the message up now, into {queue}.dlq with err as the reason.
func Reject(err error) Ack {
	if err == nil {
		err = errors.New("rejected")
	}
	return Ack{outcome: OutcomeReject, err: err}
}

// InProgress puts the message back on its queue after delay (the consumer's
// default, 5 s, when delay <= 0) with its attempt unchanged: it spends no
// retry and can never be dead-lettered for it.
func InProgress(delay time.Duration) Ack {
	return Ack{outcome: OutcomeInProgress, delay: delay}
}

// Outcome says what the handler decided.
func (a Ack) Outcome() Outcome { return a.outcome }

// Err is the reason given to Retry or Reject, or nil.
func (a Ack) Err() error { return a.err }

// Delay is the delay given to InProgress.
func (a Ack) Delay() time.Duration { return a.delay }

// As reports the ack under label on acemq.consume.total instead of the
// outcome's own name: how a duplicate accepted by the idempotency guard
// shows as outcome="duplicate".
func (a Ack) As(label string) Ack {
	a.label = label
	return a
}

// Label is the outcome label the ack is reported under ("" for the default).
func (a Ack) Label() string { return a.label }

// With attaches v, something of the handler's own about the delivery, to
// the ack: the consumer hands it, untouched, to the BeforeSettle function
// (in the ack that function gets) and to the settle hook
// (Settlement.Note), so that what the handler found out reaches them
// without a map keyed by the message. It changes nothing the consumer
// does.
func (a Ack) With(v any) Ack {
	a.note = v
	return a
}

// Note is what With attached, or nil.
func (a Ack) Note() any { return a.note }
