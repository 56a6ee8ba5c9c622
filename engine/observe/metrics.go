package observe

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"slices"
	"sync"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/collectors"
	"github.com/prometheus/client_golang/prometheus/promhttp"
	"github.com/prometheus/otlptranslator"
	"go.opentelemetry.io/otel/attribute"
	otelprom "go.opentelemetry.io/otel/exporters/prometheus"
	"go.opentelemetry.io/otel/metric"
	sdkmetric "go.opentelemetry.io/otel/sdk/metric"
	"go.opentelemetry.io/otel/sdk/resource"

	"github.com/acemq/acemq-flow/broker"
	"github.com/acemq/acemq-flow/engine"
)

// instrumentation is the name this package's own instruments are reported
// under.
const instrumentation = "github.com/acemq/acemq-flow/engine/observe"

// DepthTimeout bounds how long one scrape waits for the broker to report
// queue depths: a broker that is away must not hold /metrics up.
const DepthTimeout = 2 * time.Second

// Queue roles, on acemq.queue.depth.
const (
	RoleStep           = "step"
	RoleDeadLetter     = "dead_letter"
	RoleParked         = "parked"
	RoleCompensation   = "compensation"
	RoleCompensateNow  = "compensate_now"
	RoleCompensationDL = "compensation_dead_letter"
)

// MetricsConfig configures NewMetrics. The zero value is the defaults.
type MetricsConfig struct {
	// Resource describes the process on target_info (nil = the SDK's
	// default: service.name from OTEL_SERVICE_NAME, or unknown_service).
	Resource *resource.Resource
	// WithoutRuntime leaves out the Go runtime (go_*) and process
	// (process_*) metrics that are otherwise served beside the
	// OpenTelemetry ones.
	WithoutRuntime bool
}

// Metrics is an OpenTelemetry MeterProvider exported in the Prometheus
// format on a registry of its own. It is safe for concurrent use. Shut it
// down when the process ends.
type Metrics struct {
	provider *sdkmetric.MeterProvider
	registry *prometheus.Registry
	handler  http.Handler
	meter    metric.Meter

	ladderOnce sync.Once
	ladderErr  error
	readyOnce  sync.Once
	readyErr   error
	mu         sync.Mutex
	ladders    []*broker.Conn
}

// NewMetrics returns a MeterProvider exporting to a private Prometheus
// registry with an explicit translation strategy (see the package
// documentation). It fails only when the exporter or the registry refuse
// their setup.
func NewMetrics(cfg MetricsConfig) (*Metrics, error) {
	reg := prometheus.NewRegistry()
	exp, err := otelprom.New(
		otelprom.WithRegisterer(reg),
		otelprom.WithTranslationStrategy(otlptranslator.UnderscoreEscapingWithSuffixes),
		// No otel_scope_name, otel_scope_version (and otel_scope_*
		// attribute) labels on every series: the metric names say
		// whose they are, and the labels would be noise in every query.
		otelprom.WithoutScopeInfo(),
		// A histogram whose instrument chose no buckets gets the engine's
		// (the SDK's default ones are for milliseconds); one that chose
		// its own keeps them: the broker's messaging.* and acemq.*
		// histograms the messaging conventions' buckets, the engine's its
		// own.
		otelprom.WithAggregationSelector(func(k sdkmetric.InstrumentKind) sdkmetric.Aggregation {
			if k == sdkmetric.InstrumentKindHistogram {
				return sdkmetric.AggregationExplicitBucketHistogram{Boundaries: engine.DurationBuckets()}
			}
			return sdkmetric.DefaultAggregationSelector(k)
		}),
	)
	if err != nil {
		return nil, fmt.Errorf("observe: prometheus exporter: %w", err)
	}
	if !cfg.WithoutRuntime {
		if err := errors.Join(
			reg.Register(collectors.NewGoCollector()),
			reg.Register(collectors.NewProcessCollector(collectors.ProcessCollectorOpts{})),
		); err != nil {
			return nil, fmt.Errorf("observe: runtime collectors: %w", err)
		}
	}
	opts := []sdkmetric.Option{sdkmetric.WithReader(exp)}
	if cfg.Resource != nil {
		opts = append(opts, sdkmetric.WithResource(cfg.Resource))
	}
	mp := sdkmetric.NewMeterProvider(opts...)
	return &Metrics{
		provider: mp,
		registry: reg,
		handler:  promhttp.HandlerFor(reg, promhttp.HandlerOpts{ErrorHandling: promhttp.ContinueOnError}),
		meter:    mp.Meter(instrumentation),
	}, nil
}

// MeterProvider is what to give broker.Config and engine.Config.
func (m *Metrics) MeterProvider() metric.MeterProvider { return m.provider }

// Gatherer is the private registry, for a caller that serves or reads it
// another way.
func (m *Metrics) Gatherer() prometheus.Gatherer { return m.registry }

