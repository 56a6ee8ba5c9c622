package patterns_test

import (
	"context"
	"testing"
	"time"

	amqp "github.com/rabbitmq/amqp091-go"
	"github.com/stretchr/testify/require"
	"go.opentelemetry.io/otel/attribute"
	sdkmetric "go.opentelemetry.io/otel/sdk/metric"
	"go.opentelemetry.io/otel/sdk/metric/metricdata"

	"github.com/acemq/acemq-flow/broker"
	"github.com/acemq/acemq-flow/internal/brokertest"
	"github.com/acemq/acemq-flow/patterns"
)

func TestPipelineTopology(t *testing.T) {
	t.Parallel()
	p, err := patterns.NewPipeline("orders", "validate", "charge", "ship")
	require.NoError(t, err)
	require.Equal(t, "orders.charge", p.QueueFor("charge"))
	require.Empty(t, p.QueueFor("refund"), "a step the pipeline lacks has no queue")
	top := p.Topology()
	require.Equal(t, []broker.Exchange{{Name: "orders", Kind: "direct", Durable: true}}, top.Exchanges)
	require.Equal(t, []broker.Binding{
		{Queue: "orders.validate", Exchange: "orders", Key: "validate"},
		{Queue: "orders.charge", Exchange: "orders", Key: "charge"},
		{Queue: "orders.ship", Exchange: "orders", Key: "ship"},
	}, top.Bindings)
	want := broker.ConsumerTopology("orders.validate").Merge(broker.ConsumerTopology("orders.charge"), broker.ConsumerTopology("orders.ship"))
	require.Equal(t, want.Queues, top.Queues, "queues are declared exactly as Consume declares them")
	require.Equal(t, "RoutingSlip[done: - | next: validate -> charge -> ship]", p.Slip().String())

	for name, steps := range map[string][]string{"no steps": nil, "empty step": {"a", ""}, "twice": {"a", "b", "a"}} {
		_, err := patterns.NewPipeline("p", steps...)
		require.ErrorIs(t, err, broker.ErrInvalidOption, name)
	}
	_, err = patterns.NewPipeline("", "a")
	require.ErrorIs(t, err, broker.ErrInvalidOption)
}

// pipelineStage consumes step's queue with p.Follow and returns the
// messages the step saw.
func pipelineStage(t *testing.T, conn *broker.Conn, p *patterns.Pipeline, step string, fn patterns.StepFunc, opts ...patterns.FollowOption) <-chan *broker.Message {
	t.Helper()
	seen := make(chan *broker.Message, 64)
	h, err := p.Follow(conn, func(ctx context.Context, m *broker.Message) (any, error) {
		seen <- m
		return fn(ctx, m)
	}, opts...)
	require.NoError(t, err)
	_, err = conn.Consume(brokertest.Ctx(t), p.QueueFor(step), h, broker.WithRetry(broker.Constant(3, 0)))
	require.NoError(t, err)
	return seen
}

func pipelineSum(rm metricdata.ResourceMetrics, name string, attrs ...attribute.KeyValue) int64 {
	var n int64
	for _, sm := range rm.ScopeMetrics {
		for _, m := range sm.Metrics {
			if m.Name != name {
				continue
			}
			sum, ok := m.Data.(metricdata.Sum[int64])
			if !ok {
				continue
			}
			for _, dp := range sum.DataPoints {
				match := true
				for _, a := range attrs {
					if v, ok := dp.Attributes.Value(a.Key); !ok || v != a.Value {
						match = false
					}
				}
				if match {
					n += dp.Value
				}
			}
		}
	}
	return n
}

func pipelineDurations(rm metricdata.ResourceMetrics, pipeline string) (count uint64, sum float64) {
	for _, sm := range rm.ScopeMetrics {
		for _, m := range sm.Metrics {
			if h, ok := m.Data.(metricdata.Histogram[float64]); ok && m.Name == "acemq.pipeline.run.duration" {
				for _, dp := range h.DataPoints {
					if v, _ := dp.Attributes.Value("pipeline"); v.AsString() == pipeline {
						count += dp.Count
						sum += dp.Sum
					}
				}
			}
		}
	}
	return count, sum
}

