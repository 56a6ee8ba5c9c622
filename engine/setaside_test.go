package engine_test

import (
	"bytes"
	"context"
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/acemq/acemq-flow/broker"
	"github.com/acemq/acemq-flow/broker/transport"
	"github.com/acemq/acemq-flow/dsl"
	"github.com/acemq/acemq-flow/engine"
	"github.com/acemq/acemq-flow/engine/journal"
	"github.com/acemq/acemq-flow/internal/brokertest"
	"github.com/acemq/acemq-flow/internal/testenv"
)

// inject publishes body to a step of the fixture's flow as a foreign
// AceMQ service would: the run id, a route of the given steps at position
// 0, and extra headers (which may replace those; the message goes to the
// step at the position they give).
func (fx *fixture) inject(run string, route []string, body []byte, extra transport.Table) {
	fx.t.Helper()
	steps := make([]any, len(route))
	for i, s := range route {
		steps[i] = s
	}
	h := transport.Table{broker.HeaderRunID: run, broker.HeaderRoute: steps, broker.HeaderRoutePosition: int64(0)}
	for k, v := range extra {
		h[k] = v
	}
	to := route[0]
	if pos, ok := h[broker.HeaderRoutePosition].(int64); ok && int(pos) < len(route) {
		to = route[pos]
	}
	require.NoError(fx.t, fx.conn.Transport().Publish(brokertest.Ctx(fx.t), transport.Publishing{
		Exchange: fx.name, RoutingKey: to, Mandatory: true,
		Message: transport.Message{MessageID: broker.NewID(), ContentType: broker.ContentTypeJSON, Timestamp: time.Now(), Headers: h, Body: body},
	}))
}

// TestUndecodableBodyIsParkedAtOnce: a body the flow's default JSON codec
// cannot read (not JSON, JSON of the wrong type, a megabyte of bytes) is
// parked on its first delivery, never retried through the ladder, and the
// run is failed in the journal with the parked queue and the reason.
func TestUndecodableBodyIsParkedAtOnce(t *testing.T) {
	brokertest.Each(t, func(t *testing.T, h *brokertest.Harness) {
		fx := newFixture(t, h, engine.Config{})
		ef := newEffects()
		fx.register(dsl.Flow(fx.name,
			dsl.Step("charge", appendStep(ef, "charge")).Retry(broker.Constant(5, 10*time.Second))))
		fx.work()
		bodies := map[string][]byte{
			"not-json":   []byte(`{"id":`),
			"wrong-type": []byte(`"just a string"`),
			"megabyte":   bytes.Repeat([]byte("x"), 1<<20),
		}
		for name, body := range bodies {
			fx.inject(fx.name+"-"+name, []string{"charge"}, body, nil)
		}
		for name := range bodies {
			run := fx.name + "-" + name
			r := fx.waitStatus(run, journal.Failed, 10*time.Second)
			require.Equal(t, fx.name+".charge"+broker.ParkedSuffix, r.DeadLetter, name)
			require.NotEmpty(t, r.Error, name)
			require.Equal(t, []string{"step:charge:parked"}, fx.outcomes(run), "%s: no retry before it was parked", name)
			require.Zero(t, ef.get(run, "charge"), name)
		}
		h.WaitDepth(fx.name+".charge"+broker.ParkedSuffix, len(bodies), 5*time.Second)
		require.Zero(t, h.Depth(fx.name+".charge"+broker.DeadLetterSuffix))
	})
}

// TestRouteNamingAnUnknownStepIsRefused: a message whose route names a
// step the flow does not have is given up before its step runs, naming
// the step, instead of being routed by the first step's condition.
func TestRouteNamingAnUnknownStepIsRefused(t *testing.T) {
	brokertest.Each(t, func(t *testing.T, h *brokertest.Harness) {
		fx := newFixture(t, h, engine.Config{})
		ef := newEffects()
		fx.register(dsl.Flow(fx.name,
			dsl.Step("first", appendStep(ef, "first")).When(`payload.amount > 100`),
			dsl.Step("second", appendStep(ef, "second"))))
		fx.work()
		run := fx.name + "-ghost"
		fx.inject(run, []string{"second", "ghost"}, []byte(`{"id":"o-1","amount":1}`), nil)
		r := fx.waitStatus(run, journal.Failed, 10*time.Second)
		require.ErrorContains(t, engine.ErrUnknownStep, "unknown step")
		require.Contains(t, r.Error, `"ghost"`)
		require.Contains(t, r.Error, engine.ErrUnknownStep.Error())
		require.Equal(t, fx.name+".second"+broker.DeadLetterSuffix, r.DeadLetter)
		require.Zero(t, ef.get(run, "second"), "refused before the step ran")
		h.WaitDepth(fx.name+".second"+broker.DeadLetterSuffix, 1, 5*time.Second)
	})
}

// TestParkedForItsHeadersIsJournalled: a message whose engine headers
// cannot be read is parked before its step runs; when it carries a run
// id, that run is failed in the journal with the reason, so that runs
// list and the dashboard find it.
func TestParkedForItsHeadersIsJournalled(t *testing.T) {
	brokertest.Each(t, func(t *testing.T, h *brokertest.Harness) {
		fx := newFixture(t, h, engine.Config{})
		ef := newEffects()
		fx.register(dsl.Flow(fx.name, dsl.Step("charge", appendStep(ef, "charge"))))
		fx.work()
		run := fx.name + "-malformed"
		fx.inject(run, []string{"charge"}, []byte(`{"id":"o-1"}`), transport.Table{broker.HeaderRoutePosition: "first"})
		r := fx.waitStatus(run, journal.Failed, 10*time.Second)
		require.Equal(t, fx.name+".charge"+broker.ParkedSuffix, r.DeadLetter)
		require.Contains(t, r.Error, broker.HeaderRoutePosition)
		require.Equal(t, "charge", r.Step)
		require.Equal(t, []string{"step:charge:parked"}, fx.outcomes(run))
		h.WaitDepth(fx.name+".charge"+broker.ParkedSuffix, 1, 5*time.Second)

		runs, err := fx.eng.Journal().Runs(context.Background(), journal.Query{Flow: fx.name, Statuses: []journal.Status{journal.Failed}})
		require.NoError(t, err)
		require.Len(t, runs, 1)
		require.Equal(t, run, runs[0].ID)
	})
}

