package engine_test

import (
	"context"
	"encoding/json"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/acemq/acemq-flow/broker"
	"github.com/acemq/acemq-flow/dsl"
	"github.com/acemq/acemq-flow/engine"
	"github.com/acemq/acemq-flow/internal/brokertest"
)

func same(_ context.Context, o Order) (Order, error) { return o, nil }

func refund(context.Context, Order) error { return nil }

// TestCompiledFlow: what every DSL construct becomes: queues, bindings,
// compensation queues, retry and ordering, as flows show prints it.
func TestCompiledFlow(t *testing.T) {
	t.Parallel()
	conn, err := broker.Open(context.Background(), "memory://")
	require.NoError(t, err)
	defer conn.Close(context.Background())
	eng, err := engine.New(engine.Config{Conn: conn})
	require.NoError(t, err)
	defer eng.Close(context.Background())
	require.NoError(t, eng.Register(dsl.Flow("shop",
		dsl.Step("validate", same).Timeout(time.Minute),
		dsl.Step("charge", same).Compensate(refund).Retry(broker.Exponential(5, time.Second)).CompensateRetry(broker.Constant(3, time.Second)),
		dsl.Delay(30*time.Minute),
		dsl.Step("ship", same).When(`payload.digital == false`).OrderedBy(`payload.id`).Concurrency(2).Prefetch(5),
		dsl.DelayUntil(`payload.id`),
		dsl.External("invoice"),
		dsl.Example(Order{ID: "o-1", Amount: 3}),
		dsl.HoldForReplay(10*time.Minute),
	)))
	info, err := eng.Flow("shop")
	require.NoError(t, err)
	require.Equal(t, "pipeline", info.Form)
	require.Equal(t, "shop", info.Exchange)
	require.Equal(t, "engine_test.Order", info.Input)
	require.Equal(t, "10m0s", info.HoldForReplay)
	require.Equal(t, "shop.compensate", info.CompensateQueue)
	require.JSONEq(t, `{"id":"o-1","amount":3,"digital":false,"Trail":null}`, string(info.ExamplePayload))
	want := []engine.StepInfo{
		{Name: "validate", Queue: "shop.validate", Retry: "5 attempts, 1s doubling up to 5m0s", Timeout: "1m0s",
			Concurrency: 8, Prefetch: 20, Input: "engine_test.Order", Output: "engine_test.Order"},
		{Name: "charge", Queue: "shop.charge", Retry: "5 attempts, 1s doubling up to 5m0s", Compensation: "shop.compensate.charge",
			CompensationRetry: "3 attempts, 1s apart", Concurrency: 8, Prefetch: 20, Input: "engine_test.Order", Output: "engine_test.Order"},
		{Name: "ship", Queue: "shop.ship", When: "payload.digital == false", Delay: "30m0s", Retry: "5 attempts, 1s doubling up to 5m0s",
			OrderedBy: "payload.id", Concurrency: 2, Prefetch: 5, Input: "engine_test.Order", Output: "engine_test.Order"},
		{Name: "invoice", Queue: "shop.invoice", External: true, DelayUntil: "payload.id"},
	}
	require.Equal(t, want, info.Steps)
	b, err := json.Marshal(eng.Flows())
	require.NoError(t, err)
	require.Contains(t, string(b), `"example_payload":{"id":"o-1"`)

	// Working the flow declares exactly this topology on the broker.
	ctx := context.Background()
	w, err := eng.StartWorker(ctx)
	require.NoError(t, err)
	defer w.Close(ctx)
	for _, q := range []string{"shop.validate", "shop.charge", "shop.ship", "shop.invoice", "shop.compensate.charge", "shop.compensate",
		"shop.charge.dlq", "shop.invoice.parked", "shop.compensate.charge.dlq"} {
		_, err := conn.Transport().Inspect(ctx, q)
		require.NoError(t, err, q)
	}
	st, err := conn.Transport().Inspect(ctx, "shop.invoice")
	require.NoError(t, err)
	require.Zero(t, st.Consumers, "an External step's queue is another service's to consume")
	st, err = conn.Transport().Inspect(ctx, "shop.ship")
	require.NoError(t, err)
	require.Equal(t, 1, st.Consumers)
}

