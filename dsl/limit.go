package dsl

import (
	"errors"
	"fmt"
	"reflect"
	"time"
)

// LimitSpec is a step's per-key concurrency limit (ConcurrencyKey): at
// most N runs with the same key are in the step at once, across every
// worker.
type LimitSpec struct {
	// Key works the key out of the step's payload.
	Key *Expr
	// N is how many runs of one key may be in the step at once.
	N int

	src string
}

// RateSpec is a step's rate limit (RateLimit, RateLimitBy): the step
// starts at most N times per Per, across every worker, for each key (or
// for the step as a whole when Key is nil).
type RateSpec struct {
	// Key works the key out of the step's payload; nil for one limit for
	// every run.
	Key *Expr
	// N starts per Per.
	N   int
	Per time.Duration

	src string
}

// Interval is how far apart the limit spaces the step's starts: Per/N.
func (r *RateSpec) Interval() time.Duration { return r.Per / time.Duration(r.N) }

// MinRateInterval is the shortest Per/N a RateLimit may space its starts:
// a start is one step delivery, and a limit finer than this would wait on
// the clock more than it limits.
const MinRateInterval = time.Millisecond

// ConcurrencyKey lets at most n runs whose payload gives the same key
// (key, an expr-lang expression over the payload: payload.tenant) be in
// the step at once, across every worker of the flow. A run over the
// limit waits, without holding a worker or the runs of other keys, until
// a run of its key leaves the step, and its timeline says so; runs of a
// key go in the order they came. The state lives in the engine's journal
// (PostgreSQL's, shared by every worker; the Memory journal's, for one
// process). n must be at least 1; a step another service serves, a fork,
// a Child or a WaitFor cannot have one.
func (s *StepDef[In, Out]) ConcurrencyKey(key string, n int) *StepDef[In, Out] {
	switch {
	case key == "":
		s.errs = append(s.errs, errors.New("ConcurrencyKey with no key expression"))
	case n < 1:
		s.errs = append(s.errs, fmt.Errorf("ConcurrencyKey(%q, %d), want a limit of at least 1", key, n))
	default:
		s.spec.Limit = &LimitSpec{N: n, src: key}
	}
	return s
}

// RateLimit lets the step start at most n times per interval per, across
// every worker of the flow: starts are spaced per/n apart, so no window
// of length per holds more than n. A run over the limit waits on the
// scheduler ladder (not holding a worker) until its turn, and its
// timeline says until when. n must be at least 1 and per/n at least
// MinRateInterval; a step another service serves, a fork, a Child or a
// WaitFor cannot have one.
func (s *StepDef[In, Out]) RateLimit(n int, per time.Duration) *StepDef[In, Out] {
	return s.rate("", n, per)
}

// RateLimitBy is RateLimit for each key apart: key is an expr-lang
// expression over the payload (payload.partner), and runs of one key do
// not wait for those of another.
func (s *StepDef[In, Out]) RateLimitBy(key string, n int, per time.Duration) *StepDef[In, Out] {
	if key == "" {
		s.errs = append(s.errs, errors.New("RateLimitBy with no key expression"))
		return s
	}
	return s.rate(key, n, per)
}

func (s *StepDef[In, Out]) rate(key string, n int, per time.Duration) *StepDef[In, Out] {
	if n < 1 || per <= 0 || per/time.Duration(n) < MinRateInterval {
		s.errs = append(s.errs, fmt.Errorf("rate limit of %d per %s, want at least 1 start per a positive interval, at most one per %s", n, per, MinRateInterval))
		return s
	}
	s.spec.Rate = &RateSpec{N: n, Per: per, src: key}
	return s
}

// compileLimits refuses limits on steps that are not a function of this
// flow's and compiles their keys against in, the payload the step takes.
func (f *FlowDef) compileLimits(s *StepSpec, in reflect.Type) error {
	if s.Limit == nil && s.Rate == nil {
		return nil
	}
	switch {
	case s.External:
		return f.fail(s.Name, "a ConcurrencyKey or RateLimit on an External step: another service runs it")
	case s.Child != nil:
		return f.fail(s.Name, "a ConcurrencyKey or RateLimit on a Child step: limit the child flow's steps")
	case s.Wait != nil:
		return f.fail(s.Name, "a ConcurrencyKey or RateLimit on a WaitFor: a wait runs nothing")
	}
	var err error
	if l := s.Limit; l != nil {
		c := *l
		if c.Key, err = compileExpr(c.src, in, exprString); err != nil {
			return f.fail(s.Name, "ConcurrencyKey %w", err)
		}
		s.Limit = &c
	}
	if r := s.Rate; r != nil && r.src != "" {
		c := *r
		if c.Key, err = compileExpr(c.src, in, exprString); err != nil {
			return f.fail(s.Name, "RateLimitBy %w", err)
		}
		s.Rate = &c
	}
	return nil
}
