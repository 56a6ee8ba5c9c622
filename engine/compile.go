package engine

import (
	"context"
	"encoding/json"
	"fmt"
	"sync"
	"time"

	"github.com/acemq/acemq-flow/broker"
	"github.com/acemq/acemq-flow/dsl"
)

// compensateKey is the routing key of the queue that takes a failed run's
// message to be compensated now (acemq-flow compensate), and the prefix of
// each compensation's own key.
const compensateKey = dsl.CompensateQueueInfix

// flow is a dsl flow compiled for this engine: its steps with the policies
// they run under, and its topology.
type flow struct {
	def      *dsl.FlowDef
	name     string
	steps    []dsl.StepSpec
	index    map[string]int
	codec    broker.Codec
	json     bool
	retry    []broker.RetryPolicy
	compRet  []broker.RetryPolicy
	topology broker.Topology
	hold     time.Duration
	// forks says the flow has a Parallel or a ForEach; its steps then
	// hold, after the flow's own, the steps of every branch.
	forks bool
	// version is the fingerprint of what the flow compiles to.
	version string
	// migrations are what the flow says became of its earlier versions'
	// steps (dsl.Renamed, dsl.Removed, dsl.Adopt).
	migrations

	declareMu sync.Mutex
	declared  bool
}

// compile checks that the engine can run def and works out its topology.
func compile(def *dsl.FlowDef, cfg Config) (*flow, error) {
	if err := def.Err(); err != nil {
		return nil, err
	}
	f := &flow{def: def, name: def.Name(), steps: def.Steps(), index: map[string]int{}, codec: def.Codec(), hold: def.HoldForReplay(), version: version(def), migrations: migrationsOf(def)}
	for _, s := range def.Steps() {
		if s.Fork != nil {
			f.forks = true
			for _, b := range s.Fork.Branches {
				f.steps = append(f.steps, b...)
			}
		}
	}
	f.json = f.codec.ContentType() == broker.ContentTypeJSON
	policy := func(step string, p dsl.RetryPolicy, def broker.RetryPolicy) (broker.RetryPolicy, error) {
		if p == nil {
			return def, nil
		}
		bp, ok := p.(broker.RetryPolicy)
		if !ok {
			return broker.RetryPolicy{}, &dsl.BuildError{Flow: f.name, Step: step,
				Err: fmt.Errorf("retry policy %T: the engine runs broker.RetryPolicy values (broker.Exponential, broker.Constant, ...)", p)}
		}
		return bp, nil
	}
	f.topology = broker.Topology{Exchanges: []broker.Exchange{{Name: f.name, Kind: "direct", Durable: true}}}
	for i, s := range f.steps {
		f.index[s.Name] = i
		r, err := policy(s.Name, s.Retry, *cfg.Retry)
		if err != nil {
			return nil, err
		}
		cr, err := policy(s.Name, s.CompensateRetry, r)
		if err != nil {
			return nil, err
		}
		f.retry, f.compRet = append(f.retry, r), append(f.compRet, cr)
		f.bind(f.queue(s.Name), s.Name)
		if s.Compensable {
			f.bind(f.compensationQueue(s.Name), compensateKey+"."+s.Name)
		}
	}
	f.bind(f.compensateNowQueue(), compensateKey)
	f.bindMigrated()
	return f, nil
}

// declare declares the flow's topology once per engine: a worker does it
// on start, Start before the first run, so that a run started before any
// worker ran waits in its queue rather than failing.
func (e *Engine) declare(ctx context.Context, f *flow) error {
	f.declareMu.Lock()
	defer f.declareMu.Unlock()
	if f.declared {
		return nil
	}
	if err := e.conn.Declare(ctx, f.topology); err != nil {
		return fmt.Errorf("declare flow %q: %w", f.name, err)
	}
	f.declared = true
	return nil
}

// bind adds queue, declared as a consumer declares it, bound to the flow's
// exchange under key.
func (f *flow) bind(queue, key string) {
	f.topology = f.topology.Merge(broker.ConsumerTopology(queue))
	f.topology.Bindings = append(f.topology.Bindings, broker.Binding{Queue: queue, Exchange: f.name, Key: key})
}

// queue is the queue of a step: <flow>.<step>.
func (f *flow) queue(step string) string { return f.name + "." + step }

