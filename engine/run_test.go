package engine_test

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/acemq/acemq-flow/broker"
	"github.com/acemq/acemq-flow/broker/transport"
	"github.com/acemq/acemq-flow/dsl"
	"github.com/acemq/acemq-flow/engine"
	"github.com/acemq/acemq-flow/engine/journal"
	"github.com/acemq/acemq-flow/internal/brokertest"
)

func appendStep(fx *effects, name string) func(context.Context, Order) (Order, error) {
	return func(ctx context.Context, o Order) (Order, error) {
		m, _ := broker.Handling(ctx)
		fx.add(m.RunID, name)
		o.Trail = append(o.Trail, name)
		return o, nil
	}
}

// TestHappyPath: a run goes through its steps in order, each getting what
// the one before returned, and the journal shows it completed.
func TestHappyPath(t *testing.T) {
	brokertest.Each(t, func(t *testing.T, h *brokertest.Harness) {
		fx := newFixture(t, h, engine.Config{})
		ef := newEffects()
		var last Order
		done := make(chan struct{})
		fx.register(dsl.Flow(fx.name,
			dsl.Step("validate", appendStep(ef, "validate")),
			dsl.Step("charge", appendStep(ef, "charge")),
			dsl.Step("ship", func(ctx context.Context, o Order) (Order, error) {
				o.Trail = append(o.Trail, "ship")
				last = o
				close(done)
				return o, nil
			})))
		fx.work()
		run := fx.start(Order{ID: "o-1", Amount: 42})
		brokertest.Next(t, done, 10*time.Second)
		require.Equal(t, []string{"validate", "charge", "ship"}, last.Trail)
		require.Equal(t, 42, last.Amount)
		r := fx.waitStatus(run, journal.Completed, 10*time.Second)
		require.Equal(t, "ship", r.Step)
		require.JSONEq(t, `{"id":"o-1","amount":42,"digital":false,"Trail":null}`, string(r.Input))
		require.NotNil(t, r.EndedAt)
		fx.waitOutcomes(run, []string{"start::started", "step:validate:completed", "step:charge:completed", "step:ship:completed"})
		require.Equal(t, 1, ef.get(run, "validate"))
	})
}

// TestRetryThenSuccess: a step that fails is retried by its policy through
// the ladder, and the run completes; the timeline shows the retry.
func TestRetryThenSuccess(t *testing.T) {
	brokertest.Each(t, func(t *testing.T, h *brokertest.Harness) {
		fx := newFixture(t, h, engine.Config{})
		ef := newEffects()
		fx.register(dsl.Flow(fx.name,
			dsl.Step("charge", func(ctx context.Context, o Order) (Order, error) {
				m, _ := broker.Handling(ctx)
				if ef.add(m.RunID, "charge") < 3 {
					return o, errors.New("gateway timeout")
				}
				return o, nil
			}).Retry(broker.Constant(5, 0))))
		fx.work()
		run := fx.start(Order{ID: "o-2"})
		r := fx.waitStatus(run, journal.Completed, 10*time.Second)
		require.Empty(t, r.Error)
		fx.waitOutcomes(run, []string{"start::started", "step:charge:retried", "step:charge:retried", "step:charge:completed"})
		tl, err := fx.eng.Journal().Timeline(context.Background(), run)
		require.NoError(t, err)
		require.Equal(t, 2, tl[2].Attempt)
		require.Contains(t, tl[1].Error, "gateway timeout")
	})
}

