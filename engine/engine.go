package engine

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"slices"
	"sync"
	"time"

	"go.opentelemetry.io/otel"
	"go.opentelemetry.io/otel/metric"
	"go.opentelemetry.io/otel/trace"

	"github.com/acemq/acemq-flow/broker"
	"github.com/acemq/acemq-flow/dsl"
	"github.com/acemq/acemq-flow/engine/journal"
	"github.com/acemq/acemq-flow/patterns"
)

// Defaults of Config.
const (
	// DefaultConcurrency is how many runs one worker works on at once in
	// each step, unless the step says otherwise.
	DefaultConcurrency = 8
	// DefaultIdempotencyWindow is how long the engine's default in-memory
	// store remembers a step it ran: long enough for any redelivery, short
	// enough that a busy worker does not fill its memory with keys.
	DefaultIdempotencyWindow = 15 * time.Minute
	// DefaultDeliveryLimit is how many times a delivery may come back
	// unsettled before a worker gives it up unrun: the delivery limit of
	// broker.DeliveryLimitPolicy (and RabbitMQ 4's default), so that the
	// engine, which records why, sets such a message aside on the last
	// delivery the broker makes.
	DefaultDeliveryLimit = broker.DeliveryLimit
)

// Config configures an Engine. The zero value is not usable (Conn is
// required); every other field has a default.
type Config struct {
	// Conn is the broker connection runs are published and consumed on.
	Conn *broker.Conn
	// Journal records runs (nil = an in-memory journal of this process).
	Journal journal.Journal
	// Writer configures the batching writer in front of Journal. Its
	// Keeper, when not set, is Store when Store is a journal.Keeper
	// (persistence.SQLIdempotencyStore), or else one that keeps each
	// result and confirmation through Store's own calls.
	Writer journal.WriterConfig
	// Store remembers which steps ran, and keeps what a step produced until
	// it is sent on (nil = in memory, DefaultIdempotencyWindow: right for
	// one worker; give several workers a shared one, such as
	// persistence.SQLIdempotencyStore).
	Store patterns.ResultStore
	// Logger receives the engine's logs (nil = the connection's).
	Logger *slog.Logger
	// MeterProvider and TracerProvider receive metrics and spans (nil =
	// the connection's, or the otel globals).
	MeterProvider  metric.MeterProvider
	TracerProvider trace.TracerProvider
	// Retry is the retry policy of steps that set none (nil =
	// broker.DefaultRetry()).
	Retry *broker.RetryPolicy
	// Concurrency is a step's concurrency when it sets none (0 = 8): how
	// many calls of its function run at once in this worker
	// (dsl.StepDef.Concurrency).
	Concurrency int
	// CloseTimeout bounds a worker's drain (0 = the connection's
	// CloseTimeout).
	CloseTimeout time.Duration
	// InProgressDelay is how long a step found running elsewhere waits
	// before it is looked at again (0 = the connection's).
	InProgressDelay time.Duration
	// Housekeeping is how often a worker deletes, in small batches, what
	// the journal and the store keep past their retention: runs that ended
	// longer ago than the journal's Retention (persistence.SQLJournal) and
	// expired idempotency keys (persistence.SQLIdempotencyStore). 0 = every
	// 10 minutes; negative = never. It runs only for a journal or store
	// that can.
	Housekeeping time.Duration
	// CronGuard lets every worker run the flows' cron triggers while each
	// tick starts one run (persistence.SQLCronGuard, on the workers'
	// shared database).
	CronGuard CronGuard
	// DeliveryLimit is how many times a step's or a compensation's
	// delivery may come back unsettled (its x-delivery-count, which quorum
	// queues keep: every worker that took it died, or lost its connection,
	// holding it) before a worker gives it up without running it, to its
	// dead-letter queue, recording why in the journal. 0 =
	// DefaultDeliveryLimit; negative = never. Keep it at or below the
	// queues' delivery-limit policy, or the broker dead-letters such a
	// message first, and the journal does not hear of it.
	DeliveryLimit int
	// Heartbeat is how often a worker reports itself to the journal, when
	// the journal keeps workers' reports (journal.WorkerStore: both
	// shipped journals do): the fleet view (package engine/fleet) lists
	// the workers from these reports, and shows one lost once
	// journal.LostAfter intervals passed without one. A report is one
	// statement per interval, never one per message. 0 =
	// DefaultHeartbeat; negative = no reports.
	Heartbeat time.Duration
	// Readiness, when set, is what a worker's reports say of its
	// readiness: the checks its process's /readyz runs, run when each
	// report is made (observe.ReportReadiness gives such a function). nil
	// = the one check "worker": its consumers run (Worker.Err).
	Readiness func(ctx context.Context, w *Worker) []journal.Check
	// Build is the version of the binary the workers run, which their
	// reports carry ("" = none).
	Build string
	// CronAlone runs the cron triggers without a CronGuard, on this
	// worker alone: it holds a lock on the broker (an exclusive consumer on
	// <flow>.cron-lock), and a second worker asking for it is refused with
	// ErrCronLocked. Without either, no worker fires cron triggers.
	CronAlone bool
}

