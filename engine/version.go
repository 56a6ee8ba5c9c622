package engine

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"slices"
	"strings"

	"github.com/acemq/acemq-flow/broker"
	"github.com/acemq/acemq-flow/broker/transport"
	"github.com/acemq/acemq-flow/dsl"
	"github.com/acemq/acemq-flow/engine/journal"
)

// ErrWouldStrand is what StrandError matches: a worker that would leave
// runs or messages at steps its flows no longer have, where nothing
// consumes them.
var ErrWouldStrand = errors.New("runs would be stranded")

// StrandError is StartWorker's refusal to start a flow whose older
// versions left runs or messages at steps this version does not have:
// Checks says, per flow, which steps hold what.
type StrandError struct {
	Checks []FlowCheck
}

func (e *StrandError) Error() string {
	var parts []string
	for _, c := range e.Checks {
		for _, s := range c.Strays {
			if s.Fate == FateStranded {
				parts = append(parts, fmt.Sprintf("flow %q step %q (not in version %s): %d runs in flight, %d messages in %s, %d compensations in %s",
					c.Flow, s.Step, c.Version, s.Runs, s.Messages, s.Queue, s.Compensations, s.CompensationQueue))
			}
		}
	}
	return fmt.Sprintf("%s: %s; finish them with the version that has the step (run it until its queues are empty), "+
		"or say in the flow what became of the step (dsl.Renamed); `acemq-flow flows check` reports the same", ErrWouldStrand, strings.Join(parts, "; "))
}

func (e *StrandError) Unwrap() error { return ErrWouldStrand }

// FlowCheck is what Check found for one flow: its version, the versions
// before it the journal remembers, and the steps that this version does not
// have but runs or messages are at (Strays).
type FlowCheck struct {
	Flow    string `json:"flow"`
	Version string `json:"version"`
	// Versions are the flow's versions the journal remembers (this one
	// among them once a worker of it started), the first seen first.
	Versions []journal.FlowVersion `json:"versions"`
	// Before is the last other version seen ("" when there is none);
	// Added are this version's steps that it did not have, Removed its
	// steps this one does not have.
	Before  string   `json:"before,omitempty"`
	Added   []string `json:"added"`
	Removed []string `json:"removed"`
	// Strays are the steps, of an older version or named by runs in the
	// journal, that this version does not have, with what is at each.
	Strays []StrayStep `json:"strays"`
}

// Strands reports whether starting this version would leave runs or
// messages where nothing takes them.
func (c FlowCheck) Strands() bool {
	return slices.ContainsFunc(c.Strays, func(s StrayStep) bool { return s.Fate == FateStranded })
}

// StrayStep is a step a flow's version does not have, and what is at it:
// runs the journal says are there (running or waiting), messages in its
// queue and in its compensation's queue.
type StrayStep struct {
	Step              string `json:"step"`
	Queue             string `json:"queue"`
	Messages          int    `json:"messages"`
	CompensationQueue string `json:"compensation_queue"`
	Compensations     int    `json:"compensations"`
	Runs              int    `json:"runs"`
	// DeadLettered counts the messages in the step's dead-letter queue:
	// failed runs held there for a replay, which would send them back to
	// the step. They are not stranded (nothing moves them on its own), but
	// a replay of one is, unless the flow renamed the step.
	DeadLettered int `json:"dead_lettered"`
	// Versions are the versions that had the step (none when only runs in
	// the journal name it).
	Versions []string `json:"versions,omitempty"`
	// Fate is what becomes of what is there: "stranded" (nothing takes
	// it), "goes on at <step>" (the flow renamed the step, or removed it
	// To that step), FateFails (removed without To), or "nothing there";
	// for a removed step that has compensations queued, "; its
	// compensations are given up" follows.
	Fate string `json:"fate"`
}

// Holds reports whether anything is at the step.
func (s StrayStep) Holds() bool { return s.Runs+s.Messages+s.Compensations > 0 }

// The fates of a StrayStep.
const (
	FateStranded = "stranded"
	FateNothing  = "nothing there"
	// FateFails: the runs there fail at the step (dsl.Removed without To),
	// compensated as any failed run is, and replayable from another step.
	FateFails = "fails there (dsl.Removed)"
)

