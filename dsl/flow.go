package dsl

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"reflect"
	"regexp"
	"slices"
	"strings"
	"time"
)

// Part is what a flow is built from: steps (Step, External), delays
// (Delay, DelayUntil), cron triggers (Cron) and the flow's own settings
// (Example, HoldForReplay, Itinerary, WithCodec, Renamed, Secret).
type Part interface{ part() }

// stepPart is a step of any payload types.
type stepPart interface {
	Part
	stepSpec() (StepSpec, error)
}

// FlowDef is a flow as built by Flow: its steps and settings, or the first
// thing wrong with them (Err). It is immutable once built and safe to
// share.
type FlowDef struct {
	name     string
	steps    []StepSpec
	example  any
	hasEx    bool
	hold     time.Duration
	deadline time.Duration
	// deadlineAtSrc is DeadlineAt's expression, deadlineAt compiled.
	deadlineAtSrc string
	deadlineAt    *Expr
	itinerary     *itinerary
	codec         Codec
	crons         []CronSpec
	cronIn        []reflect.Type
	migrations    []Migration
	adopt         *adoptPart
	// keySrc is Key's expression, key compiled (dsl/key.go).
	keySrc string
	key    *Expr
	// secrets are the paths Secret gave (dsl/secret.go).
	secrets []string
	err     error
}

// CompensateQueueInfix names the queues of a flow's compensations,
// <flow>.compensate.<step>; no step may be called "compensate".
const CompensateQueueInfix = "compensate"

var (
	flowName = regexp.MustCompile(`^[A-Za-z0-9][A-Za-z0-9._-]{0,99}$`)
	stepName = regexp.MustCompile(`^[A-Za-z0-9][A-Za-z0-9_-]{0,63}$`)
)

// Flow builds a flow called name from parts, in order, and validates it.
// A flow that cannot be built keeps its first error, which Err returns and
// engine.Register refuses; the name is letters, digits, '.', '-' and '_'.
// See the package documentation for what is checked.
func Flow(name string, parts ...Part) *FlowDef {
	f := &FlowDef{name: name}
	f.err = f.build(parts)
	return f
}

func (f *FlowDef) fail(step string, format string, args ...any) error {
	return &BuildError{Flow: f.name, Step: step, Err: fmt.Errorf(format, args...)}
}

func (f *FlowDef) build(parts []Part) error {
	if !flowName.MatchString(f.name) {
		return f.fail("", "the name %q is not letters, digits, '.', '-' and '_' (at most 100)", f.name)
	}
	var (
		delay     *delayPart
		delayStep int
		examples  []any
	)
	for _, p := range parts {
		switch p := p.(type) {
		case nil:
			return f.fail("", "a nil part after %d steps", len(f.steps))
		case stepPart:
			spec, err := p.stepSpec()
			if err != nil {
				return f.fail(spec.Name, "%w", err)
			}
			if delay != nil {
				spec.Delay, spec.delayUntilSrc = delay.d, delay.until
				delay = nil
			}
			f.steps = append(f.steps, spec)
		case *CronDef:
			if p.err != nil {
				return f.fail("", "%w", p.err)
			}
			if slices.ContainsFunc(f.crons, func(c CronSpec) bool { return c.Spec == p.spec }) {
				return f.fail("", "cron %q twice", p.spec)
			}
			f.crons = append(f.crons, CronSpec{Spec: p.spec, CatchUp: p.catchUp, sched: p.sched, payload: p.payload})
			f.cronIn = append(f.cronIn, p.in)
		case *delayPart:
			if delay != nil {
				return f.fail("", "two delays in a row after %s", f.lastStep())
			}
			if p.err != nil {
				return f.fail("", "delay after %s: %w", f.lastStep(), p.err)
			}
			delay, delayStep = p, len(f.steps)
		case *migrationPart:
			if p.err != nil {
				return f.fail("", "%w", p.err)
			}
			f.migrations = append(f.migrations, p.m)
		case *adoptPart:
			if f.adopt != nil {
				return f.fail("", "Adopt twice")
			}
			f.adopt = p
		case *keyPart:
			if err := f.setKey(p); err != nil {
				return f.fail("", "%w", err)
			}
		case *settingPart:
			if p.err != nil {
				return f.fail("", "%w", p.err)
			}
			p.apply(f)
			if p.example {
				examples = append(examples, f.example)
			}
		default:
			return f.fail("", "unknown part %T", p)
		}
	}
	if delay != nil {
		return f.fail("", "a delay after %s with nothing after it", stepAt(f.steps, delayStep-1))
	}
	if len(f.steps) == 0 {
		return f.fail("", "no steps")
	}
	if len(examples) > 1 {
		return f.fail("", "two examples")
	}
	if f.codec == nil {
		f.codec = jsonCodec{}
	}
	return f.check()
}