func TestPipelineRunAndMetrics(t *testing.T) {
	brokertest.Each(t, func(t *testing.T, h *brokertest.Harness) {
		ctx := brokertest.Ctx(t)
		reader := sdkmetric.NewManualReader()
		conn := h.Open(broker.Config{MeterProvider: sdkmetric.NewMeterProvider(sdkmetric.WithReader(reader))})
		p := declarePipeline(h, "validate", "charge", "ship")
		pass := func(_ context.Context, m *broker.Message) (any, error) {
			var s string
			if err := m.Decode(&s); err != nil {
				return nil, err
			}
			if s == "digital" {
				return nil, nil
			}
			return s, nil
		}
		validate := pipelineStage(t, conn, p, "validate", pass)
		charge := pipelineStage(t, conn, p, "charge", pass)
		ship := pipelineStage(t, conn, p, "ship", pass)

		runID, err := p.Start(ctx, conn, "parcel", broker.Mandatory())
		require.NoError(t, err)
		first := brokertest.Next(t, validate, 10*time.Second)
		brokertest.Next(t, charge, 10*time.Second)
		last := brokertest.Next(t, ship, 10*time.Second)
		require.Equal(t, p.Steps(), first.Route)
		require.Equal(t, 0, first.RoutePosition)
		require.Equal(t, p.Steps(), last.Route)
		require.Equal(t, 2, last.RoutePosition)
		require.Equal(t, runID, last.RunID)
		require.Equal(t, p.Name(), last.Exchange)
		require.Equal(t, "ship", last.RoutingKey)
		require.NotContains(t, last.Headers, broker.HeaderRoutingSlip, "a route stays a route")

		_, err = p.Start(ctx, conn, "digital")
		require.NoError(t, err)
		brokertest.Next(t, validate, 10*time.Second)
		brokertest.Nothing(t, charge, 300*time.Millisecond)

		var rm metricdata.ResourceMetrics
		require.Eventually(t, func() bool {
			require.NoError(t, reader.Collect(ctx, &rm))
			return pipelineSum(rm, "acemq.pipeline.run.total") == 2
		}, 5*time.Second, 20*time.Millisecond)
		pl := attribute.String("pipeline", p.Name())
		require.EqualValues(t, 1, pipelineSum(rm, "acemq.pipeline.run.total", pl,
			attribute.String("step", "ship"), attribute.String("outcome", patterns.PipelineCompleted)))
		require.EqualValues(t, 1, pipelineSum(rm, "acemq.pipeline.run.total", pl,
			attribute.String("step", "validate"), attribute.String("outcome", patterns.PipelineEndedEarly)))
		count, sum := pipelineDurations(rm, p.Name())
		require.EqualValues(t, 2, count)
		require.Greater(t, sum, 0.0, "the duration is the age of the envelope")
	})
}

// TestPipelineInteropPlainClient: a message a plain AMQP client (a Java
// service, say) publishes into the middle of a pipeline, with nothing but
// the three route headers, is followed to the end and keeps its run id.
func TestPipelineInteropPlainClient(t *testing.T) {
	brokertest.OnRabbit(t, func(t *testing.T, h *brokertest.Harness) {
		conn := h.Open(broker.Config{})
		p := declarePipeline(h, "validate", "charge", "ship")
		charged := pipelineStage(t, conn, p, "charge", func(context.Context, *broker.Message) (any, error) {
			return map[string]string{"charged": "yes"}, nil
		})
		shipped := pipelineStage(t, conn, p, "ship", func(context.Context, *broker.Message) (any, error) { return nil, nil })

		ch := h.Plain()
		require.NoError(t, ch.PublishWithContext(brokertest.Ctx(t), p.Name(), "charge", true, false, amqp.Publishing{
			ContentType: "application/json",
			MessageId:   "java-msg-1",
			Body:        []byte(`{"order":"o-1"}`),
			Headers: amqp.Table{
				"x-acemq-route":          []any{"validate", "charge", "ship"},
				"x-acemq-route-position": int32(1),
				"x-acemq-run-id":         "java-run-1",
			},
		}))
		in := brokertest.Next(t, charged, 10*time.Second)
		require.Equal(t, "java-run-1", in.RunID)
		last := brokertest.Next(t, shipped, 10*time.Second)
		require.Equal(t, "java-run-1", last.RunID, "the run id is unchanged at the last step")
		require.Equal(t, []string{"validate", "charge", "ship"}, last.Route)
		require.Equal(t, 2, last.RoutePosition)
		require.Equal(t, "java-msg-1", last.CausationID)
		require.Equal(t, 1, last.Attempt)
		var body map[string]string
		require.NoError(t, last.Decode(&body))
		require.Equal(t, "yes", body["charged"])
		require.Eventually(t, func() bool { return h.Depth(p.QueueFor("ship")) == 0 }, 5*time.Second, 20*time.Millisecond)
	})
}

