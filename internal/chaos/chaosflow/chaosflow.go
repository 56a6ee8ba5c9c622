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
)

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

// Flows are the chaos flows, named prefix.Pipeline and prefix.Saga, their
// effects applied by fx.
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
	return []*dsl.FlowDef{dsl.Flow(prefix+"."+Pipeline, pipeline...), dsl.Flow(prefix+"."+Saga, saga...)}
}

// WorkerName names this process in the effects it applies: its pid,
// which the driver knows for every worker it started.
func WorkerName() string { return WorkerNameOf(os.Getpid()) }

// WorkerNameOf is WorkerName of the process pid.
func WorkerNameOf(pid int) string { return "pid-" + strconv.Itoa(pid) }
