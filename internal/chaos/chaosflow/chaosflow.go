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

	"github.com/jackc/pgx/v5/pgxpool"

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
CREATE TABLE IF NOT EXISTS chaos_effects (
	id     text PRIMARY KEY,
	run_id text NOT NULL,
	step   text NOT NULL,
	worker text NOT NULL,
	at     timestamptz NOT NULL DEFAULT clock_timestamp()
);
CREATE INDEX IF NOT EXISTS chaos_effects_run_idx ON chaos_effects (run_id, step);`

// retryFor is how long one application keeps trying its insert while
// the database does not answer: longer than a restart takes, shorter than
// a step's patience.
const retryFor = 30 * time.Second

// StepRetry is the retry policy of every step and compensation: an outage
// of a minute or two never uses it up.
var StepRetry = broker.Exponential(8, time.Second)

// ErrNoDatabase: the effects have nowhere to go.
var ErrNoDatabase = errors.New("chaos flows: no database (set ACEMQ_DATABASE_URL)")

// Effects applies the flows' side effects in PostgreSQL. A nil *Effects
// refuses every effect with ErrNoDatabase: a process that only starts
// runs never applies one.
type Effects struct {
	pool   *pgxpool.Pool
	worker string
}

// NewEffects returns Effects on the database at url, connecting when the
// first effect is applied; worker names this process in every row. An
// empty url gives nil, which refuses every effect. Its connections live
// as long as the process.
func NewEffects(url, worker string) (*Effects, error) {
	if url == "" {
		return nil, nil
	}
	cfg, err := pgxpool.ParseConfig(url)
	if err != nil {
		return nil, fmt.Errorf("chaos effects: database URL: %w", err)
	}
	pool, err := pgxpool.NewWithConfig(context.Background(), cfg)
	if err != nil {
		return nil, fmt.Errorf("chaos effects: %w", err)
	}
	return &Effects{pool: pool, worker: worker}, nil
}

// Apply applies the effect called step for the run whose message ctx's
// handler holds, after working o.WorkMillis. The insert is retried with
// the same id while the database does not answer, so that one
// application is one row however often it had to be sent.
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
	if tx, ok := persistence.Tx(ctx); ok {
		// It commits with the record that the step ran, or not at all: a
		// failure here rolls both back and the step is retried.
		_, err := tx.Exec(ctx, `INSERT INTO chaos_effects (id, run_id, step, worker) VALUES ($1, $2, $3, $4)`,
			broker.NewID(), m.RunID, step, e.worker)
		if err != nil {
			return fmt.Errorf("chaos effect %s of run %s: %w", step, m.RunID, err)
		}
		return nil
	}
	id := broker.NewID()
	deadline := time.Now().Add(retryFor)
	for {
		_, err := e.pool.Exec(ctx, `INSERT INTO chaos_effects (id, run_id, step, worker) VALUES ($1, $2, $3, $4)
			ON CONFLICT (id) DO NOTHING`, id, m.RunID, step, e.worker)
		if err == nil {
			return nil
		}
		if ctx.Err() != nil || time.Now().After(deadline) {
			return fmt.Errorf("chaos effect %s of run %s: %w", step, m.RunID, err)
		}
		select {
		case <-time.After(200 * time.Millisecond):
		case <-ctx.Done():
		}
	}
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
