package broker_test

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
	"go.opentelemetry.io/otel/attribute"
	sdkmetric "go.opentelemetry.io/otel/sdk/metric"
	"go.opentelemetry.io/otel/sdk/metric/metricdata"
	sdktrace "go.opentelemetry.io/otel/sdk/trace"
	"go.opentelemetry.io/otel/sdk/trace/tracetest"
	"go.opentelemetry.io/otel/trace"

	"github.com/acemq/acemq-flow/broker"
	"github.com/acemq/acemq-flow/internal/brokertest"
	"github.com/acemq/acemq-flow/internal/testenv"
)

func TestTelemetry(t *testing.T) {
	t.Parallel()
	ctx := brokertest.Ctx(t)
	reader := sdkmetric.NewManualReader()
	spans := tracetest.NewSpanRecorder()
	conn, err := broker.Config{
		MeterProvider:  sdkmetric.NewMeterProvider(sdkmetric.WithReader(reader)),
		TracerProvider: sdktrace.NewTracerProvider(sdktrace.WithSpanProcessor(spans)),
		Logger:         testenv.Logger(t),
	}.Open(ctx, "memory://")
	require.NoError(t, err)
	defer conn.Close(ctx)

	q := "orders"
	done := make(chan struct{}, 2)
	_, err = conn.Consume(ctx, q, broker.Func(func(ctx context.Context, m *broker.Message) error {
		defer func() { done <- struct{}{} }()
		var s string
		_ = m.Decode(&s)
		if s == "bad" {
			return broker.Fatal(errors.New("bad order"))
		}
		return nil
	}), broker.WithRetry(broker.NoRetry()))
	require.NoError(t, err)
	require.NoError(t, conn.Publish(ctx, "good", broker.To(q)))
	require.NoError(t, conn.Publish(ctx, "bad", broker.To(q)))
	<-done
	<-done
	require.Error(t, conn.Publish(ctx, "x", broker.To("nowhere"), broker.Mandatory()))

	var rm metricdata.ResourceMetrics
	require.Eventually(t, func() bool {
		require.NoError(t, reader.Collect(ctx, &rm))
		return sumOf(rm, "acemq.consume.total", attribute.String("outcome", "dead_lettered")) == 1
	}, 5*time.Second, 10*time.Millisecond)
	require.Equal(t, int64(1), sumOf(rm, "acemq.consume.total", attribute.String("queue", q), attribute.String("outcome", "accepted")))
	require.Equal(t, int64(1), sumOf(rm, "acemq.publish.total", attribute.String("outcome", "returned")))
	require.GreaterOrEqual(t, sumOf(rm, "acemq.publish.total", attribute.String("outcome", "confirmed")), int64(3),
		"two publishes and the dead-letter copy")
	require.Equal(t, int64(2), sumOf(rm, "messaging.client.consumed.messages", attribute.String("messaging.destination.name", q)))
	// Publish latency: one sample per publish, by destination; a failed
	// one with its error type.
	confirmed := attribute.String("messaging.destination.name", "amq.default")
	require.GreaterOrEqual(t, countOf(rm, "messaging.client.operation.duration", confirmed,
		attribute.String("messaging.system", "rabbitmq"), attribute.String("messaging.operation.name", "publish")), uint64(3))
	require.Equal(t, uint64(1), countOf(rm, "messaging.client.operation.duration", attribute.String("error.type", "returned")))

	byName := map[string]sdktrace.ReadOnlySpan{}
	for _, s := range spans.Ended() {
		byName[s.Name()] = s
	}
	pubSpan, ok := byName["publish amq.default:orders"]
	require.True(t, ok, "publish span named publish {exchange}:{routing key}")
	require.Equal(t, trace.SpanKindProducer, pubSpan.SpanKind())
	procSpan, ok := byName["process orders"]
	require.True(t, ok)
	require.Equal(t, trace.SpanKindConsumer, procSpan.SpanKind())
	require.Equal(t, pubSpan.SpanContext().TraceID(), procSpan.SpanContext().TraceID(),
		"the trace context travels in the traceparent header")
	attrs := map[attribute.Key]string{}
	for _, a := range procSpan.Attributes() {
		attrs[a.Key] = a.Value.Emit()
	}
	require.Equal(t, "rabbitmq", attrs["messaging.system"])
	require.Equal(t, q, attrs["messaging.destination.name"])
	require.NotEmpty(t, attrs["messaging.message.id"])
}

