package dsl

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"reflect"
	"time"
)

// RetryPolicy is how often and how far apart a step (or its compensation)
// is tried; broker.RetryPolicy is one (broker.Exponential(5, time.Second)).
// Validate refuses a policy that cannot be honoured.
type RetryPolicy interface {
	Validate() error
	String() string
}

// Codec turns payloads into bytes and back; every broker codec is one.
type Codec interface {
	ContentType() string
	Encode(v any) ([]byte, error)
	Decode(data []byte, v any) error
}

// StepDef is a step being described: its function, and the knobs set by
// its methods, each of which returns the step so that calls chain. A knob
// given a value it cannot use is remembered and reported when the flow is
// built. In and Out are the payload types the step takes and returns.
type StepDef[In, Out any] struct {
	spec StepSpec
	fn   func(context.Context, In) (Out, error)
	comp func(context.Context, Out) error
	errs []error
}

// Step describes a step called name that runs fn: fn gets the payload the
// step before produced (or the run's input, for the first step) and
// returns the next step's payload, or End as its error to end the run
// there, or an error to be retried by the step's policy (one wrapped with
// broker.Fatal is given up at once). A step name is letters, digits, '-'
// and '_'.
func Step[In, Out any](name string, fn func(context.Context, In) (Out, error)) *StepDef[In, Out] {
	s := &StepDef[In, Out]{fn: fn}
	s.spec.Name = name
	s.spec.In = reflect.TypeFor[In]()
	s.spec.Out = reflect.TypeFor[Out]()
	if fn == nil {
		s.errs = append(s.errs, errors.New("no function"))
	}
	return s
}

// External describes a step that another service serves: it consumes
// <flow>.<name> and passes the run on as any AceMQ follower does
// (x-acemq-route, the position advanced). The engine declares its queue
// and sends runs to it, and never consumes it. The step after an External
// step cannot have a When or a delay before it, since the other service
// makes that hop; When and Compensate on an External step are build
// errors.
func External(name string) *StepDef[json.RawMessage, json.RawMessage] {
	s := &StepDef[json.RawMessage, json.RawMessage]{}
	s.spec.Name = name
	s.spec.External = true
	s.spec.In = reflect.TypeFor[json.RawMessage]()
	s.spec.Out = s.spec.In
	return s
}

// Compensate sets how the step is undone once it has completed, should a
// later step be given up: fn gets what the step returned. Compensations
// run in reverse order as messages of their own, with their own retries
// (CompensateRetry), so any worker can run them and a restart does not
// forget them.
func (s *StepDef[In, Out]) Compensate(fn func(context.Context, Out) error) *StepDef[In, Out] {
	switch {
	case s.spec.External:
		s.errs = append(s.errs, errors.New("an External step cannot be compensated here: the service that serves it owns its undoing"))
	case fn == nil:
		s.errs = append(s.errs, errors.New("nil compensation"))
	default:
		s.comp = fn
		s.spec.Compensable = true
	}
	return s
}

// Retry sets the step's retry policy (default: the worker's).
func (s *StepDef[In, Out]) Retry(p RetryPolicy) *StepDef[In, Out] {
	if s.check(p) {
		s.spec.Retry = p
	}
	return s
}

// CompensateRetry sets the retry policy of the step's compensation
// (default: the step's own).
func (s *StepDef[In, Out]) CompensateRetry(p RetryPolicy) *StepDef[In, Out] {
	if s.check(p) {
		s.spec.CompensateRetry = p
	}
	return s
}

func (s *StepDef[In, Out]) check(p RetryPolicy) bool {
	if p == nil {
		s.errs = append(s.errs, errors.New("nil retry policy"))
		return false
	}
	if err := p.Validate(); err != nil {
		s.errs = append(s.errs, err)
		return false
	}
	return true
}

// Timeout bounds each run of the step: its context is cancelled after d,
// and a step that overran is retried whatever it returned (its work may or
// may not have happened, and only a retry of an idempotent step can make
// that right). d must be positive.
func (s *StepDef[In, Out]) Timeout(d time.Duration) *StepDef[In, Out] {
	if d <= 0 {
		s.errs = append(s.errs, fmt.Errorf("timeout %s, want a positive duration", d))
		return s
	}
	s.spec.Timeout = d
	return s
}

// When runs the step only for runs whose payload makes cond true; the
// others skip it (recorded as skipped) and go straight on. cond is an
// expr-lang expression over payload, checked when the flow is built. A
// step with When must return the type it takes, since a skipped step
// passes its payload on unchanged.
func (s *StepDef[In, Out]) When(cond string) *StepDef[In, Out] {
	if s.spec.External {
		s.errs = append(s.errs, errors.New("When on an External step: the other service, not this flow, decides whether it runs"))
		return s
	}
	s.spec.whenSrc = cond
	return s
}

// Transactional runs the step, and its compensation, in a database
// transaction that also records that it ran: whatever the step writes
// through the transaction (persistence.Tx(ctx) reads it) commits together
// with that record or not at all. A worker killed at any instant then
// applies the step's writes exactly once: before the commit nothing
// happened and the step runs again; after it, a redelivery passes on what
// was committed. Effects outside that database (an HTTP call, an email)
// are still at least once. The engine refuses the flow unless its
// idempotency store can run transactions (persistence.SQLIdempotencyStore).
// An External step cannot be Transactional: it runs elsewhere.
func (s *StepDef[In, Out]) Transactional() *StepDef[In, Out] {
	if s.spec.External {
		s.errs = append(s.errs, errors.New("Transactional on an External step: it runs in another service, outside this flow's transactions"))
		return s
	}
	s.spec.Transactional = true
	return s
}

