package broker

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strings"
	"sync"
	"time"

	"go.opentelemetry.io/otel"
	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/codes"
	"go.opentelemetry.io/otel/metric"
	"go.opentelemetry.io/otel/propagation"
	"go.opentelemetry.io/otel/trace"

	"github.com/acemq/acemq-flow/broker/transport"
	"github.com/acemq/acemq-flow/internal/attrcache"
)

// instrumentation is the name metrics and spans are reported under.
const instrumentation = "github.com/acemq/acemq-flow/broker"

// Consume outcome labels on acemq.consume.total.
const (
	OutcomeLabelAccepted     = "accepted"
	OutcomeLabelRetried      = "retried"
	OutcomeLabelDeadLettered = "dead_lettered"
	OutcomeLabelParked       = "parked"
	OutcomeLabelInProgress   = "in_progress"
	OutcomeLabelUnsettled    = "unsettled"
	OutcomeLabelSkipped      = "skipped"
)

// processBuckets are the semantic conventions' suggested buckets for
// messaging durations, in seconds, continued past their 10 s to an hour:
// a run that waited on the ladder, or a step retried a few times, takes
// minutes, and a histogram whose every such sample falls in +Inf says
// nothing about it.
var processBuckets = []float64{0.005, 0.01, 0.025, 0.05, 0.075, 0.1, 0.25, 0.5, 0.75, 1, 2.5, 5, 7.5, 10,
	30, 60, 300, 900, 3600}

// DurationBuckets returns the histogram buckets, in seconds, every acemq.*
// duration histogram uses, so that they can be compared and summed: the
// OpenTelemetry messaging conventions' suggested ones, then 30 s, 1 min,
// 5 min, 15 min and 1 h for runs and delays.
func DurationBuckets() []float64 { return append([]float64(nil), processBuckets...) }

type telemetry struct {
	tracer          trace.Tracer
	prop            propagation.TraceContext
	consumeTotal    metric.Int64Counter
	consumeDuration metric.Float64Histogram
	publishTotal    metric.Int64Counter
	sent            metric.Int64Counter
	publishDuration metric.Float64Histogram
	consumed        metric.Int64Counter
	processDuration metric.Float64Histogram
	consumerEnded   metric.Int64Counter
	lateness        metric.Float64Histogram

	// Attribute sets, kept rather than built per message.
	byQueueOutcome    *attrcache.Cache
	byOutcomeExchange *attrcache.Cache
	semconv           *attrcache.Cache
	semconvErr        *attrcache.Cache
	// byExchange holds an *exchangeMetrics per exchange published to.
	byExchange sync.Map

	// ended holds the consumers that ended on their own, and why, for
	// Conn.Health, until their owner cancels them.
	endedMu sync.Mutex
	ended   map[*Consumer]error
}

