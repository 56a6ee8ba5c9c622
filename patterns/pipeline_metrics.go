package patterns

import (
	"context"
	"errors"
	"fmt"
	"time"

	"go.opentelemetry.io/otel"
	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/metric"

	"github.com/acemq/acemq-flow/broker"
)

// instrumentation is the name the patterns' metrics are reported under.
const pipelineInstrumentation = "github.com/acemq/acemq-flow/patterns"

// Outcomes of a run leaving a pipeline, on acemq.pipeline.run.total.
const (
	PipelineCompleted  = "completed"
	PipelineEndedEarly = "ended_early"
)

// pipelineMetrics are the two instruments of docs/wire.md: runs leaving a
// pipeline, and how old their envelope was when they left.
type pipelineMetrics struct {
	total    metric.Int64Counter
	duration metric.Float64Histogram
}

func newPipelineMetrics(conn *broker.Conn) (*pipelineMetrics, error) {
	mp := conn.Config().MeterProvider
	if mp == nil {
		mp = otel.GetMeterProvider()
	}
	m := mp.Meter(pipelineInstrumentation)
	total, errT := m.Int64Counter("acemq.pipeline.run.total",
		metric.WithDescription("Pipeline runs that left the pipeline, by pipeline, the step they left at and outcome."))
	duration, errD := m.Float64Histogram("acemq.pipeline.run.duration", metric.WithUnit("s"),
		metric.WithExplicitBucketBoundaries(broker.DurationBuckets()...),
		metric.WithDescription("Age of a run's envelope (since x-acemq-first-seen) when it left the pipeline."))
	if err := errors.Join(errT, errD); err != nil {
		return nil, fmt.Errorf("create pipeline instruments: %w", err)
	}
	return &pipelineMetrics{total: total, duration: duration}, nil
}

// left records a run leaving pipeline at step, age after it entered.
func (pm *pipelineMetrics) left(ctx context.Context, pipeline, step, outcome string, age time.Duration) {
	pm.total.Add(ctx, 1, metric.WithAttributes(
		attribute.String("pipeline", pipeline), attribute.String("step", step), attribute.String("outcome", outcome)))
	pm.duration.Record(ctx, age.Seconds(), metric.WithAttributes(attribute.String("pipeline", pipeline)))
}