func (f *FlowDef) lastStep() string { return stepAt(f.steps, len(f.steps)-1) }

func stepAt(steps []StepSpec, i int) string {
	if i < 0 {
		return "the start"
	}
	return fmt.Sprintf("step %q", steps[i].Name)
}

// check validates the steps as a whole: names, types along the chain,
// expressions and what an External step, an itinerary or a fork rules out.
func (f *FlowDef) check() error {
	if f.steps[0].External && f.itinerary == nil {
		return f.fail(f.steps[0].Name, "the first step cannot be External: a run starts in this flow")
	}
	var seen []string
	for _, s := range f.all() {
		switch {
		case !stepName.MatchString(s.Name):
			return f.fail(s.Name, "the name is not letters, digits, '-' and '_' (at most 64)")
		case s.Name == CompensateQueueInfix:
			return f.fail(s.Name, "%q is reserved for the flow's compensation queues", CompensateQueueInfix)
		case slices.Contains(seen, s.Name):
			return f.fail(s.Name, "named twice")
		}
		seen = append(seen, s.Name)
	}
	for _, s := range f.steps {
		if s.Fork == nil {
			continue
		}
		if f.itinerary != nil {
			return f.fail(s.Name, "a Parallel or ForEach in a flow with an Itinerary: a routing slip has no branches")
		}
		for _, b := range s.Fork.Branches {
			for _, bs := range b {
				if bs.Wait != nil {
					return f.fail(bs.Name, "a WaitFor on a branch of %q: a signal is addressed to a run, not to one of its branches", s.Name)
				}
			}
		}
	}
	for _, s := range f.steps {
		if s.Wait != nil && f.itinerary != nil {
			return f.fail(s.Name, "a WaitFor in a flow with an Itinerary: a routing slip may pass it any number of times")
		}
	}
	if f.itinerary != nil {
		for _, s := range f.steps {
			if s.whenSrc != "" || s.Delay > 0 || s.delayUntilSrc != "" {
				return f.fail(s.Name, "a When or a delay in a flow with an Itinerary: the itinerary decides each run's route")
			}
			if !s.External && (!fits(f.itinerary.in, s.In) || !fits(s.Out, f.itinerary.in)) {
				return f.fail(s.Name, "takes %s and returns %s; every step of an itinerary flow takes and returns %s, since a run may visit them in any order",
					s.In, s.Out, f.itinerary.in)
			}
		}
	}
	if err := f.checkSequence(f.steps, nil, f.itinerary == nil); err != nil {
		return err
	}
	for _, s := range f.steps {
		if s.Fork == nil {
			continue
		}
		for _, branch := range s.Fork.Branches {
			if err := f.checkSequence(branch, s.In, true); err != nil {
				return err
			}
		}
	}
	if f.deadlineAtSrc != "" {
		if f.deadline > 0 {
			return f.fail("", "both Deadline and DeadlineAt: a run has one deadline")
		}
		var err error
		if f.deadlineAt, err = compileExpr(f.deadlineAtSrc, f.Input(), exprTime); err != nil {
			return f.fail("", "DeadlineAt %w", err)
		}
	}
	if err := f.compileKey(); err != nil {
		return err
	}
	if f.hasEx {
		if in := f.Input(); in != nil && f.example != nil && !reflect.TypeOf(f.example).AssignableTo(in) {
			return f.fail("", "the example is a %T, but the flow takes %s", f.example, in)
		}
	}
	for i, c := range f.crons {
		if in := f.Input(); !fits(f.cronIn[i], in) {
			return f.fail("", "cron %q gives a %s, but the flow takes %s", c.Spec, f.cronIn[i], in)
		}
	}
	return f.checkMigrations()
}