func newTelemetry(mp metric.MeterProvider, tp trace.TracerProvider) (*telemetry, error) {
	if mp == nil {
		mp = otel.GetMeterProvider()
	}
	if tp == nil {
		tp = otel.GetTracerProvider()
	}
	m := mp.Meter(instrumentation)
	t := &telemetry{tracer: tp.Tracer(instrumentation), ended: map[*Consumer]error{},
		byQueueOutcome:    attrcache.New("queue", "outcome"),
		byOutcomeExchange: attrcache.New("outcome", "exchange"),
		semconv:           attrcache.New("messaging.system", "messaging.operation.name", "messaging.destination.name"),
		semconvErr:        attrcache.New("messaging.system", "messaging.operation.name", "messaging.destination.name", "error.type"),
	}
	var errs []error
	add := func(err error) { errs = append(errs, err) }
	var err error
	t.consumeTotal, err = m.Int64Counter("acemq.consume.total", metric.WithDescription("Deliveries handled, by queue and outcome."))
	add(err)
	t.consumeDuration, err = m.Float64Histogram("acemq.consume.duration", metric.WithUnit("s"),
		metric.WithDescription("Time from delivery to settlement."), metric.WithExplicitBucketBoundaries(processBuckets...))
	add(err)
	t.publishTotal, err = m.Int64Counter("acemq.publish.total", metric.WithDescription("Publishes, by outcome."))
	add(err)
	t.consumerEnded, err = m.Int64Counter("acemq.consumer.ended",
		metric.WithDescription("Consumers that ended on their own (not by Cancel or Close), by queue: nothing consumes that queue on this connection any more."))
	add(err)
	t.lateness, err = m.Float64Histogram("acemq.schedule.lateness", metric.WithUnit("s"),
		metric.WithDescription("How late the ladder delivered a scheduled message (delivery time minus due time), by ladder."),
		metric.WithExplicitBucketBoundaries(processBuckets...))
	add(err)
	t.sent, err = m.Int64Counter("messaging.client.sent.messages", metric.WithUnit("{message}"),
		metric.WithDescription("Messages published, by destination."))
	add(err)
	t.publishDuration, err = m.Float64Histogram("messaging.client.operation.duration", metric.WithUnit("s"),
		metric.WithDescription("Time a publish took, from sending to the broker's confirm (or its refusal), by destination (the exchange), with error.type for a publish that failed."),
		metric.WithExplicitBucketBoundaries(processBuckets...))
	add(err)
	t.consumed, err = m.Int64Counter("messaging.client.consumed.messages", metric.WithUnit("{message}"),
		metric.WithDescription("Messages consumed, by queue."))
	add(err)
	t.processDuration, err = m.Float64Histogram("messaging.process.duration", metric.WithUnit("s"),
		metric.WithDescription("Time from delivery to settlement, by queue (the messaging conventions' name)."),
		metric.WithExplicitBucketBoundaries(processBuckets...))
	add(err)
	if err := errors.Join(errs...); err != nil {
		return nil, fmt.Errorf("create instruments: %w", err)
	}
	return t, nil
}

func exchangeName(e string) string {
	if e == "" {
		return "amq.default"
	}
	return e
}

// Span start options, built once: an option built per message is an
// allocation per message.
var (
	producerSpan = []trace.SpanStartOption{trace.WithSpanKind(trace.SpanKindProducer)}
	consumerSpan = []trace.SpanStartOption{trace.WithSpanKind(trace.SpanKindConsumer)}
)

// exchangeMetrics are the metric options of a confirmed publish to one
// exchange, ready to pass: what every publish would otherwise look up by a
// key built for the purpose, and wrap in a slice of its own.
type exchangeMetrics struct {
	confirmed []metric.AddOption    // acemq.publish.total{outcome=confirmed}
	sent      []metric.AddOption    // messaging.client.sent.messages
	duration  []metric.RecordOption // messaging.client.operation.duration of a confirmed publish
}

func (t *telemetry) exchangeMetrics(ex string) *exchangeMetrics {
	if m, ok := t.byExchange.Load(ex); ok {
		return m.(*exchangeMetrics)
	}
	semconv := t.semconv.Option("rabbitmq", "publish", ex)
	m, _ := t.byExchange.LoadOrStore(ex, &exchangeMetrics{
		confirmed: []metric.AddOption{t.byOutcomeExchange.Option("confirmed", ex)},
		sent:      []metric.AddOption{semconv},
		duration:  []metric.RecordOption{semconv},
	})
	return m.(*exchangeMetrics)
}

// publishSpan is a publish under way: its span, when it began, and what
// end records.
type publishSpan struct {
	t     *telemetry
	ctx   context.Context
	span  trace.Span
	ex    string
	start time.Time
}

// startPublish opens the PRODUCER span and writes its trace context into a
// copy of out's headers; end records the outcome.
func (t *telemetry) startPublish(ctx context.Context, out *Outgoing) publishSpan {
	ex := exchangeName(out.Exchange)
	ctx, span := t.tracer.Start(ctx, "publish "+ex+":"+out.RoutingKey, producerSpan...)
	if span.IsRecording() {
		// Built only for a span that keeps them: per message, they cost.
		span.SetAttributes(
			attribute.String("messaging.system", "rabbitmq"),
			attribute.String("messaging.operation.type", "send"),
			attribute.String("messaging.destination.name", ex),
			attribute.String("messaging.rabbitmq.destination.routing_key", out.RoutingKey),
			attribute.String("messaging.message.id", out.Message.MessageID),
			attribute.String("messaging.message.conversation_id", out.Message.CorrelationID),
		)
	}
	if span.SpanContext().IsValid() {
		h := out.Message.Headers.Clone()
		if h == nil {
			h = Table{}
		}
		t.prop.Inject(ctx, tableCarrier(h))
		out.Message.Headers = h
	}
	return publishSpan{t: t, ctx: ctx, span: span, ex: ex, start: time.Now()}
}

