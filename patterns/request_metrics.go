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

// requestInstrumentation is the name request/reply metrics are reported
// under.
const requestInstrumentation = "github.com/acemq/acemq-flow/patterns"

// Outcomes of a round trip on acemq.request.total, and of a request on
// the responder's acemq.consume.total.
const (
	// RequestOutcomeAnswered is a round trip that got its answer.
	RequestOutcomeAnswered = "answered"
	// RequestOutcomeFailed is a round trip whose responder failed.
	RequestOutcomeFailed = "responder_failed"
	// RequestOutcomeTimedOut is a round trip that got no reply in time.
	RequestOutcomeTimedOut = "timed_out"
	// RequestOutcomeError is a round trip that could not be made (the
	// request was not sent, the requester closed, the caller cancelled).
	RequestOutcomeError = "error"
	// RequestOutcomeExpired is a request its responder skipped because its
	// caller had stopped waiting (on acemq.consume.total).
	RequestOutcomeExpired = "expired"
)

// requestMetrics records round trips as the caller experienced them.
type requestMetrics struct {
	total    metric.Int64Counter
	duration metric.Float64Histogram
	dest     attribute.KeyValue
}

func newRequestMetrics(conn *broker.Conn, to string) (*requestMetrics, error) {
	mp := conn.Config().MeterProvider
	if mp == nil {
		mp = otel.GetMeterProvider()
	}
	m := mp.Meter(requestInstrumentation)
	total, err := m.Int64Counter("acemq.request.total",
		metric.WithDescription("Request/reply round trips, by destination and outcome."))
	if err != nil {
		return nil, fmt.Errorf("request metrics: %w", err)
	}
	duration, err := m.Float64Histogram("acemq.request.duration", metric.WithUnit("s"),
		metric.WithDescription("Request/reply round-trip time as the caller experienced it."),
		metric.WithExplicitBucketBoundaries(broker.DurationBuckets()...))
	if err != nil {
		return nil, fmt.Errorf("request metrics: %w", err)
	}
	return &requestMetrics{total: total, duration: duration, dest: attribute.String("messaging.destination.name", to)}, nil
}

// record counts one round trip that took since start and ended with err.
func (rm *requestMetrics) record(start time.Time, err error) {
	var failed *ResponderFailed
	outcome := RequestOutcomeAnswered
	switch {
	case err == nil:
	case errors.As(err, &failed):
		outcome = RequestOutcomeFailed
	case errors.Is(err, ErrRequestTimedOut):
		outcome = RequestOutcomeTimedOut
	default:
		outcome = RequestOutcomeError
	}
	// Recorded after the caller's context may have ended: a metric is not
	// part of the call.
	ctx := context.Background()
	attrs := metric.WithAttributes(rm.dest, attribute.String("outcome", outcome))
	rm.total.Add(ctx, 1, attrs)
	rm.duration.Record(ctx, time.Since(start).Seconds(), attrs)
}