// compensationQueue is the queue of a step's compensation.
func (f *flow) compensationQueue(step string) string {
	return f.name + "." + compensateKey + "." + step
}

// compensateNowQueue takes failed runs' messages to be compensated now.
func (f *flow) compensateNowQueue() string { return f.name + "." + compensateKey }

// workedQueues are the step queues the flow's workers consume: each
// step's but an External one's, and those of the steps' old names
// (dsl.Renamed, dsl.Removed).
func (f *flow) workedQueues() []string {
	var out []string
	for _, s := range f.steps {
		if !s.External {
			olds, _ := f.renamedQueues(s)
			out = append(append(out, f.queue(s.Name)), olds...)
		}
	}
	for old, to := range f.removed {
		if to == "" {
			out = append(out, f.queue(old))
		}
	}
	return out
}

// deadLetterQueues are where a run of the flow can be given up: the
// dead-letter queues of the queues its workers consume.
func (f *flow) deadLetterQueues() []string {
	qs := f.workedQueues()
	for i, q := range qs {
		qs[i] = q + broker.DeadLetterSuffix
	}
	return qs
}

// FlowInfo describes what a flow became: for a person (acemq-flow flows
// show) and for scripts (its JSON).
type FlowInfo struct {
	Name string `json:"name"`
	// Form is "pipeline" (x-acemq-route) or "routing slip" (an itinerary
	// chosen per run).
	Form     string `json:"form"`
	Exchange string `json:"exchange"`
	// Version is the fingerprint of what the flow compiles to: its steps
	// in their order, branches, joins, waits, delays, compensations,
	// conditions and payload types (not retries, timeouts, concurrency or
	// limits). Two builds of a flow with one Version route runs alike.
	Version string `json:"version"`
	// Input is the Go type a run starts with.
	Input string     `json:"input"`
	Steps []StepInfo `json:"steps"`
	// HoldForReplay is how long a failed run waits for a replay before it
	// is compensated ("" when it compensates at once).
	HoldForReplay string `json:"hold_for_replay,omitempty"`
	// CompensateQueue takes failed runs to compensate now.
	CompensateQueue string `json:"compensate_queue"`
	// ExamplePayload is the flow's dsl.Example, for starting a run by hand.
	ExamplePayload json.RawMessage `json:"example_payload,omitempty"`
	// Secrets are the paths of the payload's secret fields (Secrets: the
	// flow's dsl.Secret and its types' `acemq:"secret"` tags), which
	// Redact masks for the dashboard, the command line and the logs.
	Secrets []string `json:"secrets,omitempty"`
}

// StepInfo describes one step of a FlowInfo.
type StepInfo struct {
	Name       string `json:"name"`
	Queue      string `json:"queue"`
	External   bool   `json:"external,omitempty"`
	When       string `json:"when,omitempty"`
	Delay      string `json:"delay,omitempty"`
	DelayUntil string `json:"delay_until,omitempty"`
	Retry      string `json:"retry"`
	Timeout    string `json:"timeout,omitempty"`
	// Compensation is the compensation's queue ("" for none).
	Compensation      string `json:"compensation,omitempty"`
	CompensationRetry string `json:"compensation_retry,omitempty"`
	OrderedBy         string `json:"ordered_by,omitempty"`
	// ConcurrencyKey and ConcurrencyLimit are the step's ConcurrencyKey:
	// at most ConcurrencyLimit runs of one key in the step at once.
	ConcurrencyKey   string `json:"concurrency_key,omitempty"`
	ConcurrencyLimit int    `json:"concurrency_limit,omitempty"`
	// RateLimit is the step's rate limit ("10 per 1s"), RateKey its key
	// ("" for one limit for every run).
	RateLimit   string `json:"rate_limit,omitempty"`
	RateKey     string `json:"rate_key,omitempty"`
	Concurrency int    `json:"concurrency,omitempty"`
	Prefetch    int    `json:"prefetch,omitempty"`
	Input       string `json:"input,omitempty"`
	Output      string `json:"output,omitempty"`
	// Fork describes a Parallel or a ForEach (nil for a step).
	Fork *ForkInfo `json:"fork,omitempty"`
	// Child is the flow a Child step starts a run of.
	Child string `json:"child,omitempty"`
	// Wait describes a WaitFor step (nil for any other).
	Wait *WaitInfo `json:"wait,omitempty"`
	// RenamedFrom are the names the step had in earlier versions
	// (dsl.Renamed), whose queues its workers consume too.
	RenamedFrom []string `json:"renamed_from,omitempty"`
	// TakesRemoved are the steps of earlier versions whose runs go on at
	// this one (dsl.Removed with To), whose queues its workers consume too.
	TakesRemoved []string `json:"takes_removed,omitempty"`
	// OnFork and OnBranch name the fork a step is on a branch of, and
	// which branch ("" and 0 on the flow's own route).
	OnFork   string `json:"on_fork,omitempty"`
	OnBranch int    `json:"on_branch,omitempty"`
}

