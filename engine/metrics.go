package engine

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"time"

	"go.opentelemetry.io/otel/metric"

	"github.com/acemq/acemq-flow/broker"
	"github.com/acemq/acemq-flow/broker/transport"
	"github.com/acemq/acemq-flow/internal/attrcache"
	"github.com/acemq/acemq-flow/patterns"
)

// Outcomes of a run leaving its flow, on acemq.pipeline.run.total: the
// seed's completed and ended_early, and the run given up.
const (
	RunCompleted  = "completed"
	RunEndedEarly = "ended_early"
	RunFailed     = "failed"
)

// Error types, the error.type attribute (the OpenTelemetry semantic
// conventions' name) of a failure on the engine's own step and
// compensation metrics: a short class of what went wrong, never the
// error's text.
const (
	// ErrorTypeTimeout: the step ran past its timeout, or its context's
	// deadline passed.
	ErrorTypeTimeout = "timeout"
	// ErrorTypeDecode: the payload could not be read into the step's type.
	ErrorTypeDecode = "decode"
	// ErrorTypeFatal: the step said no retry can help (broker.Fatal).
	ErrorTypeFatal = "fatal"
	// ErrorTypeCanceled: the step's context was cancelled (the worker is
	// stopping).
	ErrorTypeCanceled = "canceled"
	// ErrorTypeNilResult: the step returned nil rather than a result or
	// dsl.End.
	ErrorTypeNilResult = "nil_result"
	// ErrorTypeOther: any other error (the conventions' _OTHER).
	ErrorTypeOther = "_OTHER"
)

// ErrorType is the error.type the engine's metrics give err: one of the
// ErrorType constants, "" for nil.
func ErrorType(err error) string {
	var fatal *broker.FatalError
	switch {
	case err == nil:
		return ""
	case errors.Is(err, ErrStepTimeout), errors.Is(err, context.DeadlineExceeded):
		return ErrorTypeTimeout
	case undecodable(err):
		return ErrorTypeDecode
	case errors.As(err, &fatal):
		return ErrorTypeFatal
	case errors.Is(err, context.Canceled):
		return ErrorTypeCanceled
	case errors.Is(err, patterns.ErrNilResult):
		return ErrorTypeNilResult
	}
	return ErrorTypeOther
}

// runStarted is when the run of msg began, for acemq.flow.run.duration:
// when it was first seen (x-acemq-first-seen), or, for a replayed run (or
// one started again), when its latest replay began, so that a run
// replayed hours after it failed is not counted as hours long. The wire
// keeps the family's meaning: a replay keeps first-seen, and
// acemq.pipeline.run.duration is measured from it. The replayed message
// itself says when (acemq-replayed-at); a hop after it does not (the stamp
// describes one copy), so a replayed run's last step reads the journal:
// the earliest event of the run's latest replay, which its steps recorded
// before they settled. Only a replayed run's last step reads it.
func (e *Engine) runStarted(ctx context.Context, msg *broker.Message) time.Time {
	if ms, ok := transport.Int(msg.Headers[broker.HeaderReplayedAt]); ok && ms > 0 {
		if at := time.UnixMilli(ms); at.After(msg.FirstSeen) {
			return at
		}
	}
	n := replays(msg.Headers)
	if n == 0 {
		return msg.FirstSeen
	}
	tl, err := e.journal.Timeline(ctx, msg.RunID)
	if err != nil {
		return msg.FirstSeen
	}
	var at time.Time
	for _, ev := range tl {
		if int(ev.Seq>>48) == n && ev.StartedAt.After(msg.FirstSeen) && (at.IsZero() || ev.StartedAt.Before(at)) {
			at = ev.StartedAt
		}
	}
	if at.IsZero() {
		return msg.FirstSeen
	}
	return at
}

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
	flowDuration metric.Float64Histogram
	stepDuration metric.Float64Histogram
	stepsActive  metric.Int64UpDownCounter
	runsStarted  metric.Int64Counter
	compensation metric.Int64Counter

	// Attribute sets, kept rather than built per step.
	byRun         *attrcache.Cache
	byPipeline    *attrcache.Cache
	byFlowStepOut *attrcache.Cache
	byFlowStepErr *attrcache.Cache
	byFlowOutcome *attrcache.Cache
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
		byFlowStepErr: attrcache.New("flow", "step", "outcome", "error.type"),
		byFlowOutcome: attrcache.New("flow", "outcome"),
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
	out.flowDuration, err = m.Float64Histogram("acemq.flow.run.duration", metric.WithUnit("s"), buckets,
		metric.WithDescription("How long a run took when it left its flow, by flow and outcome: since it was first seen, or since its latest replay for a replayed run."))
	add(err)
	out.stepDuration, err = m.Float64Histogram("acemq.flow.step.duration", metric.WithUnit("s"), buckets,
		metric.WithDescription("Time a step's function took, by flow, step and outcome (completed, failed), and error.type for a failure (timeout, decode, fatal, canceled, nil_result, _OTHER)."))
	add(err)
	out.stepsActive, err = m.Int64UpDownCounter("acemq.flow.steps.active",
		metric.WithDescription("Step functions running now in this process, by flow and step."))
	add(err)
	out.runsStarted, err = m.Int64Counter("acemq.flow.runs.started",
		metric.WithDescription("Runs whose first step a worker of this process took up (once per run across the workers, but for a worker that died in that step), by flow and the version of it the worker serves."))
	add(err)
	out.compensation, err = m.Int64Counter("acemq.flow.compensation.total",
		metric.WithDescription("Compensations settled, by flow, step and outcome (compensated, retried, unresolved), and error.type for a retried or unresolved one."))
	add(err)
	if err := errors.Join(errs...); err != nil {
		return nil, fmt.Errorf("create engine instruments: %w", err)
	}
	return &out, nil
}

// left counts a run that left its flow: age is since it was first seen
// (acemq.pipeline.run.duration), took since its latest replay
// (acemq.flow.run.duration, Engine.runStarted).
func (m *metrics) left(ctx context.Context, flow, step, outcome string, age, took time.Duration) {
	m.runTotal.Add(ctx, 1, m.byRun.Option(flow, step, outcome))
	m.runDuration.Record(ctx, age.Seconds(), m.byPipeline.Option(flow))
	m.flowDuration.Record(ctx, took.Seconds(), m.byFlowOutcome.Option(flow, outcome))
}

// step records a step's function's run; errType is the failure's
// error.type, "" for one that did not fail.
func (m *metrics) step(ctx context.Context, flow, step, outcome, errType string, took time.Duration) {
	if errType != "" {
		m.stepDuration.Record(ctx, took.Seconds(), m.byFlowStepErr.Option(flow, step, outcome, errType))
		return
	}
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

// compensated counts a compensation's settlement; errType is a retried
// or unresolved one's error.type ("" for none).
func (m *metrics) compensated(ctx context.Context, flow, step, outcome, errType string) {
	if errType != "" {
		m.compensation.Add(ctx, 1, m.byFlowStepErr.Option(flow, step, outcome, errType))
		return
	}
	m.compensation.Add(ctx, 1, m.byFlowStepOut.Option(flow, step, outcome))
}

// compErrorType is the error.type of a compensation given up: its state
// unreadable (decode), else its error's class.
func compErrorType(a *compAttempt, s broker.Settlement) string {
	if a.result == compMalformed {
		return ErrorTypeDecode
	}
	if t := ErrorType(s.Err); t != "" {
		return t
	}
	return ErrorTypeOther
}