// DefaultHousekeeping is how often a worker purges by default.
const DefaultHousekeeping = 10 * time.Minute

// Engine compiles and runs flows on one connection. Register flows, then
// Start runs (from any process) and StartWorker (in the processes that work
// them). It is safe for concurrent use. Close it to flush its journal.
type Engine struct {
	cfg     Config
	conn    *broker.Conn
	log     *slog.Logger
	journal journal.Journal
	// data is the journal as a keeper of run data, nil when it is not one.
	data journal.DataStore
	// joins is the journal as a keeper of joins, nil when it is not one:
	// a flow that forks needs one.
	joins journal.JoinStore
	// limits is the journal as a keeper of steps' limits, nil when it is
	// not one: a flow with a ConcurrencyKey or a RateLimit needs one.
	limits journal.LimitStore
	// places takes a limited step's place and claims its work at once,
	// when the store and the journal can (nil otherwise).
	places placeClaimer
	// cancels are the runs known cancelled, and the steps in flight a
	// cancellation stops.
	cancels cancels
	writer  *journal.Writer
	store   patterns.ResultStore
	// once runs every unit that must happen once (a step, a compensation)
	// on store.
	once    *patterns.Once
	metrics *metrics
	tracer  trace.Tracer

	mu    sync.RWMutex
	flows map[string]*flow
	order []string
}

// New returns an engine on cfg.Conn. It refuses a nil connection and
// out-of-range settings with an error matching ErrInvalidConfig.
func New(cfg Config) (*Engine, error) {
	if cfg.Conn == nil {
		return nil, fmt.Errorf("%w: nil connection", ErrInvalidConfig)
	}
	if cfg.Concurrency < 0 || cfg.CloseTimeout < 0 || cfg.InProgressDelay < 0 {
		return nil, fmt.Errorf("%w: negative concurrency or duration", ErrInvalidConfig)
	}
	if cfg.Retry != nil {
		if err := cfg.Retry.Validate(); err != nil {
			return nil, fmt.Errorf("%w: %w", ErrInvalidConfig, err)
		}
	} else {
		r := broker.DefaultRetry()
		cfg.Retry = &r
	}
	if cfg.Concurrency == 0 {
		cfg.Concurrency = DefaultConcurrency
	}
	cc := cfg.Conn.Config()
	if cfg.CloseTimeout == 0 {
		cfg.CloseTimeout = cc.CloseTimeout
	}
	if cfg.InProgressDelay == 0 {
		cfg.InProgressDelay = cc.InProgressDelay
	}
	if cfg.Housekeeping == 0 {
		cfg.Housekeeping = DefaultHousekeeping
	}
	if cfg.Heartbeat == 0 {
		cfg.Heartbeat = DefaultHeartbeat
	}
	if cfg.DeliveryLimit == 0 {
		cfg.DeliveryLimit = DefaultDeliveryLimit
	}
	if cfg.Logger == nil {
		cfg.Logger = cfg.Conn.Logger()
	}
	if cfg.MeterProvider == nil {
		cfg.MeterProvider = cc.MeterProvider
	}
	if cfg.MeterProvider == nil {
		cfg.MeterProvider = otel.GetMeterProvider()
	}
	if cfg.TracerProvider == nil {
		cfg.TracerProvider = cc.TracerProvider
	}
	if cfg.TracerProvider == nil {
		cfg.TracerProvider = otel.GetTracerProvider()
	}
	if cfg.Journal == nil {
		j, err := journal.NewMemory(0)
		if err != nil {
			return nil, err
		}
		cfg.Journal = j
	}
	if cfg.Store == nil {
		s, err := patterns.NewInMemoryIdempotencyStore(DefaultIdempotencyWindow)
		if err != nil {
			return nil, err
		}
		cfg.Store = s
	}
	m, err := newMetrics(cfg.MeterProvider)
	if err != nil {
		return nil, err
	}
	if cfg.Writer.Logger == nil {
		cfg.Writer.Logger = cfg.Logger
	}
	if cfg.Writer.Keeper == nil {
		cfg.Writer.Keeper = keeperOf(cfg.Store)
	}
	w, err := journal.NewWriter(cfg.Journal, cfg.Writer)
	if err != nil {
		return nil, fmt.Errorf("%w: %w", ErrInvalidConfig, err)
	}
	once, err := patterns.NewOnce(cfg.Store, patterns.OnceConfig{Logger: cfg.Logger})
	if err != nil {
		return nil, fmt.Errorf("%w: %w", ErrInvalidConfig, err)
	}
	data, _ := cfg.Journal.(journal.DataStore)
	joins, _ := cfg.Journal.(journal.JoinStore)
	limits, _ := cfg.Journal.(journal.LimitStore)
	places, _ := cfg.Store.(placeClaimer)
	if places != nil && (limits == nil || !places.ClaimsPlaces(limits)) {
		places = nil
	}
	return &Engine{
		cfg: cfg, conn: cfg.Conn, log: cfg.Logger, journal: cfg.Journal, data: data, joins: joins, limits: limits, places: places, writer: w, store: cfg.Store, once: once,
		metrics: m, tracer: cfg.TracerProvider.Tracer(instrumentation), flows: map[string]*flow{},
	}, nil
}