// WaitInfo describes a WaitFor step of a FlowInfo: how long a run waits
// for the signal (named after the step), and whether it goes on at the
// timeout (OnTimeout) or fails.
type WaitInfo struct {
	Timeout   string `json:"timeout"`
	OnTimeout bool   `json:"on_timeout,omitempty"`
}

// ForkInfo describes a Parallel or a ForEach of a FlowInfo: its branches'
// steps by name (a ForEach has one branch, the step it runs per item) and,
// for a ForEach, how many items of a run are in flight at most.
type ForkInfo struct {
	// Kind is "parallel" or "foreach".
	Kind        string     `json:"kind"`
	Branches    [][]string `json:"branches"`
	Concurrency int        `json:"concurrency,omitempty"`
}

// Flows describes every registered flow, in registration order.
func (e *Engine) Flows() []FlowInfo {
	fs := e.registered()
	out := make([]FlowInfo, len(fs))
	for i, f := range fs {
		out[i] = f.info(e.cfg)
	}
	return out
}

// Flow describes the registered flow called name.
func (e *Engine) Flow(name string) (FlowInfo, error) {
	f, err := e.flow(name)
	if err != nil {
		return FlowInfo{}, err
	}
	return f.info(e.cfg), nil
}

func (f *flow) info(cfg Config) FlowInfo {
	fi := FlowInfo{Name: f.name, Form: "pipeline", Exchange: f.name, Version: f.version, Input: fmt.Sprint(f.def.Input()), CompensateQueue: f.compensateNowQueue()}
	if f.def.HasItinerary() {
		fi.Form = "routing slip"
	}
	if f.hold > 0 {
		fi.HoldForReplay = f.hold.String()
	}
	fi.Secrets = Secrets(f.def)
	if ex, ok := f.def.Example(); ok {
		if b, err := json.Marshal(ex); err == nil {
			fi.ExamplePayload = b
		}
	}
	type place struct {
		fork   string
		branch int
	}
	onFork := map[string]place{}
	for i, s := range f.steps {
		si := StepInfo{Name: s.Name, Queue: f.queue(s.Name), External: s.External}
		if fk := s.Fork; fk != nil {
			si.Fork = &ForkInfo{Kind: "parallel"}
			if fk.ForEach {
				si.Fork.Kind, si.Fork.Concurrency = "foreach", fk.Concurrency
			}
			for b, steps := range fk.Branches {
				var names []string
				for _, bs := range steps {
					names = append(names, bs.Name)
					onFork[bs.Name] = place{s.Name, b}
				}
				si.Fork.Branches = append(si.Fork.Branches, names)
			}
		}
		if s.Child != nil {
			si.Child = s.Child.Flow
		}
		if s.Wait != nil {
			si.Wait = &WaitInfo{Timeout: s.Wait.Timeout.String(), OnTimeout: s.Wait.GoesOnAtTimeout()}
		}
		if on, ok := onFork[s.Name]; ok {
			si.OnFork, si.OnBranch = on.fork, on.branch
		}
		for _, m := range f.def.Migrations() {
			switch {
			case m.New == s.Name && m.Removed:
				si.TakesRemoved = append(si.TakesRemoved, m.Old)
			case m.New == s.Name:
				si.RenamedFrom = append(si.RenamedFrom, m.Old)
			}
		}
		if !s.External {
			si.Retry = f.retry[i].String()
			si.Concurrency, si.Prefetch = f.concurrency(s, cfg), f.prefetch(s, cfg)
			si.Input, si.Output = fmt.Sprint(s.In), fmt.Sprint(s.Out)
		}
		if s.When != nil {
			si.When = s.When.String()
		}
		if s.Delay > 0 {
			si.Delay = s.Delay.String()
		}
		if s.DelayUntil != nil {
			si.DelayUntil = s.DelayUntil.String()
		}
		if s.Timeout > 0 {
			si.Timeout = s.Timeout.String()
		}
		if s.Compensable {
			si.Compensation = f.compensationQueue(s.Name)
			si.CompensationRetry = f.compRet[i].String()
		}
		switch {
		case s.OrderKey != nil:
			si.OrderedBy = s.OrderKey.String()
		case s.OrderHeader != "":
			si.OrderedBy = "header " + s.OrderHeader
		}
		if l := s.Limit; l != nil {
			si.ConcurrencyKey, si.ConcurrencyLimit = l.Key.String(), l.N
		}
		if r := s.Rate; r != nil {
			si.RateLimit = fmt.Sprintf("%d per %s", r.N, r.Per)
			if r.Key != nil {
				si.RateKey = r.Key.String()
			}
		}
		fi.Steps = append(fi.Steps, si)
	}
	return fi
}