// all is every step of the flow: its own, and those of its forks'
// branches.
func (f *FlowDef) all() []StepSpec {
	var out []StepSpec
	for _, s := range f.steps {
		out = append(out, s)
		if s.Fork != nil {
			for _, b := range s.Fork.Branches {
				out = append(out, b...)
			}
		}
	}
	return out
}

// checkSequence checks steps that run one after the other (the flow's, or
// a branch's, given in, what reached the branch): what an External step
// before a step rules out, the expressions, and, when chain, that each
// step takes what the one before it returns.
func (f *FlowDef) checkSequence(steps []StepSpec, in reflect.Type, chain bool) error {
	for i := range steps {
		s := &steps[i]
		if i > 0 && steps[i-1].External && (s.whenSrc != "" || s.Delay > 0 || s.delayUntilSrc != "") {
			return f.fail(s.Name, "a When or a delay after External step %q: the other service makes that hop and knows nothing of them", steps[i-1].Name)
		}
		prev := in
		if i > 0 {
			prev = steps[i-1].Out
		}
		if err := f.compile(s, prev, i > 0 && !steps[i-1].External); err != nil {
			return err
		}
	}
	if chain {
		return f.checkChain(steps)
	}
	return nil
}

// checkChain checks that each step takes what the one before it returns.
func (f *FlowDef) checkChain(steps []StepSpec) error {
	var prev reflect.Type
	for i, s := range steps {
		if s.When != nil && !fits(s.Out, s.In) {
			return f.fail(s.Name, "has a When but returns %s for a %s: a skipped step passes its payload on unchanged, so it must return what it takes", s.Out, s.In)
		}
		if i > 0 && !steps[i-1].External && !s.External && !fits(prev, s.In) {
			return f.fail(s.Name, "takes %s, but step %q before it returns %s", s.In, steps[i-1].Name, prev)
		}
		prev = s.Out
	}
	return nil
}

// compile compiles a step's expressions against the payload it takes:
// prev, what the step before it returns, for a step another service serves
// after one of this flow's (known says prev is that).
func (f *FlowDef) compile(s *StepSpec, prev reflect.Type, known bool) error {
	in := s.In
	if s.External && known && prev != nil {
		in = prev
	}
	var err error
	if s.whenSrc != "" {
		if s.When, err = compileExpr(s.whenSrc, in, exprBool); err != nil {
			return f.fail(s.Name, "When %w", err)
		}
	}
	if s.delayUntilSrc != "" {
		if s.DelayUntil, err = compileExpr(s.delayUntilSrc, in, exprTime); err != nil {
			return f.fail(s.Name, "DelayUntil before it: %w", err)
		}
	}
	if s.orderSrc != "" {
		if s.OrderKey, err = compileExpr(s.orderSrc, in, exprString); err != nil {
			return f.fail(s.Name, "OrderedBy %w", err)
		}
	}
	return f.compileLimits(s, in)
}

// fits reports whether a payload of type from can be read as to: the same
// type, or either side untyped (an interface, json.RawMessage).
func fits(from, to reflect.Type) bool {
	if from == to {
		return true
	}
	raw := reflect.TypeFor[json.RawMessage]()
	return from.Kind() == reflect.Interface || to.Kind() == reflect.Interface || from == raw || to == raw
}

