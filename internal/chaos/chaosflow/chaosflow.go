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
//
// The waits flow's limited step also marks each run in it, while it is
// there, in InStepTable, outside its transaction so that every worker
// sees the mark at once, and records in MostInStepTable the most runs of
// its key it saw there together: the driver reads from it whether the
// limit held across every worker.
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
	// Tenant is the key of the waits flow's limited step (Tenant(i)).
	Tenant string `json:"tenant,omitempty"`
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
	// Waits is the flow that waits for a signal and then goes through a
	// step with a concurrency limit per tenant: WaitsFirst, the WaitFor
	// WaitsSignal, and WaitsLast, at most TenantLimit runs of a tenant in
	// it at once.
	Waits = "waits"
	// Deploy is the flow of the rolling deploy, in the versions
	// DeployFlow builds: a, b and c; then a, DeployInserted, DeployRenamedTo
	// (b renamed) and c.
	Deploy = "deploy"
)

// The waits flow's shape.
const (
	WaitsFirst  = "prepare"
	WaitsSignal = "approval"
	WaitsLast   = "export"
	// WaitsTimeout is how long a run waits for its signal: far longer than
	// any scenario, so that a signal lost stalls its run rather than
	// letting it time out.
	WaitsTimeout = 10 * time.Minute
	// Tenants is how many tenants the runs are spread over; TenantLimit
	// how many runs of one may be in WaitsLast at once.
	Tenants     = 10
	TenantLimit = 2
)

// WaitsSteps are the waits flow's steps with an effect, in order.
var WaitsSteps = []string{WaitsFirst, WaitsLast}

// Tenant is the tenant of the i-th run of the waits flow.
func Tenant(i int) string { return fmt.Sprintf("t%02d", i%Tenants) }

// Approval is the signal the waits flow waits for: Token says which
// signal it is, and WaitsLast records it with its effect, so that the
// driver sees each run go on with the signal it was sent.
type Approval struct {
	Token string `json:"token"`
}

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

// The chaos flows' tables. EffectsTable is where the effects land, one
// row per application, with the signal a step after a wait was given.
// InStepTable holds a mark per run in the waits flow's limited step and
// process it is there on; MostInStepTable the most runs of each tenant
// seen there at once; KilledTable the worker processes the driver
// SIGKILLed, whose marks no longer count: the driver writes a worker
// there before it kills it.
const (
	EffectsTable    = "chaos_effects"
	InStepTable     = "chaos_in_step"
	MostInStepTable = "chaos_most_in_step"
	KilledTable     = "chaos_killed"
	// InFlightTable holds a mark per step and compensation a worker is
	// inside, written and taken away outside its transaction: a step's
	// claim is its transaction (persistence.SQLIdempotencyStore.ClaimInTx),
	// which a SIGKILL rolls back, so nothing else says what a killed
	// worker held.
	InFlightTable = "chaos_in_flight"
)

// CreateTables creates the chaos flows' tables. An effect's id is the
// application's own, so that an insert retried after its answer was lost
// is not counted twice.
const CreateTables = `
CREATE TABLE IF NOT EXISTS ` + EffectsTable + ` (
	id     text PRIMARY KEY,
	run_id text NOT NULL,
	step   text NOT NULL,
	worker text NOT NULL,
	signal text,
	at     timestamptz NOT NULL DEFAULT clock_timestamp()
);
CREATE INDEX IF NOT EXISTS ` + EffectsTable + `_run_idx ON ` + EffectsTable + ` (run_id, step);
CREATE TABLE IF NOT EXISTS ` + InStepTable + ` (
	tenant text NOT NULL,
	run_id text NOT NULL,
	worker text NOT NULL,
	PRIMARY KEY (run_id, worker)
);
CREATE INDEX IF NOT EXISTS ` + InStepTable + `_tenant_idx ON ` + InStepTable + ` (tenant);
CREATE TABLE IF NOT EXISTS ` + MostInStepTable + ` (
	tenant text PRIMARY KEY,
	most   integer NOT NULL
);
CREATE TABLE IF NOT EXISTS ` + KilledTable + ` (
	worker text PRIMARY KEY
);
CREATE TABLE IF NOT EXISTS ` + InFlightTable + ` (
	id     text PRIMARY KEY,
	worker text NOT NULL,
	run_id text NOT NULL,
	step   text NOT NULL
);`

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
	// pool marks runs in and out of the limited step, each statement
	// committed on its own.
	pool *pgxpool.Pool
}

// inStepConns is the most connections a worker marks runs in and out of
// the limited step on: a statement each, short, never held while a step
// works.
const inStepConns = 8

// NewEffects returns Effects for a worker on the database at url (the
// engine's, whose step transactions the effects join; the limited step
// marks its runs there on connections of its own); worker names this
// process in every row. An empty url gives nil, which refuses every
// effect.
func NewEffects(url, worker string) (*Effects, error) {
	if url == "" {
		return nil, nil
	}
	cfg, err := pgxpool.ParseConfig(url)
	if err != nil {
		return nil, fmt.Errorf("chaos effects: the database URL: %w", err)
	}
	cfg.MaxConns = inStepConns
	pool, err := pgxpool.NewWithConfig(context.Background(), cfg)
	if err != nil {
		return nil, fmt.Errorf("chaos effects: %w", err)
	}
	return &Effects{worker: worker, pool: pool}, nil
}