// TestGiveUpCompensatesInReverse: a step given up compensates the
// completed steps that have a compensation, newest first, each with what
// it returned; a step without one is skipped. The failed message is not
// left in the dead-letter queue: the compensation has the run.
func TestGiveUpCompensatesInReverse(t *testing.T) {
	brokertest.Each(t, func(t *testing.T, h *brokertest.Harness) {
		fx := newFixture(t, h, engine.Config{})
		ef := newEffects()
		undo := func(name string) func(context.Context, Order) error {
			return func(ctx context.Context, o Order) error {
				m, _ := broker.Handling(ctx)
				require.Contains(t, o.Trail, name, "a compensation gets what its step returned")
				ef.add(m.RunID, "undo-"+name)
				return nil
			}
		}
		fx.register(dsl.Flow(fx.name,
			dsl.Step("reserve", appendStep(ef, "reserve")).Compensate(undo("reserve")),
			dsl.Step("notify", appendStep(ef, "notify")),
			dsl.Step("charge", appendStep(ef, "charge")).Compensate(undo("charge")),
			dsl.Step("ship", func(context.Context, Order) (Order, error) {
				return Order{}, broker.Fatal(errors.New("no courier"))
			})))
		fx.work()
		run := fx.start(Order{ID: "o-3"})
		r := fx.waitStatus(run, journal.Compensated, 15*time.Second)
		require.Contains(t, r.Error, "no courier", "a compensated run says why")
		require.Equal(t, []string{run + "/undo-charge", run + "/undo-reserve"}, ef.undone(), "newest first")
		fx.waitOutcomes(run, []string{
			"start::started", "step:reserve:completed", "step:notify:completed", "step:charge:completed", "step:ship:failed",
			"compensation:charge:compensated", "compensation:reserve:compensated",
		})
		require.Zero(t, h.Depth(fx.name+".ship"+broker.DeadLetterSuffix),
			"the compensation has the run: its message is not left in the dead-letter queue, which holds what needs a person")
		require.Empty(t, r.DeadLetter)
	})
}

// TestFailingCompensationIsUnresolved: a compensation given up leaves the
// run unresolved, and the compensations before it still run.
func TestFailingCompensationIsUnresolved(t *testing.T) {
	brokertest.Each(t, func(t *testing.T, h *brokertest.Harness) {
		fx := newFixture(t, h, engine.Config{})
		ef := newEffects()
		fx.register(dsl.Flow(fx.name,
			dsl.Step("reserve", appendStep(ef, "reserve")).Compensate(func(ctx context.Context, o Order) error {
				m, _ := broker.Handling(ctx)
				ef.add(m.RunID, "undo-reserve")
				return nil
			}),
			dsl.Step("charge", appendStep(ef, "charge")).Compensate(func(ctx context.Context, o Order) error {
				m, _ := broker.Handling(ctx)
				ef.add(m.RunID, "undo-charge")
				return errors.New("refund service down")
			}).CompensateRetry(broker.Constant(2, 0)),
			dsl.Step("ship", func(context.Context, Order) (Order, error) {
				return Order{}, broker.Fatal(errors.New("no courier"))
			})))
		fx.work()
		run := fx.start(Order{ID: "o-4"})
		fx.waitStatus(run, journal.Unresolved, 15*time.Second)
		require.Equal(t, 2, ef.get(run, "undo-charge"), "the failing compensation had its retries")
		require.Equal(t, 1, ef.get(run, "undo-reserve"), "the one before it still ran")
		// The given-up compensation is recorded once its consumer has set it
		// aside, which may be after the one it sent on has run.
		require.Eventually(t, func() bool {
			return slices.Contains(fx.outcomes(run), "compensation:charge:compensation_failed")
		}, 5*time.Second, 20*time.Millisecond)
		outcomes := fx.outcomes(run)
		require.Equal(t, "compensation:reserve:compensated", outcomes[len(outcomes)-1])
		h.WaitDepth(fx.name+".compensate.charge"+broker.DeadLetterSuffix, 1, 5*time.Second)
	})
}

// TestWhenSkips: a step whose When is false is skipped, recorded as such,
// and the run goes on with the payload unchanged.
func TestWhenSkips(t *testing.T) {
	brokertest.Each(t, func(t *testing.T, h *brokertest.Harness) {
		fx := newFixture(t, h, engine.Config{})
		ef := newEffects()
		fx.register(dsl.Flow(fx.name,
			dsl.Step("charge", appendStep(ef, "charge")),
			dsl.Step("ship", appendStep(ef, "ship")).When(`payload.digital == false`),
			dsl.Step("email", appendStep(ef, "email"))))
		fx.work()
		digital := fx.start(Order{ID: "d", Digital: true})
		physical := fx.start(Order{ID: "p"})
		fx.waitStatus(digital, journal.Completed, 10*time.Second)
		fx.waitStatus(physical, journal.Completed, 10*time.Second)
		require.Zero(t, ef.get(digital, "ship"))
		require.Equal(t, 1, ef.get(physical, "ship"))
		fx.waitOutcomes(digital, []string{"start::started", "step:charge:completed", "skip:ship:skipped", "step:email:completed"})
	})
}

