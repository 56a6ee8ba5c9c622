package engine_test

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/acemq/acemq-flow/broker"
	"github.com/acemq/acemq-flow/dsl"
	"github.com/acemq/acemq-flow/engine"
	"github.com/acemq/acemq-flow/engine/journal"
	"github.com/acemq/acemq-flow/internal/brokertest"
)

// TestChildRunReturnsToItsParent: a Child step starts a run of another
// flow under <parent>.<step>, which knows its parent; the parent waits,
// then goes on with the child's output. A child that fails is followed by
// another child run (<parent>.<step>.2) while the step's policy allows,
// and a child that keeps failing fails the step, which compensates the
// parent.
func TestChildRunReturnsToItsParent(t *testing.T) {
	brokertest.Each(t, func(t *testing.T, h *brokertest.Harness) {
		fx := newFixture(t, h, engine.Config{})
		ef := newEffects()
		childName := fx.name + "-child"
		child := dsl.Flow(childName,
			dsl.Step("pack", func(ctx context.Context, o Order) (Order, error) {
				m, _ := broker.Handling(ctx)
				n := ef.add(o.ID, "pack")
				if o.ID == "flaky" && n == 1 {
					return o, broker.Fatal(errors.New("tape ran out"))
				}
				if o.ID == "doomed" {
					return o, broker.Fatal(errors.New("no boxes"))
				}
				ef.add(m.RunID, "child-run")
				o.Trail = append(o.Trail, "pack")
				return o, nil
			}),
			dsl.Step("label", appendStep(ef, "label")))
		var last Order
		fx.register(dsl.Flow(fx.name,
			dsl.Step("charge", appendStep(ef, "charge")).Compensate(func(ctx context.Context, o Order) error {
				m, _ := broker.Handling(ctx)
				ef.add(m.RunID, "undo-charge")
				return nil
			}),
			dsl.Child[Order, Order]("ship", child).Retry(broker.Constant(2, 0)),
			dsl.Step("notify", func(ctx context.Context, o Order) (Order, error) {
				last = o
				return o, nil
			})))
		cx := &fixture{t: t, h: h, conn: fx.conn, eng: fx.eng, journal: fx.journal, name: childName}
		cx.register(child)
		fx.work()

		run := fx.start(Order{ID: "ok"})
		fx.waitStatus(run, journal.Completed, 15*time.Second)
		require.Equal(t, []string{"charge", "pack", "label"}, last.Trail, "the parent went on with the child's output")
		require.Equal(t, 1, ef.get(run+".ship", "child-run"), "the child ran as <parent>.<step>")
		c, err := fx.eng.Journal().Run(context.Background(), run+".ship")
		require.NoError(t, err)
		require.Equal(t, journal.Completed, c.Status)
		require.Contains(t, fx.outcomes(run), "step:ship:started child run "+run+".ship")
		require.Contains(t, fx.outcomes(run+".ship"), "start::started by run "+run+", step ship", "the child knows its parent")

		flaky := fx.start(Order{ID: "flaky"})
		fx.waitStatus(flaky, journal.Completed, 15*time.Second)
		require.Equal(t, 2, ef.get("flaky", "pack"), "the failed child was started again")
		c, err = fx.eng.Journal().Run(context.Background(), flaky+".ship")
		require.NoError(t, err)
		require.Equal(t, journal.Failed, c.Status, "the first child run failed")
		c, err = fx.eng.Journal().Run(context.Background(), flaky+".ship.2")
		require.NoError(t, err)
		require.Equal(t, journal.Completed, c.Status, "the second, a run of its own, completed")

		doomed := fx.start(Order{ID: "doomed"})
		r := fx.waitStatus(doomed, journal.Compensated, 15*time.Second)
		require.Contains(t, r.Error, "no boxes")
		require.Equal(t, 2, ef.get("doomed", "pack"), "started twice, as the policy allows")
		require.Equal(t, 1, ef.get(doomed, "undo-charge"))
	})
}

// TestAChildThatFailsInABranchFailsItsStep: a child run whose branch is
// given up fails at its fork, not at a step of its main line; its parent
// hears it as from any failed child: the Child step fails, and the parent
// is compensated.
func TestAChildThatFailsInABranchFailsItsStep(t *testing.T) {
	brokertest.Each(t, func(t *testing.T, h *brokertest.Harness) {
		fx := newFixture(t, h, engine.Config{})
		ef := newEffects()
		childName := fx.name + "-child"
		child := dsl.Flow(childName,
			dsl.Parallel("fulfil",
				dsl.Branch(dsl.Step("pick", appendStep(ef, "pick"))),
				dsl.Branch(dsl.Step("book", func(ctx context.Context, o Order) (Order, error) {
					m, _ := broker.Handling(ctx)
					ef.add(m.RunID, "book")
					return o, broker.Fatal(errors.New("no courier"))
				}))).
				Join(func(_ context.Context, o Order, picked, booked Order) (Order, error) { return o, nil }))
		fx.register(dsl.Flow(fx.name,
			dsl.Step("charge", appendStep(ef, "charge")).Compensate(func(ctx context.Context, o Order) error {
				m, _ := broker.Handling(ctx)
				ef.add(m.RunID, "undo-charge")
				return nil
			}),
			dsl.Child[Order, Order]("ship", child).Retry(broker.NoRetry()),
			dsl.Step("notify", appendStep(ef, "notify"))))
		cx := &fixture{t: t, h: h, conn: fx.conn, eng: fx.eng, journal: fx.journal, name: childName}
		cx.register(child)
		fx.work()

		run := fx.start(Order{ID: "o1"})
		r := fx.waitStatus(run, journal.Compensated, 15*time.Second)
		require.Contains(t, r.Error, "no courier", "the child's reason is the step's")
		require.Equal(t, 1, ef.get(run, "undo-charge"))
		require.Zero(t, ef.get(run, "notify"), "the parent did not go on")
		c, err := fx.eng.Journal().Run(context.Background(), run+".ship")
		require.NoError(t, err)
		require.NotEqual(t, journal.Completed, c.Status)
		require.Equal(t, 1, ef.get(run+".ship", "book"))
	})
}
