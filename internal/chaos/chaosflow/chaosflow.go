// Package chaosflow holds the flows the chaos scenarios run (see
// docs/chaos.md): the chaos flow binary (internal/chaos/flowbin) works
// them, and the driver (internal/chaos) starts them and counts what their
// steps did.
//
// Every step and compensation applies its side effect as one row of
// EffectsTable in the scenario's database, so that an effect applied
// twice, by any worker process, is seen there: a double effect is two
// rows of one (run, step). The steps are Transactional, as a user's steps
// whose effects live in the workers' database should be: the row is
// written in the step's transaction, which also records that the step ran.
package chaosflow

import (
	"context"
	"errors"
	"fmt"
	"os"
	"strconv"
	"time"

	"github.com/acemq/acemq-flow/broker"
	"github.com/acemq/acemq-flow/dsl"
	"github.com/acemq/acemq-flow/persistence"
)

// Order is what every run of the chaos flows carries.
type Order struct {
	ID string `json:"id"`
	// WorkMillis is how long each step and compensation works before it
	// applies its effect: the time a step spends in flight, where a kill
	// or a drain finds it.
	WorkMillis int `json:"work_ms,omitempty"`
}

// The flows' names, after the scenario's prefix and a dot.
const (
	// Pipeline is the three-step flow: a, b, c.
	Pipeline = "pipeline"
	// Saga is the flow whose last step always fails after two compensable
	// steps: every run ends compensated.
	Saga = "saga"
	// Forks is the flow that branches and joins: a ForEach over
	// ForEachItems items (one item step each, ForEachConcurrency in
	// flight), its join, a Parallel of the ForkBranches, its join, and
	// ForksLast.
	Forks = "forks"
)

// The forks flow's shape and effect names. Each item applies ItemEffect(i);
// each join applies its own effect, JoinPrefix and the fork's name, in
// the transaction that records that it fired: two rows of one are a join
// fired twice.
const (
	ForEachItems       = 1000
	ForEachConcurrency = 100
	JoinPrefix         = "join-"
	JoinItems          = JoinPrefix + "items"
	JoinBranches       = JoinPrefix + "branches"
	ForksLast          = "done"
)

// ForkBranches are the Parallel's branches, one step each.
var ForkBranches = []string{"x", "y", "z"}

// ItemEffect is the effect name of item i of the forks flow's ForEach.
func ItemEffect(i int) string { return fmt.Sprintf("item-%04d", i) }

// ForksEffects are the effects every run of the forks flow applies once.
func ForksEffects() []string {
	out := make([]string, 0, ForEachItems+len(ForkBranches)+3)
	for i := range ForEachItems {
		out = append(out, ItemEffect(i))
	}
	out = append(out, JoinItems)
	out = append(out, ForkBranches...)
	return append(out, JoinBranches, ForksLast)
}

// Item is what each item step of the forks flow gets.
type Item struct {
	I          int `json:"i"`
	WorkMillis int `json:"work_ms,omitempty"`
}

// The steps of the flows, in order, and the effect names of the saga's
// compensations.
var (
	PipelineSteps = []string{"a", "b", "c"}
	SagaSteps     = []string{"reserve", "charge"}
	SagaUndos     = []string{"undo-charge", "undo-reserve"}
)

// UndoPrefix starts the effect name of a compensation: undo-<step>.
const UndoPrefix = "undo-"

// EffectsTable is where the effects land, one row per application.
const EffectsTable = "chaos_effects"

// CreateEffectsTable creates EffectsTable. The id is the application's
// own, so that an insert retried after its answer was lost is not
// counted twice.
const CreateEffectsTable = `
CREATE TABLE IF NOT EXISTS ` + EffectsTable + ` (
	id     text PRIMARY KEY,
	run_id text NOT NULL,
	step   text NOT NULL,
	worker text NOT NULL,
	at     timestamptz NOT NULL DEFAULT clock_timestamp()
);
CREATE INDEX IF NOT EXISTS ` + EffectsTable + `_run_idx ON ` + EffectsTable + ` (run_id, step);`

// StepRetry is the retry policy of every step and compensation: an outage
// of a minute or two never uses it up.
var StepRetry = broker.Exponential(8, time.Second)

// ErrNoDatabase: the effects have nowhere to go.
var ErrNoDatabase = errors.New("chaos flows: no database (set ACEMQ_DATABASE_URL)")

// Effects applies the flows' side effects in PostgreSQL, in each step's
// own transaction (every chaos step is Transactional). A nil *Effects
// refuses every effect with ErrNoDatabase: a process that only starts
// runs never applies one.
type Effects struct {
	worker string
}

// NewEffects returns Effects for a worker on the database at url (the
// engine's, whose step transactions the effects join); worker names this
// process in every row. An empty url gives nil, which refuses every
// effect.
func NewEffects(url, worker string) (*Effects, error) {
	if url == "" {
		return nil, nil
	}
	return &Effects{worker: worker}, nil
}

