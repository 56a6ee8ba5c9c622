package broker

import (
	"context"
	"errors"
	"fmt"
	"time"

	"go.opentelemetry.io/otel"
	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/codes"
	"go.opentelemetry.io/otel/metric"
	"go.opentelemetry.io/otel/propagation"
	"go.opentelemetry.io/otel/trace"

	"github.com/acemq/acemq-flow/broker/transport"
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
// messaging durations, in seconds.
var processBuckets = []float64{0.005, 0.01, 0.025, 0.05, 0.075, 0.1, 0.25, 0.5, 0.75, 1, 2.5, 5, 7.5, 10}

// DurationBuckets returns the OpenTelemetry messaging conventions' suggested
// histogram buckets for durations, in seconds: the ones every acemq.*
// duration histogram uses, so that they can be compared and summed.
func DurationBuckets() []float64 { return append([]float64(nil), processBuckets...) }

type telemetry struct {
	tracer          trace.Tracer
	prop            propagation.TraceContext
	consumeTotal    metric.Int64Counter
	consumeDuration metric.Float64Histogram
	publishTotal    metric.Int64Counter
	sent            metric.Int64Counter
	consumed        metric.Int64Counter
	processDuration metric.Float64Histogram
}

func newTelemetry(mp metric.MeterProvider, tp trace.TracerProvider) (*telemetry, error) {
	if mp == nil {
		mp = otel.GetMeterProvider()
	}
	if tp == nil {
		tp = otel.GetTracerProvider()
	}
	m := mp.Meter(instrumentation)
	t := &telemetry{tracer: tp.Tracer(instrumentation)}
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
	t.sent, err = m.Int64Counter("messaging.client.sent.messages", metric.WithUnit("{message}"))
	add(err)
	t.consumed, err = m.Int64Counter("messaging.client.consumed.messages", metric.WithUnit("{message}"))
	add(err)
	t.processDuration, err = m.Float64Histogram("messaging.process.duration", metric.WithUnit("s"),
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

// startPublish opens the PRODUCER span and writes its trace context into a
// copy of out's headers; the returned func records the outcome.
func (t *telemetry) startPublish(ctx context.Context, out *Outgoing) (context.Context, func(error)) {
	ex := exchangeName(out.Exchange)
	ctx, span := t.tracer.Start(ctx, "publish "+ex+":"+out.RoutingKey,
		trace.WithSpanKind(trace.SpanKindProducer),
		trace.WithAttributes(
			attribute.String("messaging.system", "rabbitmq"),
			attribute.String("messaging.operation.type", "send"),
			attribute.String("messaging.destination.name", ex),
			attribute.String("messaging.rabbitmq.destination.routing_key", out.RoutingKey),
			attribute.String("messaging.message.id", out.Message.MessageID),
			attribute.String("messaging.message.conversation_id", out.Message.CorrelationID),
		))
	if span.SpanContext().IsValid() {
		h := out.Message.Headers.Clone()
		if h == nil {
			h = Table{}
		}
		t.prop.Inject(ctx, tableCarrier(h))
		out.Message.Headers = h
	}
	return ctx, func(err error) {
		outcome := "confirmed"
		if err != nil {
			outcome = publishFailure(err)
			span.SetStatus(codes.Error, err.Error())
			span.SetAttributes(attribute.String("error.type", outcome))
		}
		attrs := metric.WithAttributes(attribute.String("outcome", outcome), attribute.String("exchange", ex))
		t.publishTotal.Add(ctx, 1, attrs)
		t.sent.Add(ctx, 1, metric.WithAttributes(
			attribute.String("messaging.system", "rabbitmq"),
			attribute.String("messaging.operation.name", "publish"),
			attribute.String("messaging.destination.name", ex)))
		span.End()
	}
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

// startProcess opens the CONSUMER span for a delivery. A message back from
// the ladder (attempt > 1) starts a new trace linked to the one that sent it,
// so no trace spans hours of retries.
func (t *telemetry) startProcess(ctx context.Context, queue string, m *Message, headers Table) (context.Context, trace.Span) {
	remote := t.prop.Extract(context.Background(), tableCarrier(headers))
	attrs := trace.WithAttributes(
		attribute.String("messaging.system", "rabbitmq"),
		attribute.String("messaging.operation.type", "process"),
		attribute.String("messaging.destination.name", queue),
		attribute.String("messaging.rabbitmq.destination.routing_key", m.RoutingKey),
		attribute.String("messaging.message.id", m.ID),
		attribute.String("messaging.message.conversation_id", m.CorrelationID),
		attribute.Int("acemq.attempt", m.Attempt),
	)
	opts := []trace.SpanStartOption{trace.WithSpanKind(trace.SpanKindConsumer), attrs}
	if sc := trace.SpanContextFromContext(remote); sc.IsValid() {
		if m.Attempt > 1 {
			opts = append(opts, trace.WithNewRoot(), trace.WithLinks(trace.Link{SpanContext: sc}))
		} else {
			ctx = trace.ContextWithRemoteSpanContext(ctx, sc)
		}
	}
	return t.tracer.Start(ctx, "process "+queue, opts...)
}

// settled records a delivery's outcome on the consume metrics.
func (t *telemetry) settled(ctx context.Context, queue, outcome string, took time.Duration) {
	attrs := metric.WithAttributes(attribute.String("queue", queue), attribute.String("outcome", outcome))
	t.consumeTotal.Add(ctx, 1, attrs)
	t.consumeDuration.Record(ctx, took.Seconds(), attrs)
	semconv := metric.WithAttributes(
		attribute.String("messaging.system", "rabbitmq"),
		attribute.String("messaging.operation.name", "process"),
		attribute.String("messaging.destination.name", queue))
	t.consumed.Add(ctx, 1, semconv)
	t.processDuration.Record(ctx, took.Seconds(), semconv)
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