// Apply applies the effect called step for the run whose message ctx's
// handler holds, after working o.WorkMillis, in the step's transaction:
// it commits with the record that the step ran, or not at all, so that a
// failure rolls both back and the step is retried.
func (e *Effects) Apply(ctx context.Context, o Order, step string) error {
	if e == nil {
		return ErrNoDatabase
	}
	runID, err := handledRun(ctx, step)
	if err != nil {
		return err
	}
	return e.apply(ctx, runID, o, step, "")
}

// handledRun is the run whose message ctx's handler holds.
func handledRun(ctx context.Context, step string) (string, error) {
	m, ok := broker.Handling(ctx)
	if !ok || m.RunID == "" {
		return "", broker.Fatal(fmt.Errorf("chaos effect %s: no run id on the message being handled", step))
	}
	return m.RunID, nil
}

// apply is Apply for runID, with the signal the step was given ("" for
// none).
func (e *Effects) apply(ctx context.Context, runID string, o Order, step, signal string) (err error) {
	mark := broker.NewID()
	if _, err := e.pool.Exec(ctx, `INSERT INTO `+InFlightTable+` (id, worker, run_id, step) VALUES ($1, $2, $3, $4)`,
		mark, e.worker, runID, step); err != nil {
		return fmt.Errorf("chaos effect %s of run %s: mark it in flight: %w", step, runID, err)
	}
	defer func() {
		_, derr := e.pool.Exec(context.WithoutCancel(ctx), `DELETE FROM `+InFlightTable+` WHERE id = $1`, mark)
		err = errors.Join(err, derr)
	}()
	if o.WorkMillis > 0 {
		select {
		case <-time.After(time.Duration(o.WorkMillis) * time.Millisecond):
		case <-ctx.Done():
			return ctx.Err()
		}
	}
	tx, ok := persistence.Tx(ctx)
	if !ok {
		return broker.Fatal(fmt.Errorf("chaos effect %s of run %s: not in a step's transaction (the step is not Transactional)", step, runID))
	}
	_, err = tx.Exec(ctx, `INSERT INTO `+EffectsTable+` (id, run_id, step, worker, signal) VALUES ($1, $2, $3, $4, NULLIF($5, ''))`,
		broker.NewID(), runID, step, e.worker, signal)
	if err != nil {
		return fmt.Errorf("chaos effect %s of run %s: %w", step, runID, err)
	}
	return nil
}

// Export is the waits flow's limited step, WaitsLast, for the run whose
// signal s carries: it marks the run in the step for its tenant, records
// the most runs of the tenant in the step it sees, applies its effect
// with the signal's token, looks again, and takes the mark away however
// the step ends. Two looks, on entry and on the way out, so that of runs
// in the step together the last to come in sees them all even if one of
// the others leaves first.
func (e *Effects) Export(ctx context.Context, s dsl.Signalled[Order, Approval]) (err error) {
	if e == nil {
		return ErrNoDatabase
	}
	runID, err := handledRun(ctx, WaitsLast)
	if err != nil {
		return err
	}
	o := s.Input
	if _, err := e.pool.Exec(ctx, `INSERT INTO `+InStepTable+` (tenant, run_id, worker) VALUES ($1, $2, $3)
		ON CONFLICT DO NOTHING`, o.Tenant, runID, e.worker); err != nil {
		return fmt.Errorf("chaos %s of run %s: mark it in the step: %w", WaitsLast, runID, err)
	}
	defer func() {
		// Even when the delivery's context is gone: a mark left behind
		// would count the run in the step for ever. Every mark of the
		// run goes, a killed process's too: the run has left the step.
		_, derr := e.pool.Exec(context.WithoutCancel(ctx), `DELETE FROM `+InStepTable+` WHERE run_id = $1`, runID)
		if derr != nil {
			err = errors.Join(err, fmt.Errorf("chaos %s of run %s: take its mark out of the step: %w", WaitsLast, runID, derr))
		}
	}()
	if err := e.look(ctx, o.Tenant); err != nil {
		return fmt.Errorf("chaos %s of run %s: %w", WaitsLast, runID, err)
	}
	if err := e.apply(ctx, runID, o, WaitsLast, s.Signal.Token); err != nil {
		return err
	}
	if err := e.look(ctx, o.Tenant); err != nil {
		return fmt.Errorf("chaos %s of run %s: %w", WaitsLast, runID, err)
	}
	return nil
}

// look counts the runs of tenant marked in the limited step by processes
// the driver did not kill, and records the count if it is the most seen.
// Runs, not marks: a run delivered again on another worker while a killed
// one's mark is still there is one run, holding one place.
func (e *Effects) look(ctx context.Context, tenant string) error {
	_, err := e.pool.Exec(ctx, `INSERT INTO `+MostInStepTable+` (tenant, most)
		SELECT $1, count(DISTINCT s.run_id) FROM `+InStepTable+` s
		WHERE s.tenant = $1 AND NOT EXISTS (SELECT 1 FROM `+KilledTable+` k WHERE k.worker = s.worker)
		ON CONFLICT (tenant) DO UPDATE SET most = GREATEST(`+MostInStepTable+`.most, EXCLUDED.most)`, tenant)
	if err != nil {
		return fmt.Errorf("count the runs of tenant %s in the step: %w", tenant, err)
	}
	return nil
}