// OrderedBy handles the step's messages with the same key one at a time, in
// queue order, at any concurrency: key is an expr-lang expression over the
// payload (payload.customer_id).
func (s *StepDef[In, Out]) OrderedBy(key string) *StepDef[In, Out] {
	s.spec.orderSrc = key
	return s
}

// OrderedByHeader is OrderedBy with the key taken from an application
// header of the message.
func (s *StepDef[In, Out]) OrderedByHeader(name string) *StepDef[In, Out] {
	if name == "" {
		s.errs = append(s.errs, errors.New("OrderedByHeader with no header name"))
		return s
	}
	s.spec.OrderHeader = name
	return s
}

// Concurrency sets how many runs the step, and its compensation, works on
// at once in one worker (default 8): how many calls of its function run
// at once. Keeping what a call returned and sending the run on happen
// after it, and do not count: at most the step's Prefetch deliveries are
// in the worker at once. n must be at least 1.
func (s *StepDef[In, Out]) Concurrency(n int) *StepDef[In, Out] {
	if n < 1 {
		s.errs = append(s.errs, fmt.Errorf("concurrency %d, want at least 1", n))
		return s
	}
	s.spec.Concurrency = n
	return s
}

// Prefetch sets how many of the step's messages (and of its
// compensation's) the broker hands a worker ahead of its handlers
// (default 20). n must be at least 1.
func (s *StepDef[In, Out]) Prefetch(n int) *StepDef[In, Out] {
	if n < 1 {
		s.errs = append(s.errs, fmt.Errorf("prefetch %d, want at least 1", n))
		return s
	}
	s.spec.Prefetch = n
	return s
}

// stepSpec finishes the step's description for a flow: the typed
// functions wrapped for the engine, and its own errors.
func (s *StepDef[In, Out]) stepSpec() (StepSpec, error) {
	spec := s.spec
	if len(s.errs) > 0 {
		return spec, s.errs[0]
	}
	if comp := s.comp; comp != nil {
		spec.compensate = func(ctx context.Context, decode func(any) error) error {
			var out Out
			if err := decode(&out); err != nil {
				return err
			}
			return comp(ctx, out)
		}
	}
	// The engine runs a Child step's child, and another service an
	// External step.
	if fn := s.fn; fn != nil && spec.Child == nil && !spec.External {
		spec.run = func(ctx context.Context, decode func(any) error) (any, error) {
			var in In
			if err := decode(&in); err != nil {
				return nil, err
			}
			return fn(ctx, in)
		}
	}
	return spec, nil
}

func (s *StepDef[In, Out]) part() {}

// StepSpec is a step as the engine reads it, once its flow is built.
type StepSpec struct {
	// Name is the step's name; its queue is <flow>.<name>.
	Name string
	// External is a step another service serves.
	External bool
	// In and Out are the payload types (json.RawMessage for an External
	// step).
	In, Out reflect.Type
	// When is the step's condition, nil when it always runs.
	When *Expr
	// Delay and DelayUntil hold the hop into the step back: a fixed time,
	// or a time taken from the payload. Zero and nil when it is not held.
	Delay      time.Duration
	DelayUntil *Expr
	// Retry and CompensateRetry are the policies set, nil for the default.
	Retry, CompensateRetry RetryPolicy
	// Timeout bounds one run of the step (0 = none).
	Timeout time.Duration
	// OrderKey or OrderHeader order the step's messages by key.
	OrderKey    *Expr
	OrderHeader string
	// Concurrency and Prefetch are 0 for the engine's defaults.
	Concurrency, Prefetch int
	// Compensable says the step has a compensation.
	Compensable bool
	// Transactional runs the step and its compensation in a database
	// transaction with the record that they ran (see StepDef.Transactional).
	Transactional bool
	// Fork is set for a Parallel or a ForEach: its branches and its join.
	// Its In is what reaches it, its Out what its join returns.
	Fork *ForkSpec
	// Child is set for a Child step: the flow it starts a run of.
	Child *ChildSpec
	// Wait is set for a WaitFor step: the signal it waits for.
	Wait *WaitSpec
	// Limit is the step's per-key concurrency limit (ConcurrencyKey), Rate
	// its rate limit (RateLimit, RateLimitBy); nil when it has none.
	Limit *LimitSpec
	Rate  *RateSpec

	whenSrc, orderSrc, delayUntilSrc string
	run                              func(ctx context.Context, decode func(any) error) (any, error)
	compensate                       func(ctx context.Context, decode func(any) error) error
}

// Run decodes the step's input with decode and runs the step on it.
// Calling it on an External step is an error.
func (s StepSpec) Run(ctx context.Context, decode func(any) error) (any, error) {
	if s.run == nil {
		return nil, fmt.Errorf("step %q is served by another service", s.Name)
	}
	return s.run(ctx, decode)
}

// Compensate decodes what the step returned with decode and undoes the
// step. Calling it on a step with no compensation is an error.
func (s StepSpec) Compensate(ctx context.Context, decode func(any) error) error {
	if s.compensate == nil {
		return fmt.Errorf("step %q has no compensation", s.Name)
	}
	return s.compensate(ctx, decode)
}