// TestRegisterRefuses: a flow that did not build, a second flow of one
// name, and an unknown flow are errors that say so.
func TestRegisterRefuses(t *testing.T) {
	t.Parallel()
	conn, err := broker.Open(context.Background(), "memory://")
	require.NoError(t, err)
	defer conn.Close(context.Background())
	eng, err := engine.New(engine.Config{Conn: conn})
	require.NoError(t, err)
	defer eng.Close(context.Background())
	require.ErrorIs(t, eng.Register(dsl.Flow("empty")), dsl.ErrInvalidFlow)
	require.NoError(t, eng.Register(dsl.Flow("one", dsl.Step("a", same))))
	require.ErrorIs(t, eng.Register(dsl.Flow("one", dsl.Step("b", same))), engine.ErrFlowRegistered)
	require.ErrorIs(t, eng.Register(dsl.Flow("two", dsl.Step("a", same)), dsl.Flow("two", dsl.Step("a", same))), engine.ErrFlowRegistered)
	require.Len(t, eng.Flows(), 1, "a refused batch registers nothing")
	_, err = eng.Flow("nope")
	require.ErrorIs(t, err, engine.ErrUnknownFlow)
	_, err = eng.StartWorker(context.Background(), "nope")
	require.ErrorIs(t, err, engine.ErrUnknownFlow)
	_, err = engine.New(engine.Config{})
	require.ErrorIs(t, err, engine.ErrInvalidConfig)
	bad := broker.Constant(3, time.Millisecond)
	_, err = engine.New(engine.Config{Conn: conn, Retry: &bad})
	require.ErrorIs(t, err, engine.ErrInvalidConfig)
}

// TestExternalStepServedByAPlainClient: a step another service serves,
// here a plain amqp091-go consumer that follows x-acemq-route as any AceMQ
// library does: the engine sends the run to it, and picks it up again at
// the step after.
func TestExternalStepServedByAPlainClient(t *testing.T) {
	brokertest.OnRabbit(t, func(t *testing.T, h *brokertest.Harness) {
		fx := newFixture(t, h, engine.Config{})
		done := make(chan Order, 1)
		fx.register(dsl.Flow(fx.name,
			dsl.Step("charge", same),
			dsl.External("invoice"),
			dsl.Step("archive", func(_ context.Context, o Order) (Order, error) { done <- o; return o, nil })))
		fx.work()
		ch := h.Plain()
		deliveries, err := ch.Consume(fx.name+".invoice", "", false, false, false, false, nil)
		require.NoError(t, err)
		served := make(chan struct{})
		go func() {
			defer close(served)
			d, ok := <-deliveries
			if !ok {
				return
			}
			// The invoicing service: add its invoice number and send the
			// run on to the next step of the route, as an AceMQ follower.
			var o map[string]any
			_ = json.Unmarshal(d.Body, &o)
			o["id"] = o["id"].(string) + "/INV-7"
			body, _ := json.Marshal(o)
			headers := d.Headers
			route := headers["x-acemq-route"].([]any)
			pos := headers["x-acemq-route-position"].(int64)
			headers["x-acemq-route-position"] = pos + 1
			_ = ch.Publish(fx.name, route[pos+1].(string), true, false, amqpPublishing(d.MessageId, d.CorrelationId, body, headers))
			_ = d.Ack(false)
		}()
		run := fx.start(Order{ID: "o-7"})
		got := brokertest.Next(t, done, 15*time.Second)
		require.Equal(t, "o-7/INV-7", got.ID)
		<-served
		fx.waitStatus(run, "completed", 10*time.Second)
		fx.waitOutcomes(run, []string{"start::started", "step:charge:completed", "handoff:invoice:handed off", "step:invoice:completed", "step:archive:completed"})
	})
}