// TestDelayedStepNeverEarly: a delay holds the hop into the next step on
// the ladder; the step never runs before it is due, and the run shows as
// waiting meanwhile.
func TestDelayedStepNeverEarly(t *testing.T) {
	brokertest.Each(t, func(t *testing.T, h *brokertest.Harness) {
		fx := newFixture(t, h, engine.Config{})
		charged := make(chan time.Time, 1)
		shipped := make(chan time.Time, 1)
		fx.register(dsl.Flow(fx.name,
			dsl.Step("charge", func(_ context.Context, o Order) (Order, error) { charged <- time.Now(); return o, nil }),
			dsl.Delay(2*time.Second),
			dsl.Step("ship", func(_ context.Context, o Order) (Order, error) { shipped <- time.Now(); return o, nil })))
		fx.work()
		run := fx.start(Order{ID: "o-5"})
		at := brokertest.Next(t, charged, 10*time.Second)
		r := fx.waitStatus(run, journal.Waiting, 5*time.Second)
		require.NotNil(t, r.DueAt)
		require.Equal(t, "ship", r.Step)
		got := brokertest.Next(t, shipped, 10*time.Second)
		require.GreaterOrEqual(t, got.Sub(at), 2*time.Second, "never early")
		fx.waitStatus(run, journal.Completed, 10*time.Second)
	})
}

// TestDelayedStart: a run started In(d) waits on the ladder, then runs.
func TestDelayedStart(t *testing.T) {
	brokertest.Each(t, func(t *testing.T, h *brokertest.Harness) {
		fx := newFixture(t, h, engine.Config{})
		ran := make(chan time.Time, 1)
		fx.register(dsl.Flow(fx.name, dsl.Step("remind", func(_ context.Context, o Order) (Order, error) { ran <- time.Now(); return o, nil })))
		fx.work()
		before := time.Now()
		res, err := fx.eng.Start(brokertest.Ctx(t), fx.name, Order{ID: "later"}, engine.In(2*time.Second))
		require.NoError(t, err)
		require.WithinDuration(t, before.Add(2*time.Second), res.DueAt, time.Second)
		r := fx.waitStatus(res.RunID, journal.Waiting, 5*time.Second)
		require.True(t, r.DueAt.Equal(res.DueAt))
		require.False(t, brokertest.Next(t, ran, 10*time.Second).Before(res.DueAt), "never early")
		fx.waitStatus(res.RunID, journal.Completed, 5*time.Second)
	})
}

// TestEndEndsTheRun: a step returning dsl.End ends the run well there.
func TestEndEndsTheRun(t *testing.T) {
	brokertest.Each(t, func(t *testing.T, h *brokertest.Harness) {
		fx := newFixture(t, h, engine.Config{})
		ef := newEffects()
		fx.register(dsl.Flow(fx.name,
			dsl.Step("check", func(_ context.Context, o Order) (Order, error) { return o, dsl.End }),
			dsl.Step("charge", appendStep(ef, "charge"))))
		fx.work()
		run := fx.start(Order{ID: "o-6"})
		r := fx.waitStatus(run, journal.Ended, 10*time.Second)
		require.Equal(t, "check", r.Step)
		require.Zero(t, ef.get(run, "charge"))
	})
}