// Handler serves the registry in the Prometheus text format (what
// /metrics answers). A metric that cannot be gathered is left out and
// the rest still served.
func (m *Metrics) Handler() http.Handler { return m.handler }

// Shutdown stops the MeterProvider; instruments record nothing after it.
func (m *Metrics) Shutdown(ctx context.Context) error {
	if err := m.provider.Shutdown(ctx); err != nil {
		return fmt.Errorf("observe: shut down meter provider: %w", err)
	}
	return nil
}

// ObserveLadder serves conn's scheduler ladder counters (Conn.LadderStats)
// as the counters acemq.schedule.scheduled, .delivered, .hops and
// .malformed, labelled with the ladder's name (connections sharing a
// ladder are summed), and the gauge acemq.schedule.backlog: the messages
// waiting in the ladder's control queue, read from the broker at scrape
// time within DepthTimeout (left out when it does not answer, or before
// the ladder is declared). It refuses a nil connection.
func (m *Metrics) ObserveLadder(conn *broker.Conn) error {
	if conn == nil {
		return errors.New("observe: ObserveLadder: nil connection")
	}
	m.ladderOnce.Do(func() { m.ladderErr = m.registerLadder() })
	if m.ladderErr != nil {
		return m.ladderErr
	}
	m.mu.Lock()
	defer m.mu.Unlock()
	if !slices.Contains(m.ladders, conn) {
		m.ladders = append(m.ladders, conn)
	}
	return nil
}

// registerLadder creates the ladder instruments and the one callback that
// reports every observed connection: one callback, so that two
// connections on one ladder are summed rather than reported twice.
func (m *Metrics) registerLadder() error {
	counter := func(name, unit, desc string) (metric.Int64ObservableCounter, error) {
		return m.meter.Int64ObservableCounter(name, metric.WithUnit(unit), metric.WithDescription(desc))
	}
	scheduled, e1 := counter("acemq.schedule.scheduled", "{message}",
		"Messages put into the scheduler ladder (scheduled messages, retries and put-backs), by ladder.")
	delivered, e2 := counter("acemq.schedule.delivered", "{message}",
		"Messages the ladder delivered to their destination, by ladder.")
	hops, e3 := counter("acemq.schedule.hops", "{hop}",
		"Moves of a message between rungs of the ladder, by ladder; hops over delivered is the average per message.")
	malformed, e4 := counter("acemq.schedule.malformed", "{message}",
		"Messages dropped from the ladder's control queue for want of schedule headers, by ladder.")
	backlog, e5 := m.meter.Int64ObservableGauge("acemq.schedule.backlog", metric.WithUnit("{message}"),
		metric.WithDescription("Messages due and waiting in the ladder's control queue to be moved on, by ladder: while it grows, scheduled messages arrive late."))
	if err := errors.Join(e1, e2, e3, e4, e5); err != nil {
		return fmt.Errorf("observe: ladder instruments: %w", err)
	}
	_, err := m.meter.RegisterCallback(func(ctx context.Context, o metric.Observer) error {
		m.mu.Lock()
		conns := slices.Clone(m.ladders)
		m.mu.Unlock()
		sums := map[string]broker.LadderStats{}
		first := map[string]*broker.Conn{}
		for _, c := range conns {
			if _, ok := first[c.Ladder()]; !ok {
				first[c.Ladder()] = c
			}
			s, t := sums[c.Ladder()], c.LadderStats()
			s.Scheduled += t.Scheduled
			s.Delivered += t.Delivered
			s.Hops += t.Hops
			s.Malformed += t.Malformed
			sums[c.Ladder()] = s
		}
		for name, s := range sums {
			attrs := metric.WithAttributes(attribute.String("ladder", name))
			o.ObserveInt64(scheduled, s.Scheduled, attrs)
			o.ObserveInt64(delivered, s.Delivered, attrs)
			o.ObserveInt64(hops, s.Hops, attrs)
			o.ObserveInt64(malformed, s.Malformed, attrs)
		}
		ctx, cancel := context.WithTimeout(ctx, DepthTimeout)
		defer cancel()
		for name, c := range first {
			if st, err := c.Transport().Inspect(ctx, name+broker.DueSuffix); err == nil {
				o.ObserveInt64(backlog, int64(st.Messages), metric.WithAttributes(attribute.String("ladder", name)))
			}
		}
		return nil
	}, scheduled, delivered, hops, malformed, backlog)
	if err != nil {
		return fmt.Errorf("observe: ladder callback: %w", err)
	}
	return nil
}

