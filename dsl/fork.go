package dsl

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"reflect"
)

// DefaultForEachConcurrency is how many items of one run a ForEach has in
// flight unless its Concurrency says otherwise.
const DefaultForEachConcurrency = 1000

// BranchDef is one branch of a Parallel: steps (Step, External) and delays
// before them, run in order, as a flow's are.
type BranchDef struct {
	parts []Part
}

// Branch describes a branch of a Parallel from its parts: steps, External
// steps and delays. What a flow refuses of its steps it refuses of a
// branch's; a branch cannot hold another Parallel or a ForEach.
func Branch(parts ...Part) *BranchDef { return &BranchDef{parts: parts} }

// ForkSpec is a Parallel or a ForEach as the engine reads it, on the
// StepSpec of its place in the flow (StepSpec.Fork).
type ForkSpec struct {
	// ForEach says the branches are the items of a list; otherwise they
	// are a Parallel's.
	ForEach bool
	// Branches are the steps of each branch: a Parallel's, or the one
	// step a ForEach runs for every item.
	Branches [][]StepSpec
	// Concurrency is how many items of one run a ForEach has in flight.
	Concurrency int

	items func(ctx context.Context, decode func(any) error, encode func(any) ([]byte, error)) ([][]byte, error)
	join  func(ctx context.Context, decodeIn func(any) error, n int, decodeOut func(i int, v any) error) (any, error)
}

// Items decodes a ForEach's input with decode and returns its items, each
// encoded with encode. Calling it on a Parallel is an error.
func (f *ForkSpec) Items(ctx context.Context, decode func(any) error, encode func(any) ([]byte, error)) ([][]byte, error) {
	if f.items == nil {
		return nil, errors.New("a Parallel has no items")
	}
	return f.items(ctx, decode, encode)
}

// Join runs the join function: decodeIn reads the input that reached the
// fork, decodeOut(i, v) branch i's output (n of them, in branch or item
// order). It returns what goes on after the fork.
func (f *ForkSpec) Join(ctx context.Context, decodeIn func(any) error, n int, decodeOut func(i int, v any) error) (any, error) {
	return f.join(ctx, decodeIn, n, decodeOut)
}

// ParallelDef is a Parallel being described: see Parallel.
type ParallelDef struct {
	name     string
	branches []*BranchDef
	joinFn   any
	when     string
	tx       bool
}

// Parallel describes branches that run side by side on the payload that
// reached them, each a sequence of steps, and a join that gets every
// branch's output once all have arrived: Join sets it. The join fires
// exactly once per run. A branch given up fails the run: the other
// branches stop at their next step, and what every branch and the steps
// before the Parallel completed is compensated. name is a step name: its
// queue, <flow>.<name>, takes the run in and the branches back.
func Parallel(name string, branches ...*BranchDef) *ParallelDef {
	return &ParallelDef{name: name, branches: branches}
}

// Join sets the function the branches' outputs go to: a
// func(ctx context.Context, in In, out1 O1, ..., outN ON) (Out, error)
// that gets the payload that reached the Parallel and each branch's
// output, in branch order, and returns the payload that goes on (or End,
// or an error retried by the worker's policy). The flow refuses a join
// whose parameters do not fit what the branches return.
func (p *ParallelDef) Join(fn any) *ParallelDef {
	p.joinFn = fn
	return p
}

// When runs the Parallel only for runs whose payload makes cond true (an
// expr-lang expression, as a step's When); the others skip it and go on
// with the payload unchanged, so its join must return what it takes.
func (p *ParallelDef) When(cond string) *ParallelDef {
	p.when = cond
	return p
}

// Transactional runs the join in a database transaction that also
// records that it fired, as StepDef.Transactional runs a step: what the
// join writes through persistence.Tx(ctx) commits with that record or not
// at all, so a worker killed at any instant applies it exactly once. The
// branches' steps are Transactional or not each on its own.
func (p *ParallelDef) Transactional() *ParallelDef {
	p.tx = true
	return p
}

func (*ParallelDef) part() {}

// ForEachDef is a ForEach being described: see ForEach.
type ForEachDef struct {
	spec StepSpec
	errs []error
}