// TestStartRefusesABadPayload: a payload that does not fit the flow's input
// is refused before anything is published.
func TestStartRefusesABadPayload(t *testing.T) {
	brokertest.Each(t, func(t *testing.T, h *brokertest.Harness) {
		fx := newFixture(t, h, engine.Config{})
		fx.register(dsl.Flow(fx.name, dsl.Step("a", func(_ context.Context, o Order) (Order, error) { return o, nil })))
		ctx := brokertest.Ctx(t)
		for name, p := range map[string]any{
			"wrong type":    "an order",
			"unknown field": []byte(`{"id":"x","amnt":3}`),
			"not json":      []byte(`{`),
			"wrong kind":    []byte(`{"amount":"many"}`),
			"nil":           nil,
		} {
			_, err := fx.eng.Start(ctx, fx.name, p)
			require.ErrorIs(t, err, engine.ErrInvalidPayload, name)
		}
		_, err := fx.eng.Start(ctx, "no-such-flow", Order{})
		require.ErrorIs(t, err, engine.ErrUnknownFlow)
		require.NoError(t, fx.eng.Flush(ctx))
		runs, err := fx.eng.Journal().Runs(ctx, journal.Query{})
		require.NoError(t, err)
		require.Empty(t, runs)
	})
}

// TestCompensationsRunAtTheStepsConcurrency: a step's compensations run
// as many at once as the step does: three runs failing together are
// compensated together, not one after another.
func TestCompensationsRunAtTheStepsConcurrency(t *testing.T) {
	brokertest.Each(t, func(t *testing.T, h *brokertest.Harness) {
		fx := newFixture(t, h, engine.Config{})
		const runs = 3
		var (
			mu       sync.Mutex
			inFlight int
			all      = make(chan struct{})
		)
		fx.register(dsl.Flow(fx.name,
			dsl.Step("charge", func(_ context.Context, o Order) (Order, error) { return o, nil }).
				Concurrency(runs).
				Compensate(func(ctx context.Context, _ Order) error {
					mu.Lock()
					if inFlight++; inFlight == runs {
						close(all)
					}
					mu.Unlock()
					// Each waits for the others: only compensations running
					// side by side get past this.
					select {
					case <-all:
						return nil
					case <-time.After(10 * time.Second):
						return broker.Fatal(errors.New("compensations ran one after another"))
					}
				}),
			dsl.Step("ship", func(context.Context, Order) (Order, error) {
				return Order{}, broker.Fatal(errors.New("no courier"))
			})))
		fx.work()
		ids := make([]string, runs)
		for i := range ids {
			ids[i] = fx.start(Order{ID: fmt.Sprint(i)})
		}
		for _, id := range ids {
			fx.waitStatus(id, journal.Compensated, 20*time.Second)
		}
	})
}

// TestHopThatFailsIsRetriedNotTheStep: a step whose next message cannot be
// routed (its queue unbound for a while) is not run again: its timeline
// shows the hop failing, and the retry sends the message the step
// produced, once the queue is bound again.
func TestHopThatFailsIsRetriedNotTheStep(t *testing.T) {
	brokertest.Each(t, func(t *testing.T, h *brokertest.Harness) {
		fx := newFixture(t, h, engine.Config{})
		ef := newEffects()
		fx.register(dsl.Flow(fx.name,
			dsl.Step("charge", appendStep(ef, "charge")).Retry(broker.Constant(10, time.Second)),
			dsl.Step("ship", appendStep(ef, "ship"))))
		fx.work()
		ctx := brokertest.Ctx(t)
		ship := transport.Binding{Queue: fx.name + ".ship", Exchange: fx.name, Key: "ship"}
		require.NoError(t, h.Admin.Transport().Unbind(ctx, ship))
		run := fx.start(Order{ID: "o-hop"})
		require.NoError(t, fx.eng.Flush(ctx))
		require.Eventually(t, func() bool {
			return slices.Contains(fx.outcomes(run), "step:charge:hop failed")
		}, 10*time.Second, 20*time.Millisecond, "the failed hop is in the timeline as such: %v", fx.outcomes(run))
		require.NoError(t, h.Admin.Declare(ctx, broker.Topology{Bindings: []broker.Binding{{Queue: ship.Queue, Exchange: ship.Exchange, Key: ship.Key}}}))
		fx.waitStatus(run, journal.Completed, 15*time.Second)
		require.Equal(t, 1, ef.get(run, "charge"), "the step ran once; its kept message was sent again")
		require.Equal(t, 1, ef.get(run, "ship"))
		tl, err := fx.eng.Journal().Timeline(ctx, run)
		require.NoError(t, err)
		for _, e := range tl {
			if e.Outcome == "hop failed" {
				require.Contains(t, e.Error, "ship", "it says where the message was going")
			}
		}
	})
}