// Err is why the flow cannot be built (a *BuildError matching
// ErrInvalidFlow), or nil.
func (f *FlowDef) Err() error { return f.err }

// Name is the flow's name: its exchange, and the prefix of its queues.
func (f *FlowDef) Name() string { return f.name }

// Steps is the flow's steps in order (a copy).
func (f *FlowDef) Steps() []StepSpec { return slices.Clone(f.steps) }

// Input is the type a run of the flow starts with: what its first step
// (or its itinerary) takes. Nil for a flow that was not built.
func (f *FlowDef) Input() reflect.Type {
	switch {
	case f.itinerary != nil:
		return f.itinerary.in
	case len(f.steps) > 0:
		return f.steps[0].In
	}
	return nil
}

// Example is the payload set with Example, for a person starting a run by
// hand, and whether there is one.
func (f *FlowDef) Example() (any, bool) { return f.example, f.hasEx }

// HoldForReplay is how long a failed run waits for a replay before it is
// compensated (0: compensated at once).
func (f *FlowDef) HoldForReplay() time.Duration { return f.hold }

// Deadline is how long after its start a run is stopped (0: never).
func (f *FlowDef) Deadline() time.Duration { return f.deadline }

// DeadlineAt is DeadlineAt's expression, compiled against the flow's
// input (nil when the flow has none).
func (f *FlowDef) DeadlineAt() *Expr { return f.deadlineAt }

// Codec is the flow's payload codec (JSON unless WithCodec said otherwise).
func (f *FlowDef) Codec() Codec { return f.codec }

// HasItinerary reports whether each run's route is chosen when it starts
// (Itinerary) rather than fixed.
func (f *FlowDef) HasItinerary() bool { return f.itinerary != nil }

// Route is the steps a run with input in visits, in order: the
// itinerary's choice for an itinerary flow, which must name steps of the
// flow; every step for a fixed one.
func (f *FlowDef) Route(ctx context.Context, decode func(any) error) ([]string, error) {
	if f.itinerary == nil {
		names := make([]string, len(f.steps))
		for i, s := range f.steps {
			names[i] = s.Name
		}
		return names, nil
	}
	route, err := f.itinerary.fn(ctx, decode)
	if err != nil {
		return nil, err
	}
	if len(route) == 0 {
		return nil, fmt.Errorf("flow %q: the itinerary chose no steps", f.name)
	}
	for _, name := range route {
		if !slices.ContainsFunc(f.steps, func(s StepSpec) bool { return s.Name == name }) {
			return nil, fmt.Errorf("flow %q: the itinerary chose %q, which is not one of its steps", f.name, name)
		}
	}
	return route, nil
}

// delayPart holds the hop into the next step back.
type delayPart struct {
	d     time.Duration
	until string
	err   error
}

func (*delayPart) part() {}

// Delay holds every run d on the scheduler ladder before the step that
// follows it: the run shows as waiting until then. d must be at least a
// second, the ladder's accuracy.
func Delay(d time.Duration) Part {
	if d < time.Second {
		return &delayPart{err: fmt.Errorf("delay %s, want at least 1s (the scheduler ladder's shortest rung)", d)}
	}
	return &delayPart{d: d}
}

// DelayUntil holds each run until the time expr gives on the payload
// going into the next step (a time.Time field, or an RFC 3339 string:
// payload.ship_at). A time already past does not hold the run at all.
func DelayUntil(expr string) Part {
	if expr == "" {
		return &delayPart{err: errors.New("DelayUntil with no expression")}
	}
	return &delayPart{until: expr}
}

// settingPart sets something of the flow as a whole.
type settingPart struct {
	apply   func(*FlowDef)
	example bool
	err     error
}

func (*settingPart) part() {}