// end records the publish's outcome (err nil: confirmed) and ends its span.
func (p publishSpan) end(err error) {
	took := time.Since(p.start).Seconds()
	t, m := p.t, p.t.exchangeMetrics(p.ex)
	if err != nil {
		outcome := publishFailure(err)
		p.span.SetStatus(codes.Error, err.Error())
		p.span.SetAttributes(attribute.String("error.type", outcome))
		t.publishTotal.Add(p.ctx, 1, t.byOutcomeExchange.Option(outcome, p.ex))
		t.publishDuration.Record(p.ctx, took, t.semconvErr.Option("rabbitmq", "publish", p.ex, outcome))
	} else {
		t.publishTotal.Add(p.ctx, 1, m.confirmed...)
		t.publishDuration.Record(p.ctx, took, m.duration...)
	}
	t.sent.Add(p.ctx, 1, m.sent...)
	p.span.End()
}

func publishFailure(err error) string {
	switch {
	case errors.Is(err, transport.ErrUnroutable):
		return "returned"
	case errors.Is(err, transport.ErrNacked):
		return "nacked"
	case errors.Is(err, transport.ErrTooLarge):
		return "too_large"
	case errors.Is(err, context.DeadlineExceeded), errors.Is(err, context.Canceled):
		return "timeout"
	default:
		return "failed"
	}
}

// consumerMetrics are one consumer's span name and metric options, built
// when it starts rather than per delivery.
type consumerMetrics struct {
	queue    string
	spanName string
	// semconv carries messaging.client.consumed.messages' and
	// messaging.process.duration's attributes.
	semconvAdd    []metric.AddOption
	semconvRecord []metric.RecordOption
	// byLabel holds an *outcomeMetrics per outcome label seen.
	byLabel sync.Map
}

// outcomeMetrics carry acemq.consume.*'s attributes for one queue and
// outcome label.
type outcomeMetrics struct {
	add    []metric.AddOption
	record []metric.RecordOption
}

func (t *telemetry) consumerMetrics(queue string) *consumerMetrics {
	semconv := t.semconv.Option("rabbitmq", "process", queue)
	return &consumerMetrics{
		queue:         queue,
		spanName:      "process " + queue,
		semconvAdd:    []metric.AddOption{semconv},
		semconvRecord: []metric.RecordOption{semconv},
	}
}

func (t *telemetry) outcomeMetrics(c *consumerMetrics, label string) *outcomeMetrics {
	if m, ok := c.byLabel.Load(label); ok {
		return m.(*outcomeMetrics)
	}
	o := t.byQueueOutcome.Option(c.queue, label)
	m, _ := c.byLabel.LoadOrStore(label, &outcomeMetrics{add: []metric.AddOption{o}, record: []metric.RecordOption{o}})
	return m.(*outcomeMetrics)
}