// Flows are the chaos flows, named prefix.Pipeline, prefix.Saga,
// prefix.Forks and prefix.Waits, their effects applied by fx.
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
	return []*dsl.FlowDef{dsl.Flow(prefix+"."+Pipeline, pipeline...), dsl.Flow(prefix+"."+Saga, saga...), forks(prefix, fx, step),
		waits(prefix, fx, step)}
}

// waits is the flow prefix.Waits.
func waits(prefix string, fx *Effects, step func(string) func(context.Context, Order) (Order, error)) *dsl.FlowDef {
	export := func(ctx context.Context, s dsl.Signalled[Order, Approval]) (Order, error) {
		return s.Input, fx.Export(ctx, s)
	}
	return dsl.Flow(prefix+"."+Waits,
		dsl.Example(Order{ID: "example", Tenant: Tenant(0)}),
		dsl.Step(WaitsFirst, step(WaitsFirst)).Retry(StepRetry).Transactional(),
		dsl.WaitFor[Order, Approval](WaitsSignal, WaitsTimeout),
		dsl.Step(WaitsLast, export).Retry(StepRetry).Transactional().ConcurrencyKey("payload.input.tenant", TenantLimit))
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

// The deploy flow's versions (DeployFlow, CHAOS_FLOW_VERSION in the chaos
// flow binary): DeployV1 is a, b, c; DeployV2 renames b to DeployRenamedTo
// (dsl.Renamed) and inserts DeployInserted before it; DeployV2Unrenamed is
// DeployV2 without the Renamed, the deploy `flows check` must refuse while
// runs are at b.
const (
	DeployV1          = "1"
	DeployV2          = "2"
	DeployV2Unrenamed = "2-unrenamed"
)

// The deploy flow's steps that change between its versions, and how many
// runs each worker works on at once in its slow steps (b, DeployRenamedTo
// and c, which work Order.WorkMillis each; a and DeployInserted do not
// work): few, so that thousands of runs wait at them during the deploy.
const (
	DeployRenamedFrom = "b"
	DeployRenamedTo   = "b2"
	DeployInserted    = "audit"
	DeployConcurrency = 4
)

// The deploy flow's routes: DeploySteps of DeployV1, DeployStepsV2 of
// DeployV2 and DeployV2Unrenamed.
var (
	DeploySteps   = []string{"a", DeployRenamedFrom, "c"}
	DeployStepsV2 = []string{"a", DeployInserted, DeployRenamedTo, "c"}
)

// ErrUnknownVersion: DeployFlow has no such version.
var ErrUnknownVersion = errors.New("chaos deploy flow: unknown version")

// DeployFlow is the flow prefix.Deploy at version (DeployV1, DeployV2 or
// DeployV2Unrenamed), its effects applied by fx: each step applies the
// effect of its own name, so that b's applied by a worker of version 1
// and DeployRenamedTo's applied by one of version 2 tell which name a run
// went through the step under.
func DeployFlow(prefix string, fx *Effects, version string) (*dsl.FlowDef, error) {
	step := func(name string, work bool) func(context.Context, Order) (Order, error) {
		return func(ctx context.Context, o Order) (Order, error) {
			worked := o
			if !work {
				worked.WorkMillis = 0
			}
			return o, fx.Apply(ctx, worked, name)
		}
	}
	slow := func(name string) dsl.Part {
		return dsl.Step(name, step(name, true)).Retry(StepRetry).Transactional().Concurrency(DeployConcurrency)
	}
	parts := []dsl.Part{dsl.Example(Order{ID: "example"}), dsl.Step("a", step("a", false)).Retry(StepRetry).Transactional()}
	switch version {
	case DeployV1:
		parts = append(parts, slow(DeployRenamedFrom))
	case DeployV2, DeployV2Unrenamed:
		parts = append(parts, dsl.Step(DeployInserted, step(DeployInserted, false)).Retry(StepRetry).Transactional(),
			slow(DeployRenamedTo))
		if version == DeployV2 {
			parts = append(parts, dsl.Renamed(DeployRenamedFrom, DeployRenamedTo))
		}
	default:
		return nil, fmt.Errorf("%w %q (want %s, %s or %s)", ErrUnknownVersion, version, DeployV1, DeployV2, DeployV2Unrenamed)
	}
	return dsl.Flow(prefix+"."+Deploy, append(parts, slow("c"))...), nil
}

// WorkerName names this process in the effects it applies: its pid,
// which the driver knows for every worker it started.
func WorkerName() string { return WorkerNameOf(os.Getpid()) }

// WorkerNameOf is WorkerName of the process pid.
func WorkerNameOf(pid int) string { return "pid-" + strconv.Itoa(pid) }