// ForEach runs step once for every item that items takes from the payload,
// at most Concurrency items of one run in flight, and gives join the
// payload that reached it and every item's output in item order once all
// have arrived; what join returns goes on. The join fires exactly once
// per run, however many items there are: they travel as messages and are
// kept in the journal, not in one document. An item given up fails the
// run as a Parallel's branch does. An empty list calls join at once with
// no outputs.
func ForEach[In, Item, Out, J any](name string, items func(context.Context, In) ([]Item, error), step *StepDef[Item, Out], join func(ctx context.Context, in In, outs []Out) (J, error)) *ForEachDef {
	d := &ForEachDef{}
	d.spec.Name = name
	d.spec.In = reflect.TypeFor[In]()
	d.spec.Out = reflect.TypeFor[J]()
	fork := &ForkSpec{ForEach: true, Concurrency: DefaultForEachConcurrency}
	d.spec.Fork = fork
	switch {
	case items == nil:
		d.errs = append(d.errs, errors.New("ForEach with no items function"))
	case step == nil:
		d.errs = append(d.errs, errors.New("ForEach with no step"))
	case join == nil:
		d.errs = append(d.errs, errors.New("ForEach with no join"))
	}
	if len(d.errs) > 0 {
		return d
	}
	spec, err := step.stepSpec()
	if err != nil {
		d.errs = append(d.errs, fmt.Errorf("its step %q: %w", spec.Name, err))
		return d
	}
	fork.Branches = [][]StepSpec{{spec}}
	fork.items = func(ctx context.Context, decode func(any) error, encode func(any) ([]byte, error)) ([][]byte, error) {
		var in In
		if err := decode(&in); err != nil {
			return nil, err
		}
		list, err := items(ctx, in)
		if err != nil {
			return nil, err
		}
		out := make([][]byte, len(list))
		for i, it := range list {
			if out[i], err = encode(it); err != nil {
				return nil, fmt.Errorf("encode item %d: %w", i, err)
			}
		}
		return out, nil
	}
	fork.join = func(ctx context.Context, decodeIn func(any) error, n int, decodeOut func(int, any) error) (any, error) {
		var in In
		if err := decodeIn(&in); err != nil {
			return nil, err
		}
		outs := make([]Out, n)
		for i := range outs {
			if err := decodeOut(i, &outs[i]); err != nil {
				return nil, fmt.Errorf("output of item %d: %w", i, err)
			}
		}
		return join(ctx, in, outs)
	}
	return d
}

// ForEachExpr is ForEach with the items taken from the payload by an
// expr-lang expression (payload.lines), compiled against In when the flow
// is built: one that does not compile, or gives something other than a
// list, is a build error giving its column. Each element of the list is
// read as an Item through its JSON form.
func ForEachExpr[In, Item, Out, J any](name, items string, step *StepDef[Item, Out], join func(ctx context.Context, in In, outs []Out) (J, error)) *ForEachDef {
	e, err := compileExpr(items, reflect.TypeFor[In](), exprList)
	if err != nil {
		d := ForEach[In, Item, Out, J](name, func(context.Context, In) ([]Item, error) { return nil, nil }, step, join)
		d.errs = append([]error{fmt.Errorf("items %w", err)}, d.errs...)
		return d
	}
	return ForEach(name, func(_ context.Context, in In) ([]Item, error) {
		v, err := e.eval(in)
		if err != nil {
			return nil, fmt.Errorf("items %q: %w", items, err)
		}
		b, err := json.Marshal(v)
		if err != nil {
			return nil, fmt.Errorf("items %q: %w", items, err)
		}
		var out []Item
		if err := json.Unmarshal(b, &out); err != nil {
			return nil, fmt.Errorf("items %q: read as %s: %w", items, reflect.TypeFor[[]Item](), err)
		}
		return out, nil
	}, step, join)
}

// Concurrency sets how many items of one run are in flight at once
// (default DefaultForEachConcurrency). n must be at least 1.
func (d *ForEachDef) Concurrency(n int) *ForEachDef {
	if n < 1 {
		d.errs = append(d.errs, fmt.Errorf("concurrency %d, want at least 1", n))
		return d
	}
	d.spec.Fork.Concurrency = n
	return d
}

// Transactional runs the join in a database transaction that also
// records that it fired (see ParallelDef.Transactional); the step run for
// each item is Transactional or not on its own.
func (d *ForEachDef) Transactional() *ForEachDef {
	d.spec.Transactional = true
	return d
}

func (*ForEachDef) part() {}

func (d *ForEachDef) stepSpec() (StepSpec, error) {
	if len(d.errs) > 0 {
		return d.spec, d.errs[0]
	}
	return d.spec, nil
}

var (
	contextType = reflect.TypeFor[context.Context]()
	errorType   = reflect.TypeFor[error]()
)