// version is the fingerprint of what a flow compiles to: its steps in
// their order with their branches, joins, waits, delays, compensations,
// conditions, children and payload types, and its form. Knobs that do not
// change where a run goes or what it carries (retries, timeouts,
// concurrency, limits) are not in it.
func version(def *dsl.FlowDef) string {
	type step struct {
		Name       string     `json:"n"`
		External   bool       `json:"x,omitempty"`
		In         string     `json:"i,omitempty"`
		Out        string     `json:"o,omitempty"`
		When       string     `json:"w,omitempty"`
		Delay      string     `json:"d,omitempty"`
		DelayUntil string     `json:"du,omitempty"`
		Comp       bool       `json:"c,omitempty"`
		Fork       string     `json:"f,omitempty"`
		Branches   [][]string `json:"b,omitempty"`
		Child      string     `json:"ch,omitempty"`
		Wait       string     `json:"wt,omitempty"`
	}
	var shape struct {
		Input     string `json:"input"`
		Itinerary bool   `json:"itinerary,omitempty"`
		Steps     []step `json:"steps"`
	}
	shape.Input, shape.Itinerary = fmt.Sprint(def.Input()), def.HasItinerary()
	var add func(specs []dsl.StepSpec)
	add = func(specs []dsl.StepSpec) {
		for _, s := range specs {
			st := step{Name: s.Name, External: s.External, In: fmt.Sprint(s.In), Out: fmt.Sprint(s.Out), Comp: s.Compensable}
			if s.When != nil {
				st.When = s.When.String()
			}
			if s.Delay > 0 {
				st.Delay = s.Delay.String()
			}
			if s.DelayUntil != nil {
				st.DelayUntil = s.DelayUntil.String()
			}
			if fk := s.Fork; fk != nil {
				st.Fork = "parallel"
				if fk.ForEach {
					st.Fork = "foreach"
				}
				for _, b := range fk.Branches {
					names := make([]string, len(b))
					for i, bs := range b {
						names[i] = bs.Name
					}
					st.Branches = append(st.Branches, names)
				}
			}
			if s.Child != nil {
				st.Child = s.Child.Flow
			}
			if w := s.Wait; w != nil {
				st.Wait = fmt.Sprintf("%s %t", w.Timeout, w.GoesOnAtTimeout())
			}
			shape.Steps = append(shape.Steps, st)
			if s.Fork != nil {
				for _, b := range s.Fork.Branches {
					add(b)
				}
			}
		}
	}
	add(def.Steps())
	b, _ := json.Marshal(shape) // strings, bools and slices of them: it cannot fail
	sum := sha256.Sum256(b)
	return hex.EncodeToString(sum[:6])
}

// stepNames are the names of f's steps, branches' included.
func (f *flow) stepNames() []string {
	out := make([]string, len(f.steps))
	for i, s := range f.steps {
		out[i] = s.Name
	}
	return out
}

// Check compares the registered flow called name with the versions of it
// that the journal remembers and with the runs and messages at steps this
// version does not have: what a worker of it would leave stranded
// (FlowCheck.Strands), which StartWorker refuses. On a journal that is
// not a journal.VersionStore (both shipped journals are) only the queues
// of the steps the flow renamed are looked at.
func (e *Engine) Check(ctx context.Context, name string) (FlowCheck, error) {
	f, err := e.flow(name)
	if err != nil {
		return FlowCheck{}, err
	}
	return e.check(ctx, f)
}