// Example sets a payload of the flow's input type that shows a person how
// to start a run (acemq-flow flows show prints it). Every shipped flow has
// one.
func Example(v any) Part {
	return &settingPart{example: true, apply: func(f *FlowDef) { f.example, f.hasEx = v, true }}
}

// HoldForReplay keeps a failed run that has compensations waiting as
// failed for d (a timer on the ladder, no polling) before compensating it,
// so that an operator can replay it instead: a replayed run is not
// compensated. Without it a failed run compensates at once.
func HoldForReplay(d time.Duration) Part {
	if d < time.Second {
		return &settingPart{err: fmt.Errorf("HoldForReplay %s, want at least 1s", d)}
	}
	return &settingPart{apply: func(f *FlowDef) { f.hold = d }}
}

// Deadline stops a run that has not ended d after its start, as a cancel
// does (engine.CancelRun): no further step starts, what it completed is
// compensated, and it ends cancelled, its timeline saying "deadline". Its
// timer rides the scheduler ladder, so it survives restarts of every
// worker. d must be at least 1s.
func Deadline(d time.Duration) Part {
	if d < time.Second {
		return &settingPart{err: fmt.Errorf("Deadline %s, want at least 1s (the scheduler ladder's shortest rung)", d)}
	}
	return &settingPart{apply: func(f *FlowDef) { f.deadline = d }}
}

// DeadlineAt is Deadline with the time taken from the run's input by an
// expr-lang expression (a time.Time field, or an RFC 3339 string:
// payload.respond_by); a time already past stops the run as soon as it
// starts. A flow has Deadline or DeadlineAt, not both.
func DeadlineAt(expr string) Part {
	if strings.TrimSpace(expr) == "" {
		return &settingPart{err: errors.New("DeadlineAt with no expression")}
	}
	return &settingPart{apply: func(f *FlowDef) { f.deadlineAtSrc = expr }}
}

// WithCodec sets the codec the flow's payloads travel in (default JSON).
// Expressions read payloads through their JSON form whatever the codec.
func WithCodec(c Codec) Part {
	if c == nil {
		return &settingPart{err: errors.New("nil codec")}
	}
	return &settingPart{apply: func(f *FlowDef) { f.codec = c }}
}

type itinerary struct {
	in reflect.Type
	fn func(ctx context.Context, decode func(any) error) ([]string, error)
}

// Itinerary makes the flow's route a per-run choice: when a run starts, fn
// gets its input and names the steps it visits, in order, from the flow's
// steps. The run then travels as a routing slip (acemq-routing-slip).
// Every step of such a flow takes and returns In, and none has a When or
// a delay: the itinerary decides.
func Itinerary[In any](fn func(context.Context, In) ([]string, error)) Part {
	if fn == nil {
		return &settingPart{err: errors.New("nil itinerary")}
	}
	it := &itinerary{in: reflect.TypeFor[In](), fn: func(ctx context.Context, decode func(any) error) ([]string, error) {
		var in In
		if err := decode(&in); err != nil {
			return nil, err
		}
		return fn(ctx, in)
	}}
	return &settingPart{apply: func(f *FlowDef) { f.itinerary = it }}
}

// jsonCodec is the default codec, encoding/json as application/json (the
// same bytes and content type as broker.JSON). Check lets a consumer tell a
// body that is not JSON at all before any step sees it (broker.Checker), so
// that it is parked at once rather than retried: no retry makes it JSON.
type jsonCodec struct{}

func (jsonCodec) ContentType() string          { return "application/json" }
func (jsonCodec) Encode(v any) ([]byte, error) { return json.Marshal(v) }
func (jsonCodec) Decode(b []byte, v any) error { return json.Unmarshal(b, v) }

func (jsonCodec) Check(b []byte) error {
	if !json.Valid(b) {
		return fmt.Errorf("body is not valid JSON (%d bytes)", len(b))
	}
	return nil
}