// TestDeliveryLimitGivesUpAndJournals: a step's delivery that comes back
// unsettled DeliveryLimit times (each worker that took it died holding it)
// is given up before the step runs again: to the dead-letter queue, saying
// why, and its run failed in the journal rather than known only to the
// queues.
func TestDeliveryLimitGivesUpAndJournals(t *testing.T) {
	brokertest.Each(t, func(t *testing.T, h *brokertest.Harness) {
		const limit = 2
		j, err := journal.NewMemory(0)
		require.NoError(t, err)
		name := testenv.Name(t, "flow")
		ef := newEffects()
		entered := make(chan string, 4)
		release := make(chan struct{})
		t.Cleanup(func() { close(release) })
		flow := dsl.Flow(name, dsl.Step("charge", func(ctx context.Context, o Order) (Order, error) {
			m, _ := broker.Handling(ctx)
			ef.add(m.RunID, "charge")
			entered <- m.RunID
			<-release
			return o, errors.New("the worker died long ago")
		}))
		// worker is a worker process of its own on the test's broker.
		worker := func() *engine.Engine {
			conn, err := broker.Config{Ladder: h.Ladder, Logger: testenv.Logger(t)}.Open(brokertest.Ctx(t), h.URL)
			require.NoError(t, err)
			t.Cleanup(func() {
				ctx, cancel := context.WithTimeout(context.Background(), time.Second)
				defer cancel()
				_ = conn.Close(ctx)
			})
			eng, err := engine.New(engine.Config{Conn: conn, Journal: j, DeliveryLimit: limit})
			require.NoError(t, err)
			require.NoError(t, eng.Register(flow))
			_, err = eng.StartWorker(brokertest.Ctx(t))
			require.NoError(t, err)
			return eng
		}
		h.DeleteLater(name+".charge", name+".charge"+broker.DeadLetterSuffix, name+".charge"+broker.ParkedSuffix,
			name+".compensate", name+".compensate"+broker.DeadLetterSuffix, name+".compensate"+broker.ParkedSuffix)
		h.DeleteExchangeLater(name)

		first := worker()
		res, err := first.Start(brokertest.Ctx(t), name, Order{ID: "poison"})
		require.NoError(t, err)
		die := first
		for range limit {
			require.Equal(t, res.RunID, brokertest.Next(t, entered, 10*time.Second))
			require.NoError(t, die.Conn().Transport().Close(brokertest.Ctx(t)), "the worker dies holding the delivery")
			die = worker()
		}
		dead := h.Get(name+".charge"+broker.DeadLetterSuffix, 10*time.Second)
		require.Equal(t, res.RunID, dead.Headers[broker.HeaderRunID])
		require.Contains(t, dead.Headers[broker.HeaderError], engine.ErrDeliveryLimit.Error())
		require.Contains(t, dead.Headers[broker.HeaderError], "delivered 3 times")
		require.Equal(t, limit, ef.get(res.RunID, "charge"), "not run a third time")
		require.Eventually(t, func() bool {
			r, err := j.Run(context.Background(), res.RunID)
			return err == nil && r.Status == journal.Failed && strings.Contains(r.Error, engine.ErrDeliveryLimit.Error()) &&
				r.DeadLetter == name+".charge"+broker.DeadLetterSuffix
		}, 10*time.Second, 20*time.Millisecond, "the run is failed in the journal")
	})
}

// TestGivenUpBeforeItsHandlerIsCompensated: a message the consumer gives
// up before the step's handler sees it (its attempts already spent) still
// has its run compensated, and, the compensation having the run, its copy
// is taken out of the dead-letter queue again.
func TestGivenUpBeforeItsHandlerIsCompensated(t *testing.T) {
	brokertest.Each(t, func(t *testing.T, h *brokertest.Harness) {
		fx := newFixture(t, h, engine.Config{})
		ef := newEffects()
		fx.register(dsl.Flow(fx.name,
			dsl.Step("charge", appendStep(ef, "charge")).Compensate(func(ctx context.Context, o Order) error {
				m, _ := broker.Handling(ctx)
				require.Equal(t, "o-spent", o.ID, "the compensation gets what the step returned")
				ef.add(m.RunID, "undo-charge")
				return nil
			}),
			dsl.Step("ship", appendStep(ef, "ship")).Retry(broker.Constant(3, 0))))
		fx.work()
		run := fx.name + "-spent"
		fx.inject(run, []string{"charge", "ship"}, []byte(`{"id":"o-spent"}`), transport.Table{
			broker.HeaderRoutePosition: int64(1), broker.HeaderAttempt: int64(9),
			engine.HeaderRun: `{"compensate":[{"step":"charge","data":{"id":"o-spent","amount":0}}]}`,
		})
		r := fx.waitStatus(run, journal.Compensated, 15*time.Second)
		require.Equal(t, "charge", r.Step)
		require.Contains(t, fx.outcomes(run), "step:ship:failed")
		require.Equal(t, 1, ef.get(run, "undo-charge"))
		require.Zero(t, ef.get(run, "ship"), "given up before it ran")
		h.WaitDepth(fx.name+".ship"+broker.DeadLetterSuffix, 0, 10*time.Second)
	})
}