// Apply applies the effect called step for the run whose message ctx's
// handler holds, after working o.WorkMillis, in the step's transaction:
// it commits with the record that the step ran, or not at all, so that a
// failure rolls both back and the step is retried.
func (e *Effects) Apply(ctx context.Context, o Order, step string) error {
	if e == nil {
		return ErrNoDatabase
	}
	m, ok := broker.Handling(ctx)
	if !ok || m.RunID == "" {
		return broker.Fatal(fmt.Errorf("chaos effect %s: no run id on the message being handled", step))
	}
	if o.WorkMillis > 0 {
		select {
		case <-time.After(time.Duration(o.WorkMillis) * time.Millisecond):
		case <-ctx.Done():
			return ctx.Err()
		}
	}
	tx, ok := persistence.Tx(ctx)
	if !ok {
		return broker.Fatal(fmt.Errorf("chaos effect %s of run %s: not in a step's transaction (the step is not Transactional)", step, m.RunID))
	}
	_, err := tx.Exec(ctx, `INSERT INTO `+EffectsTable+` (id, run_id, step, worker) VALUES ($1, $2, $3, $4)`,
		broker.NewID(), m.RunID, step, e.worker)
	if err != nil {
		return fmt.Errorf("chaos effect %s of run %s: %w", step, m.RunID, err)
	}
	return nil
}

// Flows are the chaos flows, named prefix.Pipeline, prefix.Saga and
// prefix.Forks, their effects applied by fx.
func Flows(prefix string, fx *Effects) []*dsl.FlowDef {
	step := func(name string) func(context.Context, Order) (Order, error) {
		return func(ctx context.Context, o Order) (Order, error) { return o, fx.Apply(ctx, o, name) }
	}
	undo := func(name string) func(context.Context, Order) error {
		return func(ctx context.Context, o Order) error { return fx.Apply(ctx, o, UndoPrefix+name) }
	}
	ship := func(context.Context, Order) (Order, error) {
		return Order{}, broker.Fatal(errors.New("ship: refused (the chaos saga's last step always fails)"))
	}
	pipeline := []dsl.Part{dsl.Example(Order{ID: "example"})}
	for _, s := range PipelineSteps {
		pipeline = append(pipeline, dsl.Step(s, step(s)).Retry(StepRetry).Transactional())
	}
	saga := []dsl.Part{dsl.Example(Order{ID: "example"})}
	for _, s := range SagaSteps {
		saga = append(saga, dsl.Step(s, step(s)).Retry(StepRetry).Compensate(undo(s)).CompensateRetry(StepRetry).Transactional())
	}
	saga = append(saga, dsl.Step("ship", ship))
	return []*dsl.FlowDef{dsl.Flow(prefix+"."+Pipeline, pipeline...), dsl.Flow(prefix+"."+Saga, saga...), forks(prefix, fx, step)}
}

// forks is the flow prefix.Forks. Its joins check what they are given,
// every output in order, so that a join fired early or short fails the
// run rather than passing.
func forks(prefix string, fx *Effects, step func(string) func(context.Context, Order) (Order, error)) *dsl.FlowDef {
	items := func(_ context.Context, o Order) ([]Item, error) {
		out := make([]Item, ForEachItems)
		for i := range out {
			out[i] = Item{I: i, WorkMillis: o.WorkMillis}
		}
		return out, nil
	}
	item := func(ctx context.Context, it Item) (Item, error) {
		return it, fx.Apply(ctx, Order{WorkMillis: it.WorkMillis}, ItemEffect(it.I))
	}
	joinItems := func(ctx context.Context, o Order, outs []Item) (Order, error) {
		if len(outs) != ForEachItems {
			return o, broker.Fatal(fmt.Errorf("join %s: %d items back, want %d", JoinItems, len(outs), ForEachItems))
		}
		for i, it := range outs {
			if it.I != i {
				return o, broker.Fatal(fmt.Errorf("join %s: item %d in place %d", JoinItems, it.I, i))
			}
		}
		return o, fx.Apply(ctx, o, JoinItems)
	}
	joinBranches := func(ctx context.Context, o Order, x, y, z Order) (Order, error) {
		for _, b := range []Order{x, y, z} {
			if b.ID != o.ID {
				return o, broker.Fatal(fmt.Errorf("join %s: a branch of run %q came back with %q", JoinBranches, o.ID, b.ID))
			}
		}
		return o, fx.Apply(ctx, o, JoinBranches)
	}
	branches := make([]*dsl.BranchDef, len(ForkBranches))
	for i, b := range ForkBranches {
		branches[i] = dsl.Branch(dsl.Step(b, step(b)).Retry(StepRetry).Transactional())
	}
	return dsl.Flow(prefix+"."+Forks,
		dsl.Example(Order{ID: "example"}),
		dsl.ForEach("items", items, dsl.Step("item", item).Retry(StepRetry).Transactional(), joinItems).
			Concurrency(ForEachConcurrency).Transactional(),
		dsl.Parallel("branches", branches...).Join(joinBranches).Transactional(),
		dsl.Step(ForksLast, step(ForksLast)).Retry(StepRetry).Transactional())
}

// WorkerName names this process in the effects it applies: its pid,
// which the driver knows for every worker it started.
func WorkerName() string { return WorkerNameOf(os.Getpid()) }

// WorkerNameOf is WorkerName of the process pid.
func WorkerNameOf(pid int) string { return "pid-" + strconv.Itoa(pid) }