// instrumentation is the name the engine's metrics and spans are reported
// under.
const instrumentation = "github.com/acemq/acemq-flow/engine"

// Register compiles flows and makes them known to the engine: Start can
// start them and StartWorker works them. It refuses a flow that was not
// built (its dsl.BuildError), one whose retry policies or codec the engine
// cannot run, and a name already registered (ErrFlowRegistered); nothing
// is registered then.
func (e *Engine) Register(flows ...*dsl.FlowDef) error {
	compiled := make([]*flow, 0, len(flows))
	for i, def := range flows {
		if def == nil {
			return fmt.Errorf("%w: flow %d is nil", ErrInvalidConfig, i)
		}
		f, err := compile(def, e.cfg)
		if err != nil {
			return err
		}
		compiled = append(compiled, f)
	}
	e.mu.Lock()
	defer e.mu.Unlock()
	for i, f := range compiled {
		if _, dup := e.flows[f.name]; dup || slices.ContainsFunc(compiled[:i], func(o *flow) bool { return o.name == f.name }) {
			return fmt.Errorf("%w: %q", ErrFlowRegistered, f.name)
		}
	}
	for _, f := range compiled {
		e.flows[f.name] = f
		e.order = append(e.order, f.name)
	}
	return nil
}

// canRun refuses to work a flow with a Transactional step unless the
// store can run it. Starting its runs needs no such store.
func (e *Engine) canRun(f *flow) error {
	if f.forks && e.joins == nil {
		return fmt.Errorf("%w: flow %q has a Parallel or a ForEach and the engine's journal (%T) keeps no joins; give it a journal that does (the Memory journal, or PostgreSQL's)",
			ErrNoJoins, f.name, e.journal)
	}
	if f.limited() && e.limits == nil {
		return fmt.Errorf("%w: flow %q has a step with a ConcurrencyKey or a RateLimit and the engine's journal (%T) keeps no limits; give it a journal that does (the Memory journal, or PostgreSQL's)",
			ErrNoLimits, f.name, e.journal)
	}
	if err := e.canRunChildren(f); err != nil {
		return err
	}
	if err := e.canWait(f); err != nil {
		return err
	}
	if e.once.Transactional() {
		return nil
	}
	for _, s := range f.steps {
		if s.Transactional {
			return fmt.Errorf("%w: flow %q step %q is Transactional and the engine's Store is a %T; give it a persistence.SQLIdempotencyStore on the database the step writes to",
				ErrNoTransactions, f.name, s.Name, e.store)
		}
	}
	return nil
}