// TestPipelineFormConversion: a step writes the form asked for; becoming a
// route refuses a step the pipeline lacks.
func TestPipelineFormConversion(t *testing.T) {
	brokertest.Each(t, func(t *testing.T, h *brokertest.Harness) {
		ctx := brokertest.Ctx(t)
		conn := h.Open(broker.Config{})
		p := declarePipeline(h, "validate", "charge", "ship")
		on := func(context.Context, *broker.Message) (any, error) { return "on", nil }
		pipelineStage(t, conn, p, "validate", on, patterns.Write(patterns.Route))
		pipelineStage(t, conn, p, "charge", on, patterns.Write(patterns.Slip))
		shipped := pipelineStage(t, conn, p, "ship", on)

		// Arrives as a slip, leaves validate as a route, leaves charge as a
		// slip again.
		runID, err := p.Slip().Start(ctx, conn, "in")
		require.NoError(t, err)
		last := brokertest.Next(t, shipped, 10*time.Second)
		require.Nil(t, last.Route, "written as a slip")
		slip, err := patterns.SlipFrom(last)
		require.NoError(t, err)
		require.Equal(t, "RoutingSlip[done: validate -> charge | next: ship]", slip.String())
		require.Equal(t, p.Name(), slip.Done()[0].Exchange, "steps read from the route are resolved against the pipeline")
		require.Equal(t, runID, last.RunID)

		// A slip naming a step this pipeline does not have cannot become a
		// route: given up, not published into the void.
		foreign := patterns.NewRoutingSlip().Step("validate", p.Name(), "validate").Step("refund", "payments", "refund")
		_, err = foreign.Start(ctx, conn, "in", broker.MessageID("foreign"))
		require.NoError(t, err)
		d := h.Get(p.QueueFor("validate")+broker.DeadLetterSuffix, 10*time.Second)
		require.Equal(t, "foreign", d.MessageID)
		require.Contains(t, d.Headers[broker.HeaderError], "step not in the pipeline")
	})
}

// TestPipelineRouteWithoutPipeline: a route message reaching a follower
// that has no pipeline cannot be sent on, and is given up before its step
// runs.
func TestPipelineRouteWithoutPipeline(t *testing.T) {
	brokertest.Each(t, func(t *testing.T, h *brokertest.Harness) {
		ctx := brokertest.Ctx(t)
		conn := h.Open(broker.Config{})
		q := h.Queue("orphan")
		ran := slipStage(t, conn, q, func(context.Context, *broker.Message) (any, error) { return "on", nil })
		require.NoError(t, conn.Publish(ctx, "x", broker.To(q), broker.Route([]string{"a", "b"}, 0), broker.RunID("r-1")))
		d := h.Get(q+broker.DeadLetterSuffix, 10*time.Second)
		require.Contains(t, d.Headers[broker.HeaderError], patterns.ErrNoPipeline.Error())
		require.Equal(t, "r-1", d.Headers[broker.HeaderRunID], "the run id survives the dead-letter")
		brokertest.Nothing(t, ran, 100*time.Millisecond)
	})
}