// stepSpec builds the Parallel's spec: its branches' steps, checked as a
// flow's are, and its join, whose parameters must fit what they return.
func (p *ParallelDef) stepSpec() (StepSpec, error) {
	spec := StepSpec{Name: p.name, whenSrc: p.when, Transactional: p.tx}
	if len(p.branches) < 2 {
		return spec, fmt.Errorf("a Parallel of %d branches, want at least 2", len(p.branches))
	}
	fork := &ForkSpec{}
	spec.Fork = fork
	for i, b := range p.branches {
		if b == nil {
			return spec, fmt.Errorf("branch %d is nil", i+1)
		}
		steps, err := branchSteps(b.parts)
		if err != nil {
			return spec, fmt.Errorf("branch %d: %w", i+1, err)
		}
		fork.Branches = append(fork.Branches, steps)
	}
	if p.joinFn == nil {
		return spec, errors.New("a Parallel with no Join")
	}
	fn := reflect.ValueOf(p.joinFn)
	t := fn.Type()
	n := len(p.branches)
	if t.Kind() != reflect.Func || t.NumIn() != n+2 || t.NumOut() != 2 || t.In(0) != contextType || t.Out(1) != errorType || t.IsVariadic() {
		return spec, fmt.Errorf("Join is a %s, want a func(context.Context, In, <one output per branch: %d>) (Out, error)", t, n)
	}
	spec.In, spec.Out = t.In(1), t.Out(0)
	for i, steps := range fork.Branches {
		if !fits(spec.In, steps[0].In) && !steps[0].External {
			return spec, fmt.Errorf("branch %d's first step %q takes %s, but the Parallel is given %s (what its Join takes first)", i+1, steps[0].Name, steps[0].In, spec.In)
		}
		last := steps[len(steps)-1]
		if want := t.In(i + 2); !fits(last.Out, want) {
			return spec, fmt.Errorf("Join takes %s for branch %d, whose last step %q returns %s", want, i+1, last.Name, last.Out)
		}
	}
	fork.join = func(ctx context.Context, decodeIn func(any) error, n int, decodeOut func(int, any) error) (any, error) {
		if n != len(fork.Branches) {
			return nil, fmt.Errorf("%d outputs for %d branches", n, len(fork.Branches))
		}
		args := make([]reflect.Value, n+2)
		args[0] = reflect.ValueOf(ctx)
		in := reflect.New(t.In(1))
		if err := decodeIn(in.Interface()); err != nil {
			return nil, err
		}
		args[1] = in.Elem()
		for i := range n {
			v := reflect.New(t.In(i + 2))
			if err := decodeOut(i, v.Interface()); err != nil {
				return nil, fmt.Errorf("output of branch %d: %w", i+1, err)
			}
			args[i+2] = v.Elem()
		}
		res := fn.Call(args)
		err, _ := res[1].Interface().(error)
		return res[0].Interface(), err
	}
	return spec, nil
}

// branchSteps builds a branch's steps from its parts, with the delays
// before them, refusing what a branch cannot hold.
func branchSteps(parts []Part) ([]StepSpec, error) {
	var (
		steps []StepSpec
		delay *delayPart
	)
	for _, p := range parts {
		switch p := p.(type) {
		case nil:
			return nil, fmt.Errorf("a nil part after %d steps", len(steps))
		case *ParallelDef, *ForEachDef:
			return nil, errors.New("a Parallel or ForEach inside a branch: branches do not nest")
		case stepPart:
			spec, err := p.stepSpec()
			if err != nil {
				return nil, fmt.Errorf("step %q: %w", spec.Name, err)
			}
			if delay != nil {
				spec.Delay, spec.delayUntilSrc = delay.d, delay.until
				delay = nil
			}
			steps = append(steps, spec)
		case *delayPart:
			if delay != nil {
				return nil, errors.New("two delays in a row")
			}
			if p.err != nil {
				return nil, p.err
			}
			delay = p
		default:
			return nil, fmt.Errorf("a %T in a branch, which holds steps and delays", p)
		}
	}
	switch {
	case delay != nil:
		return nil, errors.New("a delay with nothing after it")
	case len(steps) == 0:
		return nil, errors.New("no steps")
	}
	return steps, nil
}

// ChildSpec is a Child step as the engine reads it (StepSpec.Child): the
// flow it starts a run of.
type ChildSpec struct {
	// Flow is the child flow's name; the engine runs it, so it must be
	// registered with the same engine.
	Flow string
}

// Child describes a step that starts a run of flow (a child run) on the
// payload that reached it and waits for it: the child run's last step's
// output, which must be an Out, is what the step returns. The child's run
// id is the parent's and the step's (<parent run id>.<name>), in the
// parent's timeline, and the child knows its parent (acemq-flow-parent).
// A child run that fails fails the step: another child run is started
// (<parent run id>.<name>.<attempt>) while the step's retry policy allows,
// then the step is given up. flow must be built, take what reaches the step and return Out; a
// child that ends early (dsl.End) fails the step, since it returned
// nothing. Compensate, Transactional, When and the rest of a step's knobs
// apply to the step as to any other.
func Child[In, Out any](name string, flow *FlowDef) *StepDef[In, Out] {
	s := &StepDef[In, Out]{}
	s.spec.Name = name
	s.spec.In = reflect.TypeFor[In]()
	s.spec.Out = reflect.TypeFor[Out]()
	switch {
	case flow == nil:
		s.errs = append(s.errs, errors.New("Child of a nil flow"))
		return s
	case flow.Err() != nil:
		s.errs = append(s.errs, fmt.Errorf("its child flow: %w", flow.Err()))
		return s
	}
	if in := flow.Input(); in != nil && !fits(s.spec.In, in) {
		s.errs = append(s.errs, fmt.Errorf("takes %s, but child flow %q takes %s", s.spec.In, flow.Name(), in))
		return s
	}
	if steps := flow.Steps(); !fits(steps[len(steps)-1].Out, s.spec.Out) {
		s.errs = append(s.errs, fmt.Errorf("returns %s, but child flow %q's last step returns %s", s.spec.Out, flow.Name(), steps[len(steps)-1].Out))
		return s
	}
	s.spec.Child = &ChildSpec{Flow: flow.Name()}
	return s
}