func (e *Engine) check(ctx context.Context, f *flow) (FlowCheck, error) {
	c := FlowCheck{Flow: f.name, Version: f.version, Versions: []journal.FlowVersion{}, Added: []string{}, Removed: []string{}, Strays: []StrayStep{}}
	have := f.stepNames()
	strays := map[string]*StrayStep{}
	var order []string
	stray := func(step string) *StrayStep {
		if s, ok := strays[step]; ok {
			return s
		}
		s := &StrayStep{Step: step, Queue: f.queue(step), CompensationQueue: f.compensationQueue(step)}
		strays[step] = s
		order = append(order, step)
		return s
	}
	vs, _ := e.journal.(journal.VersionStore)
	if vs != nil {
		versions, err := vs.Versions(ctx, f.name)
		if err != nil {
			return FlowCheck{}, fmt.Errorf("check flow %q: its versions: %w", f.name, err)
		}
		c.Versions = versions
		var last *journal.FlowVersion
		for i, v := range versions {
			if v.Version != f.version {
				last = &versions[i]
			}
			for _, s := range v.Steps {
				if !slices.Contains(have, s) {
					st := stray(s)
					st.Versions = append(st.Versions, v.Version)
				}
			}
		}
		if last != nil {
			c.Before = last.Version
			for _, s := range have {
				if !slices.Contains(last.Steps, s) {
					c.Added = append(c.Added, s)
				}
			}
			for _, s := range last.Steps {
				if !slices.Contains(have, s) {
					c.Removed = append(c.Removed, s)
				}
			}
		}
		inFlight, err := vs.InFlight(ctx, f.name)
		if err != nil {
			return FlowCheck{}, fmt.Errorf("check flow %q: its runs in flight: %w", f.name, err)
		}
		for step, n := range inFlight {
			if step != "" && !slices.Contains(have, step) {
				stray(step).Runs = n
			}
		}
	}
	for _, m := range f.def.Migrations() {
		// Its queue may hold what a worker of an older version sent, that
		// the journal has no version of.
		stray(m.Old)
	}
	slices.Sort(order)
	for _, step := range order {
		s := strays[step]
		var err error
		if s.Messages, err = e.depth(ctx, s.Queue); err != nil {
			return FlowCheck{}, fmt.Errorf("check flow %q step %q: %w", f.name, step, err)
		}
		if s.Compensations, err = e.depth(ctx, s.CompensationQueue); err != nil {
			return FlowCheck{}, fmt.Errorf("check flow %q step %q: %w", f.name, step, err)
		}
		if s.DeadLettered, err = e.depth(ctx, s.Queue+broker.DeadLetterSuffix); err != nil {
			return FlowCheck{}, fmt.Errorf("check flow %q step %q: %w", f.name, step, err)
		}
		to, removed := f.removed[step]
		switch n, renamed := f.renamed[step]; {
		case renamed && (s.Compensations == 0 || f.steps[f.index[n]].Compensable):
			// Its compensations go on at n's only if n has one.
			s.Fate = "goes on at " + n
		case removed && to != "":
			s.Fate = "goes on at " + to
		case removed:
			s.Fate = FateFails
		case s.Holds():
			s.Fate = FateStranded
		default:
			s.Fate = FateNothing
		}
		if removed && s.Compensations > 0 {
			s.Fate += "; its compensations are given up"
		}
		c.Strays = append(c.Strays, *s)
	}
	return c, nil
}

// depth is how many ready messages queue holds; 0 when it does not exist.
func (e *Engine) depth(ctx context.Context, queue string) (int, error) {
	st, err := e.conn.Transport().Inspect(ctx, queue)
	switch {
	case transport.IsCode(err, transport.NotFound):
		return 0, nil
	case err != nil:
		return 0, fmt.Errorf("look at queue %q: %w", queue, err)
	}
	return st.Messages, nil
}

// checkVersions refuses (StrandError) to start fs when a flow's older
// versions left runs or messages at steps it does not have, and otherwise
// records each flow's version as served.
func (e *Engine) checkVersions(ctx context.Context, fs []*flow) error {
	var stranding []FlowCheck
	for _, f := range fs {
		c, err := e.check(ctx, f)
		if err != nil {
			return err
		}
		if c.Strands() {
			stranding = append(stranding, c)
		}
	}
	if len(stranding) > 0 {
		return &StrandError{Checks: stranding}
	}
	vs, ok := e.journal.(journal.VersionStore)
	if !ok {
		return nil
	}
	for _, f := range fs {
		if err := vs.RecordVersion(ctx, journal.FlowVersion{Flow: f.name, Version: f.version, Steps: f.stepNames()}, e.now()); err != nil {
			return fmt.Errorf("flow %q: record its version %s: %w", f.name, f.version, err)
		}
	}
	return nil
}
