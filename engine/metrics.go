package engine

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"time"

	"go.opentelemetry.io/otel/metric"

	"github.com/acemq/acemq-flow/broker"
	"github.com/acemq/acemq-flow/internal/attrcache"
)

// Outcomes of a run leaving its flow, on acemq.pipeline.run.total: the
// seed's completed and ended_early, and the run given up.
const (
	RunCompleted  = "completed"
	RunEndedEarly = "ended_early"
	RunFailed     = "failed"
)

// durationBuckets are the engine's histogram buckets, in seconds.
var durationBuckets = []float64{0.0001, 0.00025, 0.0005, 0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5,
	1, 2.5, 5, 10, 30, 60, 300, 900, 3600}

// DurationBuckets returns the buckets, in seconds, of the engine's
// duration histograms (acemq.flow.step.duration and the engine's
// acemq.pipeline.run.duration): from 100 µs, since a step takes tens to
// hundreds of microseconds, to an hour, since a run can wait minutes on
// the scheduler ladder. The broker's messaging histograms keep
// broker.DurationBuckets, the messaging conventions' suggestion; the two
// share every bound from 5 ms up but 75 ms, 750 ms and 7.5 s.
func DurationBuckets() []float64 { return slices.Clone(durationBuckets) }

// metrics are the engine's instruments. Run id, attempt and payload never
// become labels: they would make a series per run.
type metrics struct {
	runTotal     metric.Int64Counter
	runDuration  metric.Float64Histogram
	stepDuration metric.Float64Histogram
	stepsActive  metric.Int64UpDownCounter
	runsStarted  metric.Int64Counter
	compensation metric.Int64Counter

	// Attribute sets, kept rather than built per step.
	byRun         *attrcache.Cache
	byPipeline    *attrcache.Cache
	byFlowStepOut *attrcache.Cache
	byFlowStep    *attrcache.Cache
	byFlowVersion *attrcache.Cache
}

func newMetrics(mp metric.MeterProvider) (*metrics, error) {
	m := mp.Meter(instrumentation)
	buckets := metric.WithExplicitBucketBoundaries(durationBuckets...)
	var errs []error
	add := func(err error) { errs = append(errs, err) }
	out := metrics{
		byRun:         attrcache.New("pipeline", "step", "outcome"),
		byPipeline:    attrcache.New("pipeline"),
		byFlowStepOut: attrcache.New("flow", "step", "outcome"),
		byFlowStep:    attrcache.New("flow", "step"),
		byFlowVersion: attrcache.New("flow", "version"),
	}
	var err error
	out.runTotal, err = m.Int64Counter("acemq.pipeline.run.total",
		metric.WithDescription("Runs that left their flow, by flow (pipeline), the step they left at and outcome."))
	add(err)
	out.runDuration, err = m.Float64Histogram("acemq.pipeline.run.duration", metric.WithUnit("s"), buckets,
		metric.WithDescription("Age of a run (since x-acemq-first-seen) when it left its flow."))
	add(err)
	out.stepDuration, err = m.Float64Histogram("acemq.flow.step.duration", metric.WithUnit("s"), buckets,
		metric.WithDescription("Time a step's function took, by flow, step and outcome (completed, failed)."))
	add(err)
	out.stepsActive, err = m.Int64UpDownCounter("acemq.flow.steps.active",
		metric.WithDescription("Step functions running now in this process, by flow and step."))
	add(err)
	out.runsStarted, err = m.Int64Counter("acemq.flow.runs.started",
		metric.WithDescription("Runs whose first step a worker of this process took up (once per run across the workers, but for a worker that died in that step), by flow and the version of it the worker serves."))
	add(err)
	out.compensation, err = m.Int64Counter("acemq.flow.compensation.total",
		metric.WithDescription("Compensations settled, by flow, step and outcome (compensated, retried, unresolved)."))
	add(err)
	if err := errors.Join(errs...); err != nil {
		return nil, fmt.Errorf("create engine instruments: %w", err)
	}
	return &out, nil
}

func (m *metrics) left(ctx context.Context, flow, step, outcome string, age time.Duration) {
	m.runTotal.Add(ctx, 1, m.byRun.Option(flow, step, outcome))
	m.runDuration.Record(ctx, age.Seconds(), m.byPipeline.Option(flow))
}

func (m *metrics) step(ctx context.Context, flow, step, outcome string, took time.Duration) {
	m.stepDuration.Record(ctx, took.Seconds(), m.byFlowStepOut.Option(flow, step, outcome))
}

func (m *metrics) active(ctx context.Context, flow, step string, n int64) {
	m.stepsActive.Add(ctx, n, m.byFlowStep.Option(flow, step))
}

// reached counts run msg on acemq.flow.runs.started if msg is the run's
// first message and this worker has just claimed its step (so no other
// delivery of it is running it or ran it): counted where the run is
// worked, whichever process started it (engine.Start, acemq-flow start,
// another service). The first message is the one at route position 0, or
// at a later one when the steps before were skipped as the run started
// (a hop always names the message it came from, a run's first message
// never), on attempt 1 (a retry is a later attempt), not a replay (a
// replay carries acemq-replay-count, and so do the hops after it).
//
// Approximate: a worker that dies in the first step, or loses its claim,
// leaves the redelivery to be claimed again and counted again; without a
// shared idempotency store (no database) each worker claims for itself,
// so a redelivery to another worker counts again; and a run whose every
// step was skipped at its start reaches no step and is not counted.
func (m *metrics) reached(ctx context.Context, flow, version string, msg *broker.Message, pos, replays int) {
	if msg.Attempt > 1 || replays > 0 || pos > 0 && msg.CausationID != "" {
		return
	}
	m.runsStarted.Add(ctx, 1, m.byFlowVersion.Option(flow, version))
}

func (m *metrics) compensated(ctx context.Context, flow, step, outcome string) {
	m.compensation.Add(ctx, 1, m.byFlowStepOut.Option(flow, step, outcome))
}