// ObserveReadiness serves, on every scrape, the gauge acemq.worker.ready
// labelled check: 1 while the check (broker, worker, database: what
// /readyz runs) holds, 0 while it fails. The checks run at scrape time,
// all of them within DefaultCheckTimeout. A worker whose
// min(acemq_worker_ready) is 0 for minutes is not doing its work (the
// alert "worker not ready", docs/prometheus/alerts.yml). Call it once
// per Metrics; it refuses a second call and a check without a name or a
// function.
func (m *Metrics) ObserveReadiness(checks ...Check) error {
	for i, c := range checks {
		if c.Name == "" || c.Run == nil {
			return fmt.Errorf("observe: ObserveReadiness: check %d (%q) needs a name and a function", i, c.Name)
		}
	}
	called := true
	m.readyOnce.Do(func() {
		called = false
		m.readyErr = m.registerReadiness(checks)
	})
	if called {
		return errors.New("observe: ObserveReadiness: called twice")
	}
	return m.readyErr
}

func (m *Metrics) registerReadiness(checks []Check) error {
	ready, err := m.meter.Int64ObservableGauge("acemq.worker.ready",
		metric.WithDescription("Whether a readiness check of this worker holds (1) or fails (0), by check (broker, worker, database): what /readyz answers."))
	if err != nil {
		return fmt.Errorf("observe: readiness instrument: %w", err)
	}
	attrs := make([]metric.ObserveOption, len(checks))
	for i, c := range checks {
		attrs[i] = metric.WithAttributes(attribute.String("check", c.Name))
	}
	_, err = m.meter.RegisterCallback(func(ctx context.Context, o metric.Observer) error {
		for i, c := range Results(ctx, checks, DefaultCheckTimeout) {
			v := int64(1)
			if c.Error != "" {
				v = 0
			}
			o.ObserveInt64(ready, v, attrs[i])
		}
		return nil
	}, ready)
	if err != nil {
		return fmt.Errorf("observe: readiness callback: %w", err)
	}
	return nil
}

// ObserveFlows serves, on every scrape, the number of ready messages in
// each queue of eng's registered flows as the gauge acemq.queue.depth,
// labelled flow, queue and role (step, dead_letter, parked, compensation,
// compensation_dead_letter, compensate_now): dead-letter depth is
// acemq_queue_depth{role="dead_letter"}. The depths are asked of the broker
// through eng's connection (a passive declare per queue) within
// DepthTimeout; a queue that does not answer is left out of that scrape.
// It refuses a nil engine. Flows registered after the call are included;
// call it once per engine.
func (m *Metrics) ObserveFlows(eng *engine.Engine) error {
	if eng == nil {
		return errors.New("observe: ObserveFlows: nil engine")
	}
	depth, err := m.meter.Int64ObservableGauge("acemq.queue.depth", metric.WithUnit("{message}"),
		metric.WithDescription("Ready messages in a queue of a flow, by flow, queue and role (step, dead_letter, parked, compensation, ...), read from the broker at scrape time."))
	if err != nil {
		return fmt.Errorf("observe: queue depth instrument: %w", err)
	}
	_, err = m.meter.RegisterCallback(func(ctx context.Context, o metric.Observer) error {
		ctx, cancel := context.WithTimeout(ctx, DepthTimeout)
		defer cancel()
		t := eng.Conn().Transport()
		for _, q := range FlowQueues(eng.Flows()) {
			if ctx.Err() != nil {
				// The broker is slow or away: the rest wait for the next
				// scrape rather than holding this one.
				return nil
			}
			st, err := t.Inspect(ctx, q.Queue)
			if err != nil {
				continue
			}
			o.ObserveInt64(depth, int64(st.Messages), metric.WithAttributes(
				attribute.String("flow", q.Flow), attribute.String("queue", q.Queue), attribute.String("role", q.Role)))
		}
		return nil
	}, depth)
	if err != nil {
		return fmt.Errorf("observe: queue depth callback: %w", err)
	}
	return nil
}

// FlowQueue is one queue of a flow and what it is for.
type FlowQueue struct {
	Flow  string
	Queue string
	// Role is one of the Role constants.
	Role string
}

// FlowQueues lists the queues the engine declares for flows: each step's
// queue (not External ones: another service owns those), its dead-letter
// and parked queues, each compensation's queue and dead-letter queue, and
// the flow's compensate-now queue.
func FlowQueues(flows []engine.FlowInfo) []FlowQueue {
	var out []FlowQueue
	for _, f := range flows {
		add := func(q, role string) { out = append(out, FlowQueue{Flow: f.Name, Queue: q, Role: role}) }
		for _, s := range f.Steps {
			if s.External {
				continue
			}
			add(s.Queue, RoleStep)
			add(s.Queue+broker.DeadLetterSuffix, RoleDeadLetter)
			add(s.Queue+broker.ParkedSuffix, RoleParked)
			if s.Compensation != "" {
				add(s.Compensation, RoleCompensation)
				add(s.Compensation+broker.DeadLetterSuffix, RoleCompensationDL)
			}
		}
		add(f.CompensateQueue, RoleCompensateNow)
	}
	return out
}
