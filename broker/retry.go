package broker

import (
	"fmt"
	"time"
)

// RetryPolicy decides whether a failed message is tried again and after how
// long. Attempts counts deliveries, the first included: with Attempts 5 the
// handler runs at most five times and the fifth failure gives the message
// up into {queue}.dlq.
type RetryPolicy struct {
	// Attempts is the most deliveries a message gets; 1 means no retry.
	Attempts int
	// Initial is the delay before the second attempt.
	Initial time.Duration
	// Multiplier grows the delay per attempt (1 = constant).
	Multiplier float64
	// Max caps the delay (0 = no cap).
	Max time.Duration
	// MaxAge gives a message up once this long has passed since it first
	// entered (x-acemq-first-seen), whatever attempt it is on (0 = no limit).
	MaxAge time.Duration
}

// DefaultRetry is the policy a consumer gets when none is given: five
// attempts, one second doubling up to five minutes. It is a function so
// that nobody can change every consumer's default under them.
func DefaultRetry() RetryPolicy {
	return RetryPolicy{Attempts: 5, Initial: time.Second, Multiplier: 2, Max: 5 * time.Minute}
}

// Exponential is attempts deliveries with delays starting at initial and
// doubling, capped at five minutes.
func Exponential(attempts int, initial time.Duration) RetryPolicy {
	return RetryPolicy{Attempts: attempts, Initial: initial, Multiplier: 2, Max: 5 * time.Minute}
}

// Constant is attempts deliveries with the same delay between each.
func Constant(attempts int, delay time.Duration) RetryPolicy {
	return RetryPolicy{Attempts: attempts, Initial: delay, Multiplier: 1}
}

// NoRetry is a policy with no retries: the first failure gives up.
func NoRetry() RetryPolicy { return RetryPolicy{Attempts: 1} }

// WithMaxAge returns p giving up on messages older than age.
func (p RetryPolicy) WithMaxAge(age time.Duration) RetryPolicy {
	p.MaxAge = age
	return p
}

// WithMax returns p with its delay capped at d.
func (p RetryPolicy) WithMax(d time.Duration) RetryPolicy {
	p.Max = d
	return p
}

// Validate refuses a policy that cannot mean anything, and one whose delay
// could fall under a second without being zero: retries ride the
// scheduler ladder, whose shortest rung is one second, so such a delay
// could not be honoured (0 retries at once).
func (p RetryPolicy) Validate() error {
	switch {
	case p.Attempts < 1:
		return invalid("retry policy: attempts %d, want at least 1", p.Attempts)
	case p.Initial < 0 || p.Max < 0 || p.MaxAge < 0:
		return invalid("retry policy: negative duration")
	case p.Attempts > 1 && p.Multiplier != 0 && p.Multiplier < 1:
		return invalid("retry policy: multiplier %g, want at least 1", p.Multiplier)
	}
	for _, d := range []time.Duration{p.Initial, p.Max} {
		if d > 0 && d < ShortestRung {
			return invalid("retry policy: delay %s: retries ride the scheduler ladder, whose shortest rung is %s; use 0 (at once) or at least %s",
				d, ShortestRung, ShortestRung)
		}
	}
	return nil
}

// Retries reports whether the policy ever retries.
func (p RetryPolicy) Retries() bool { return p.Attempts > 1 }

// Delay is how long to wait after attempt failed before the next one.
func (p RetryPolicy) Delay(attempt int) time.Duration {
	d := float64(p.Initial)
	m := p.Multiplier
	if m == 0 {
		m = 1
	}
	for i := 1; i < attempt; i++ {
		d *= m
		if p.Max > 0 && d >= float64(p.Max) {
			return p.Max
		}
	}
	if p.Max > 0 && d > float64(p.Max) {
		return p.Max
	}
	return time.Duration(d)
}

// GiveUp says why a message that failed on attempt at now, first seen at
// firstSeen, is not to be tried again, or "" when it may be: what a
// consumer decides about a handler's Retry, for code that must act before
// the consumer gives the message up (a workflow step starting its
// compensation).
func (p RetryPolicy) GiveUp(attempt int, firstSeen, now time.Time) string {
	return p.giveUp(attempt, firstSeen, now)
}

// giveUp says why a message on attempt, first seen at firstSeen, should not
// be tried again, or "" when it may.
func (p RetryPolicy) giveUp(attempt int, firstSeen, now time.Time) string {
	if p.MaxAge > 0 && now.Sub(firstSeen) > p.MaxAge {
		return fmt.Sprintf("max age %s exceeded (first seen %s ago)", p.MaxAge, now.Sub(firstSeen).Round(time.Millisecond))
	}
	if attempt >= p.Attempts {
		return fmt.Sprintf("%d of %d attempts used", attempt, p.Attempts)
	}
	return ""
}

// String describes the policy for a person: "5 attempts, 1s doubling up to
// 5m0s".
func (p RetryPolicy) String() string {
	if !p.Retries() {
		return "no retry"
	}
	s := fmt.Sprintf("%d attempts, %s apart", p.Attempts, p.Initial)
	if p.Multiplier > 1 {
		s = fmt.Sprintf("%d attempts, %s doubling", p.Attempts, p.Initial)
		if p.Multiplier != 2 {
			s = fmt.Sprintf("%d attempts, %s x%g", p.Attempts, p.Initial, p.Multiplier)
		}
		if p.Max > 0 {
			s += " up to " + p.Max.String()
		}
	}
	if p.MaxAge > 0 {
		s += ", at most " + p.MaxAge.String() + " old"
	}
	return s
}

// spent says why a message should be given up before its handler is even
// called (it arrived older than the policy allows, or on an attempt beyond
// it, as a replay without restart can deliver), or "".
func (p RetryPolicy) spent(attempt int, firstSeen, now time.Time) string {
	if p.MaxAge > 0 && now.Sub(firstSeen) > p.MaxAge {
		return fmt.Sprintf("max age %s exceeded (first seen %s ago)", p.MaxAge, now.Sub(firstSeen).Round(time.Millisecond))
	}
	if attempt > p.Attempts {
		return fmt.Sprintf("arrived on attempt %d of %d", attempt, p.Attempts)
	}
	return ""
}