// sumOf adds up the int64 sum data points of metric name that carry every
// attribute in want.
func sumOf(rm metricdata.ResourceMetrics, name string, want ...attribute.KeyValue) int64 {
	var total int64
	for _, sm := range rm.ScopeMetrics {
		for _, m := range sm.Metrics {
			if m.Name != name {
				continue
			}
			sum, ok := m.Data.(metricdata.Sum[int64])
			if !ok {
				continue
			}
		points:
			for _, dp := range sum.DataPoints {
				for _, kv := range want {
					if v, ok := dp.Attributes.Value(kv.Key); !ok || v != kv.Value {
						continue points
					}
				}
				total += dp.Value
			}
		}
	}
	return total
}

// countOf adds up the sample counts of the float64 histogram name's data
// points that carry every attribute in want.
func countOf(rm metricdata.ResourceMetrics, name string, want ...attribute.KeyValue) uint64 {
	var total uint64
	for _, sm := range rm.ScopeMetrics {
		for _, m := range sm.Metrics {
			h, ok := m.Data.(metricdata.Histogram[float64])
			if m.Name != name || !ok {
				continue
			}
		points:
			for _, dp := range h.DataPoints {
				for _, kv := range want {
					if v, ok := dp.Attributes.Value(kv.Key); !ok || v != kv.Value {
						continue points
					}
				}
				total += dp.Count
			}
		}
	}
	return total
}

// TestLadderLateness: the ladder records how late it delivered each
// scheduled message, never a negative figure (a message is never early).
func TestLadderLateness(t *testing.T) {
	t.Parallel()
	ctx := brokertest.Ctx(t)
	reader := sdkmetric.NewManualReader()
	conn, err := broker.Config{MeterProvider: sdkmetric.NewMeterProvider(sdkmetric.WithReader(reader)), Logger: testenv.Logger(t)}.Open(ctx, "memory://")
	require.NoError(t, err)
	defer conn.Close(ctx)
	require.NoError(t, conn.RunLadder(ctx))
	got := make(chan struct{}, 1)
	_, err = conn.Consume(ctx, "later", broker.Func(func(context.Context, *broker.Message) error { got <- struct{}{}; return nil }),
		broker.WithRetry(broker.NoRetry()))
	require.NoError(t, err)
	out, err := conn.Prepare(ctx, "x", broker.To("later"))
	require.NoError(t, err)
	require.NoError(t, conn.Schedule(ctx, time.Now().Add(time.Second), out))
	brokertest.Next(t, got, 5*time.Second)
	// The ladder records the lateness once the broker confirmed the move,
	// which the consumer may see before the ladder does.
	var points []metricdata.HistogramDataPoint[float64]
	found := func() bool {
		var rm metricdata.ResourceMetrics
		if reader.Collect(ctx, &rm) != nil {
			return false
		}
		for _, sm := range rm.ScopeMetrics {
			for _, m := range sm.Metrics {
				if m.Name == "acemq.schedule.lateness" {
					points = m.Data.(metricdata.Histogram[float64]).DataPoints
					return true
				}
			}
		}
		return false
	}
	require.Eventually(t, found, 5*time.Second, 10*time.Millisecond, "acemq.schedule.lateness recorded")
	require.Len(t, points, 1)
	dp := points[0]
	require.Equal(t, uint64(1), dp.Count)
	require.GreaterOrEqual(t, dp.Sum, 0.0, "never early")
	require.Less(t, dp.Sum, 2.0, "at most about a rung late")
	require.Equal(t, broker.DurationBuckets(), dp.Bounds)
}