// flow returns the registered flow called name.
func (e *Engine) flow(name string) (*flow, error) {
	e.mu.RLock()
	defer e.mu.RUnlock()
	f, ok := e.flows[name]
	if !ok {
		known := slices.Clone(e.order)
		slices.Sort(known)
		return nil, fmt.Errorf("%w: %q (registered: %v)", ErrUnknownFlow, name, known)
	}
	return f, nil
}

// registered is every registered flow, in registration order.
func (e *Engine) registered() []*flow {
	e.mu.RLock()
	defer e.mu.RUnlock()
	out := make([]*flow, len(e.order))
	for i, n := range e.order {
		out[i] = e.flows[n]
	}
	return out
}

// Conn is the engine's connection.
func (e *Engine) Conn() *broker.Conn { return e.conn }

// now is the time on the connection's clock: every time that decides what
// happens to a run (a delay's due time, a hold's end, whether a wait can
// still be cancelled) and every time the journal records.
func (e *Engine) now() time.Time { return e.conn.Clock().Now() }

// Journal is the journal the engine records runs in, for reading.
func (e *Engine) Journal() journal.Journal { return e.journal }

// Flush waits until every event recorded so far is in the journal, bounded
// by ctx: what a command that started a run and is about to exit needs.
func (e *Engine) Flush(ctx context.Context) error { return e.writer.Flush(ctx) }

// Close writes what the journal writer still holds, bounded by ctx (the
// engine's CloseTimeout when ctx has none), and stops it. Workers should
// be closed first. It does not close the connection, which the caller
// owns. Idempotent.
func (e *Engine) Close(ctx context.Context) error {
	if _, ok := ctx.Deadline(); !ok {
		var cancel context.CancelFunc
		ctx, cancel = context.WithTimeout(ctx, e.cfg.CloseTimeout)
		defer cancel()
	}
	err := e.writer.Close(ctx)
	if errors.Is(err, journal.ErrWriterClosed) {
		return nil
	}
	return err
}

// confirm confirms key, once what its unit came to is recorded: with the
// journal writer's next batch, without waiting for it (nothing is lost
// when it never is: a redelivery of the key's message sends its kept
// result again, which the next step finds done).
func (e *Engine) confirm(ctx context.Context, key string) {
	if err := e.writer.Confirm(ctx, key); err != nil {
		e.once.Confirm(ctx, key)
	}
}

// keeperOf is what keeps units' results and confirmations with the
// journal's events: the store itself when it writes both in one commit
// (persistence.SQLIdempotencyStore, a journal.Keeper), or the events
// recorded first and then each key kept by the store's own calls.
func keeperOf(store patterns.ResultStore) journal.Keeper {
	if k, ok := store.(journal.Keeper); ok {
		return k
	}
	return storeKeeper{store}
}

// storeKeeper keeps what a journal.Keeper is given in a store that is not
// one, in the order that leaves nothing lost when it stops half way: each
// result kept first (Complete), so that a redelivery carries it out
// instead of doing the work again; then the events; then each
// confirmation (Confirm, when the store has it), once what it confirms is
// recorded.
type storeKeeper struct{ store patterns.ResultStore }

func (k storeKeeper) RecordKept(ctx context.Context, j journal.Journal, events []journal.Event, kept []journal.Kept) error {
	for _, x := range kept {
		if x.Result != nil || !x.Confirmed {
			if err := k.store.Complete(ctx, x.Key, x.Result); err != nil {
				return fmt.Errorf("keep %q: %w", x.Key, err)
			}
		}
	}
	if len(events) > 0 {
		if err := j.Record(ctx, events); err != nil {
			return err
		}
	}
	confirmer, ok := k.store.(patterns.Confirmer)
	for _, x := range kept {
		if x.Confirmed && ok {
			if err := confirmer.Confirm(ctx, x.Key); err != nil {
				return fmt.Errorf("confirm %q: %w", x.Key, err)
			}
		}
	}
	return nil
}