func (f *flow) concurrency(s dsl.StepSpec, cfg Config) int {
	if s.Concurrency > 0 {
		return s.Concurrency
	}
	return cfg.Concurrency
}

func (f *flow) prefetch(s dsl.StepSpec, cfg Config) int {
	if s.Prefetch > 0 {
		return s.Prefetch
	}
	// Enough to keep every handler busy while moves are confirmed.
	return max(cfg.Conn.Config().Prefetch, 2*f.concurrency(s, cfg))
}

// hop is where a run goes after the step at pos produced payload: the
// next step to run (past those whose When is false), when, and what was
// skipped on the way.
type hop struct {
	// next is the position of the next step, len(route) when the route is
	// done.
	next    int
	skipped []int
	// due is when the hop is to arrive (zero: at once).
	due time.Time
}

// knows refuses a route (what is left of one) naming a step the flow does
// not have (ErrUnknownStep): a route from another version of the flow, or
// a foreign publisher's mistake, which no step of this flow can route.
// The steps a run has done are history: a worker of an older version
// during a rolling deploy takes a run that went through a step only the
// newer one has.
func (f *flow) knows(route []string) error {
	for _, name := range route {
		if _, ok := f.index[name]; !ok && !f.isRemoved(name) {
			return fmt.Errorf("%w: the message's route %q names %q, which flow %q does not have", ErrUnknownStep, route, name, f.name)
		}
	}
	return nil
}

// plan works out the hop after position pos of route for payload, at now.
// A condition or a delay that cannot be evaluated is an error: it is the
// same on every retry, so the caller gives the run up; so is a route
// naming a step the flow does not have (ErrUnknownStep).
func (f *flow) plan(route []string, pos int, payload any, now time.Time) (hop, error) {
	if err := f.knows(route[min(pos+1, len(route)):]); err != nil {
		return hop{next: pos + 1}, err
	}
	h := hop{next: pos + 1}
	for ; h.next < len(route); h.next++ {
		s := f.spec(route[h.next])
		if s.When == nil {
			break
		}
		ok, err := s.When.Bool(payload)
		if err != nil {
			return h, fmt.Errorf("When of step %q: %w", s.Name, err)
		}
		if ok {
			break
		}
		h.skipped = append(h.skipped, h.next)
	}
	if h.next == len(route) {
		return h, nil
	}
	s := f.spec(route[h.next])
	switch {
	case s.Delay > 0:
		h.due = now.Add(s.Delay)
	case s.DelayUntil != nil:
		at, err := s.DelayUntil.Time(payload)
		if err != nil {
			return h, fmt.Errorf("DelayUntil before step %q: %w", s.Name, err)
		}
		if at.After(now) {
			h.due = at
		}
	}
	return h, nil
}

// spec is the step called name; a step the flow removed (dsl.Removed),
// which a route of an older version may still name, has no condition and
// no delay: its queue's worker sends the run on or fails it.
func (f *flow) spec(name string) dsl.StepSpec {
	if i, ok := f.index[name]; ok {
		return f.steps[i]
	}
	return dsl.StepSpec{Name: name}
}

// isRemoved reports whether the flow says it removed step (dsl.Removed).
func (f *flow) isRemoved(step string) bool { _, ok := f.removed[step]; return ok }