// startProcess opens the CONSUMER span for a delivery. A message back from
// the ladder (attempt > 1) starts a new trace linked to the one that sent it,
// so no trace spans hours of retries.
func (t *telemetry) startProcess(ctx context.Context, c *consumerMetrics, m *Message, headers Table) (context.Context, trace.Span) {
	remote := t.prop.Extract(context.Background(), tableCarrier(headers))
	opts := consumerSpan
	if sc := trace.SpanContextFromContext(remote); sc.IsValid() {
		if m.Attempt > 1 {
			opts = []trace.SpanStartOption{consumerSpan[0], trace.WithNewRoot(), trace.WithLinks(trace.Link{SpanContext: sc})}
		} else {
			ctx = trace.ContextWithRemoteSpanContext(ctx, sc)
		}
	}
	ctx, span := t.tracer.Start(ctx, c.spanName, opts...)
	if span.IsRecording() {
		span.SetAttributes(
			attribute.String("messaging.system", "rabbitmq"),
			attribute.String("messaging.operation.type", "process"),
			attribute.String("messaging.destination.name", c.queue),
			attribute.String("messaging.rabbitmq.destination.routing_key", m.RoutingKey),
			attribute.String("messaging.message.id", m.ID),
			attribute.String("messaging.message.conversation_id", m.CorrelationID),
			attribute.Int("acemq.attempt", m.Attempt),
		)
	}
	return ctx, span
}

// settled records a delivery's outcome on the consume metrics.
func (t *telemetry) settled(ctx context.Context, c *consumerMetrics, outcome string, took time.Duration) {
	m := t.outcomeMetrics(c, outcome)
	t.consumeTotal.Add(ctx, 1, m.add...)
	t.consumeDuration.Record(ctx, took.Seconds(), m.record...)
	t.consumed.Add(ctx, 1, c.semconvAdd...)
	t.processDuration.Record(ctx, took.Seconds(), c.semconvRecord...)
}

// endedOnItsOwn records k, which ended on its own with err: it is counted
// on acemq.consumer.ended and reported by Conn.Health until its owner
// cancels it.
func (t *telemetry) endedOnItsOwn(k *Consumer, err error) {
	t.consumerEnded.Add(context.Background(), 1, metric.WithAttributes(attribute.String("queue", k.queue)))
	t.endedMu.Lock()
	defer t.endedMu.Unlock()
	t.ended[k] = err
}

// ConsumerEndedError is a consumer that ended on its own: the broker would
// not let it resubscribe after it lost its consumer (its queue was deleted,
// or refuses it). Nothing consumes Queue on this connection any more.
type ConsumerEndedError struct {
	// Queue is the queue the consumer read.
	Queue string
	// Err is why it ended, as its Err reports it.
	Err error
}

// Error names the queue and why its consumer ended.
func (e *ConsumerEndedError) Error() string {
	return fmt.Sprintf("consumer of queue %q ended: %v", e.Queue, e.Err)
}

// Unwrap returns why the consumer ended.
func (e *ConsumerEndedError) Unwrap() error { return e.Err }

// Health reports what keeps the connection from doing all its work, for a
// worker's readiness check: every consumer of the connection that ended on
// its own and that its owner has not cancelled, as *ConsumerEndedError
// values joined in queue order. The scheduler ladder's control consumer is
// among them when it ended, and then no retry, put-back or scheduled
// message moves. A connection that reconnects is healthy meanwhile: its
// consumers resubscribe when it is back. Health is nil when all is well and
// ErrClosed once the connection is closed.
func (c *Conn) Health() error {
	if c.closed.Load() {
		return ErrClosed
	}
	t := c.tel
	t.endedMu.Lock()
	defer t.endedMu.Unlock()
	var ended []*ConsumerEndedError
	for k, err := range t.ended {
		if k.stopping.Load() {
			// Its owner has seen it go and cancelled it.
			delete(t.ended, k)
			continue
		}
		ended = append(ended, &ConsumerEndedError{Queue: k.queue, Err: err})
	}
	slices.SortFunc(ended, func(a, b *ConsumerEndedError) int { return strings.Compare(a.Queue, b.Queue) })
	errs := make([]error, len(ended))
	for i, e := range ended {
		errs[i] = e
	}
	return errors.Join(errs...)
}

// tableCarrier lets the W3C propagator read and write message headers.
type tableCarrier Table

func (c tableCarrier) Get(key string) string {
	switch v := c[key].(type) {
	case string:
		return v
	case []byte:
		return string(v)
	}
	return ""
}

func (c tableCarrier) Set(key, value string) { c[key] = value }

func (c tableCarrier) Keys() []string {
	keys := make([]string, 0, len(c))
	for k := range c {
		keys = append(keys, k)
	}
	return keys
}
