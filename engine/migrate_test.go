package engine_test

import (
	"context"
	"errors"
	"fmt"
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
	"github.com/acemq/acemq-flow/patterns"
)

// trails keeps the trail each run's last step saw: the steps it went
// through, in order.
type trails struct {
	mu sync.Mutex
	of map[string][]string
}

func (tr *trails) last(ef *effects, name string) func(context.Context, Order) (Order, error) {
	step := appendStep(ef, name)
	return func(ctx context.Context, o Order) (Order, error) {
		o, err := step(ctx, o)
		m, _ := broker.Handling(ctx)
		tr.mu.Lock()
		defer tr.mu.Unlock()
		tr.of[m.RunID] = o.Trail
		return o, err
	}
}

func (tr *trails) get(run string) []string {
	tr.mu.Lock()
	defer tr.mu.Unlock()
	return tr.of[run]
}

// inFlight starts runs of v1 and stops its worker once each has run a and
// waits on the ladder for what follows: runs in flight on v1's route that
// v2's workers will take.
func inFlight(t *testing.T, v1 *fixture, ef *effects, orders ...Order) []string {
	t.Helper()
	ctx := brokertest.Ctx(t)
	w, err := v1.eng.StartWorker(ctx)
	require.NoError(t, err)
	var ids []string
	for _, o := range orders {
		ids = append(ids, v1.start(o))
	}
	for _, id := range ids {
		require.Eventually(t, func() bool { return ef.get(id, "a") == 1 }, 10*time.Second, 5*time.Millisecond)
	}
	require.NoError(t, w.Close(ctx))
	for _, id := range ids {
		v1.waitStatus(id, journal.Waiting, 5*time.Second)
	}
	return ids
}

// versions are two fixtures of one flow sharing a journal and an
// idempotency store, as workers of two versions share a database: its
// version 1 and the version 2 that replaces it.
func versions(t *testing.T, h *brokertest.Harness) (v1, v2 *fixture) {
	t.Helper()
	j, err := journal.NewMemory(0)
	require.NoError(t, err)
	store, err := patterns.NewInMemoryIdempotencyStore(time.Hour)
	require.NoError(t, err)
	v1, v2 = newFixture(t, h, engine.Config{Journal: j, Store: store}), newFixture(t, h, engine.Config{Journal: j, Store: store})
	v2.name = v1.name
	return v1, v2
}

// fatesOf are a check's fates, by step.
func fatesOf(t *testing.T, fx *fixture) map[string]string {
	t.Helper()
	c, err := fx.eng.Check(brokertest.Ctx(t), fx.name)
	require.NoError(t, err)
	require.False(t, c.Strands(), "%+v", c.Strays)
	out := map[string]string{}
	for _, s := range c.Strays {
		out[s.Step] = s.Fate
	}
	return out
}

// TestRemovedStep: a run waiting to reach a step the flow removed goes on
// at the step Removed sends it To, on the flow's route from there; without
// To it fails at the step, compensated as any failed run; and a removed
// step's compensation, owed by a run that fails later, is given up (the
// run is unresolved) while the compensations before it still run.
func TestRemovedStep(t *testing.T) {
	brokertest.Each(t, func(t *testing.T, h *brokertest.Harness) {
		undo := func(ef *effects, name string) func(context.Context, Order) error {
			return func(ctx context.Context, _ Order) error {
				m, _ := broker.Handling(ctx)
				ef.add(m.RunID, name)
				return nil
			}
		}
		payOrFail := func(ef *effects) func(context.Context, Order) (Order, error) {
			return func(ctx context.Context, o Order) (Order, error) {
				if o.Amount == 0 {
					return o, broker.Fatal(errors.New("nothing to ship"))
				}
				return appendStep(ef, "c")(ctx, o)
			}
		}
		v1flow := func(name string, ef *effects) *dsl.FlowDef {
			return dsl.Flow(name, dsl.Step("a", appendStep(ef, "a")).Compensate(undo(ef, "undo-a")), dsl.Delay(time.Second),
				dsl.Step("b", appendStep(ef, "b")).Compensate(undo(ef, "undo-b")), dsl.Step("c", payOrFail(ef)), dsl.Step("d", appendStep(ef, "d")))
		}

		t.Run("to a step", func(t *testing.T) {
			ef, tr := newEffects(), &trails{of: map[string][]string{}}
			v1, v2 := versions(t, h)
			v1.register(v1flow(v1.name, ef))
			ids := inFlight(t, v1, ef, Order{ID: "1", Amount: 1}, Order{ID: "2", Amount: 2})

			// d is no longer at the end: the runs go on from c on this route.
			v2.register(dsl.Flow(v1.name, dsl.Step("a", appendStep(ef, "a")).Compensate(undo(ef, "undo-a")), dsl.Step("c", payOrFail(ef)),
				dsl.Step("e", tr.last(ef, "e")), dsl.Removed("b", dsl.To("c")), dsl.Removed("d")))
			require.Equal(t, map[string]string{"b": "goes on at c", "d": engine.FateFails}, fatesOf(t, v2))
			v2.work()
			for _, id := range ids {
				v2.waitStatus(id, journal.Completed, 15*time.Second)
				require.Zero(t, ef.get(id, "b"), "b is removed")
				require.Equal(t, 1, ef.get(id, "c"))
				require.Equal(t, []string{"a", "c", "e"}, tr.get(id), "from c on, the flow's route as it is now")
			}
			require.Zero(t, h.Depth(v1.name+".b"))
		})

		t.Run("to failed", func(t *testing.T) {
			ef := newEffects()
			v1, v2 := versions(t, h)
			v1.register(v1flow(v1.name, ef))
			ids := inFlight(t, v1, ef, Order{ID: "1", Amount: 1})

			v2.register(dsl.Flow(v1.name, dsl.Step("a", appendStep(ef, "a")).Compensate(undo(ef, "undo-a")), dsl.Step("c", payOrFail(ef)),
				dsl.Step("d", appendStep(ef, "d")), dsl.Removed("b")))
			require.Equal(t, map[string]string{"b": engine.FateFails}, fatesOf(t, v2))
			v2.work()
			r := v2.waitStatus(ids[0], journal.Compensated, 15*time.Second)
			v2.waitOutcomes(ids[0], []string{"start::started", "step:a:completed", "delay:b:waiting", "step:b:failed", "compensation:a:compensated"})
			require.Contains(t, r.Error, dsl.ErrStepRemoved.Error())
			require.Equal(t, 1, ef.get(ids[0], "undo-a"), "the run is compensated as any failed run is")
			require.Zero(t, ef.get(ids[0], "b")+ef.get(ids[0], "c"))
		})

		t.Run("its compensation", func(t *testing.T) {
			ef := newEffects()
			v1, v2 := versions(t, h)
			v1.register(dsl.Flow(v1.name, dsl.Step("a", appendStep(ef, "a")).Compensate(undo(ef, "undo-a")),
				dsl.Step("b", appendStep(ef, "b")).Compensate(undo(ef, "undo-b")), dsl.Delay(time.Second), dsl.Step("c", payOrFail(ef))))
			w, err := v1.eng.StartWorker(brokertest.Ctx(t))
			require.NoError(t, err)
			id := v1.start(Order{ID: "0", Amount: 0})
			require.Eventually(t, func() bool { return ef.get(id, "b") == 1 }, 10*time.Second, 5*time.Millisecond)
			require.NoError(t, w.Close(brokertest.Ctx(t)))
			v1.waitStatus(id, journal.Waiting, 5*time.Second)

			v2.register(dsl.Flow(v1.name, dsl.Step("a", appendStep(ef, "a")).Compensate(undo(ef, "undo-a")), dsl.Step("c", payOrFail(ef)),
				dsl.Removed("b")))
			v2.work()
			r := v2.waitStatus(id, journal.Unresolved, 15*time.Second)
			require.Zero(t, ef.get(id, "undo-b"), "b's compensation went with it")
			require.Equal(t, 1, ef.get(id, "undo-a"), "the compensations before it still run")
			require.Contains(t, r.Error, "nothing to ship")
			require.Zero(t, h.Depth(v1.name+".compensate.b"))
		})
	})
}

// Shipment is Order's successor in TestAdoptTakesTheNewRoute: amounts in
// cents.
type Shipment struct {
	ID    string   `json:"id"`
	Cents int      `json:"cents"`
	Trail []string `json:"trail"`
}

// TestAdoptTakesTheNewRoute: by default a run in flight finishes on the
// route it started with (a step inserted after it does not run, a reorder
// does not apply to it); with dsl.Adopt it takes the flow's route from its
// next step, with its payload mapped to the step's new type by
// dsl.MapPayload.
func TestAdoptTakesTheNewRoute(t *testing.T) {
	brokertest.Each(t, func(t *testing.T, h *brokertest.Harness) {
		v1flow := func(name string, ef *effects) *dsl.FlowDef {
			return dsl.Flow(name, dsl.Step("a", appendStep(ef, "a")), dsl.Delay(time.Second),
				dsl.Step("b", appendStep(ef, "b")), dsl.Step("c", appendStep(ef, "c")))
		}

		t.Run("by default, the route it started with", func(t *testing.T) {
			ef, tr := newEffects(), &trails{of: map[string][]string{}}
			v1, v2 := versions(t, h)
			v1.register(v1flow(v1.name, ef))
			ids := inFlight(t, v1, ef, Order{ID: "1", Amount: 1})

			// x inserted, b and c swapped.
			v2.register(dsl.Flow(v1.name, dsl.Step("a", appendStep(ef, "a")), dsl.Step("x", appendStep(ef, "x")),
				dsl.Step("c", tr.last(ef, "c")), dsl.Step("b", tr.last(ef, "b"))))
			v2.work()
			v2.waitStatus(ids[0], journal.Completed, 15*time.Second)
			require.Equal(t, []string{"a", "b", "c"}, tr.get(ids[0]))
			fresh := v2.start(Order{ID: "2", Amount: 2})
			v2.waitStatus(fresh, journal.Completed, 15*time.Second)
			require.Equal(t, []string{"a", "x", "c", "b"}, tr.get(fresh))
		})

		t.Run("adopted, payload mapped", func(t *testing.T) {
			ef := newEffects()
			var mu sync.Mutex
			seen := map[string]Shipment{}
			ship := func(name string) func(context.Context, Shipment) (Shipment, error) {
				return func(ctx context.Context, s Shipment) (Shipment, error) {
					m, _ := broker.Handling(ctx)
					ef.add(m.RunID, name)
					s.Trail = append(s.Trail, name)
					mu.Lock()
					defer mu.Unlock()
					seen[m.RunID] = s
					return s, nil
				}
			}
			v1, v2 := versions(t, h)
			v1.register(v1flow(v1.name, ef))
			ids := inFlight(t, v1, ef, Order{ID: "1", Amount: 3})

			toShipment := func(_ context.Context, o Order) (Shipment, error) {
				return Shipment{ID: o.ID, Cents: 100 * o.Amount, Trail: o.Trail}, nil
			}
			aShip := func(ctx context.Context, o Order) (Shipment, error) {
				m, _ := broker.Handling(ctx)
				ef.add(m.RunID, "a")
				return Shipment{ID: o.ID, Cents: 100 * o.Amount, Trail: append(o.Trail, "a")}, nil
			}
			v2.register(dsl.Flow(v1.name, dsl.Step("a", aShip), dsl.Step("b", ship("b")), dsl.Step("x", ship("x")), dsl.Step("c", ship("c")),
				dsl.Adopt(dsl.MapPayload("b", toShipment))))
			v2.work()
			v2.waitStatus(ids[0], journal.Completed, 15*time.Second)
			mu.Lock()
			got := seen[ids[0]]
			mu.Unlock()
			require.Equal(t, Shipment{ID: "1", Cents: 300, Trail: []string{"a", "b", "x", "c"}}, got, "x, inserted, runs; b got the mapped payload")
			fresh := v2.start(Order{ID: "2", Amount: 2})
			v2.waitStatus(fresh, journal.Completed, 15*time.Second)
			mu.Lock()
			got = seen[fresh]
			mu.Unlock()
			require.Equal(t, Shipment{ID: "2", Cents: 200, Trail: []string{"a", "b", "x", "c"}}, got, "a run on the flow's route is not mapped")
		})
	})
}

// TestMigrationsRefused: what the flow says of its earlier steps is
// checked when it is built.
func TestMigrationsRefused(t *testing.T) {
	a := dsl.Step("a", func(_ context.Context, o Order) (Order, error) { return o, nil })
	b := dsl.Step("b", func(_ context.Context, o Order) (Order, error) { return o, nil })
	m := dsl.MapPayload("b", func(_ context.Context, o Order) (Order, error) { return o, nil })
	for _, tc := range []struct {
		name  string
		parts []dsl.Part
		want  string
	}{
		{"removed step still there", []dsl.Part{a, b, dsl.Removed("b")}, `still has a step "b"`},
		{"removed to nowhere", []dsl.Part{a, b, dsl.Removed("z", dsl.To("y"))}, `"y" is not a step of the flow's own route`},
		{"two destinations", []dsl.Part{a, b, dsl.Removed("z", dsl.To("a"), dsl.To("b"))}, "at most one To"},
		{"renamed and removed", []dsl.Part{a, b, dsl.Renamed("z", "a"), dsl.Removed("z")}, "renamed or removed twice"},
		{"adopt twice", []dsl.Part{a, b, dsl.Adopt(), dsl.Adopt()}, "Adopt twice"},
		{"map of no step", []dsl.Part{a, dsl.Adopt(m)}, `MapPayload("b"): not a step`},
		{"map twice", []dsl.Part{a, b, dsl.Adopt(m, m)}, `MapPayload("b") twice`},
		{"removed, bad name", []dsl.Part{a, dsl.Removed("no such")}, "not a step name"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			err := dsl.Flow("f", tc.parts...).Err()
			require.ErrorIs(t, err, dsl.ErrInvalidFlow)
			require.ErrorContains(t, err, tc.want)
		})
	}
}

// TestRenamedWaitAndBranch: a run waiting on a signal at a wait that the
// next version renames and moves (a step inserted before it) is signalled
// by the wait's new name, cancelled likewise, and goes on; a run on a
// branch, waiting on a delay before a step the next version renames, goes
// on at the new name and its join fires once.
func TestRenamedWaitAndBranch(t *testing.T) {
	brokertest.Each(t, func(t *testing.T, h *brokertest.Harness) {
		ctx := brokertest.Ctx(t)
		t.Run("wait", func(t *testing.T) {
			ef, paid := newEffects(), make(chan dsl.Signalled[Order, Approval], 2)
			v1, v2 := versions(t, h)
			v1.register(approvalFlow(v1.name, time.Minute, ef, paid, nil, nil))
			w, err := v1.eng.StartWorker(ctx)
			require.NoError(t, err)
			run, other := v1.start(Order{ID: "o-1", Amount: 5}), v1.start(Order{ID: "o-2"})
			v1.waitStatus(run, journal.Waiting, 10*time.Second)
			v1.waitStatus(other, journal.Waiting, 10*time.Second)
			require.NoError(t, w.Close(ctx))

			v2.register(dsl.Flow(v1.name,
				dsl.Step("request", appendStep(ef, "request")).Compensate(func(ctx context.Context, _ Order) error {
					m, _ := broker.Handling(ctx)
					ef.add(m.RunID, "undo-request")
					return nil
				}),
				dsl.Step("check", appendStep(ef, "check")),
				dsl.WaitFor[Order, Approval]("approve", time.Minute),
				dsl.Step("pay", func(ctx context.Context, s dsl.Signalled[Order, Approval]) (string, error) {
					paid <- s
					return s.Signal.By, nil
				}),
				dsl.Renamed("approval", "approve")))
			v2.work()
			_, err = v2.eng.Signal(ctx, run, "approval", Approval{By: "ada", OK: true})
			require.ErrorIs(t, err, engine.ErrNoSuchWait, "the wait's old name is no wait of this version")
			sent, err := v2.eng.Signal(ctx, run, "approve", Approval{By: "ada", OK: true})
			require.NoError(t, err)
			require.True(t, sent.Resumed, "the signal found the wait the run reached under its old name and position")
			got := goesOn(v2, paid, run)
			require.Equal(t, dsl.Signalled[Order, Approval]{Input: Order{ID: "o-1", Amount: 5}, Signal: Approval{By: "ada", OK: true}}, got)
			v2.waitStatus(run, journal.Completed, 10*time.Second)
			require.Zero(t, ef.get(run, "check"), "the run keeps its route: check was inserted before where it was")

			_, err = v2.eng.CancelRun(ctx, other, engine.CancelRequest{Reason: "no longer wanted"})
			require.NoError(t, err)
			v2.waitStatus(other, journal.Cancelled, 10*time.Second)
			require.Eventually(t, func() bool { return ef.get(other, "undo-request") == 1 }, 10*time.Second, 5*time.Millisecond,
				"woken from its wait and compensated: %v", v2.outcomes(other))
		})

		t.Run("branch", func(t *testing.T) {
			ef := newEffects()
			var joins sync.Map
			flow := func(name, reserve string, parts ...dsl.Part) *dsl.FlowDef {
				return dsl.Flow(name, append([]dsl.Part{
					dsl.Step("a", appendStep(ef, "a")),
					dsl.Parallel("fulfil",
						dsl.Branch(dsl.Step("pick", appendStep(ef, "pick")), dsl.Delay(time.Second), dsl.Step(reserve, appendStep(ef, reserve))),
						dsl.Branch(dsl.Step("book", appendStep(ef, "book"))),
					).Join(func(ctx context.Context, o Order, r Order, b Order) (Order, error) {
						m, _ := broker.Handling(ctx)
						n, _ := joins.LoadOrStore(m.RunID, new(int))
						*n.(*int)++
						return Order{ID: o.ID, Trail: append(r.Trail, b.Trail...)}, nil
					}),
					dsl.Step("notify", appendStep(ef, "notify")),
				}, parts...)...)
			}
			v1, v2 := versions(t, h)
			v1.register(flow(v1.name, "reserve"))
			w, err := v1.eng.StartWorker(ctx)
			require.NoError(t, err)
			run := v1.start(Order{ID: "o-1"})
			require.Eventually(t, func() bool { return ef.get(run, "pick") == 1 && ef.get(run, "book") == 1 }, 10*time.Second, 5*time.Millisecond)
			require.NoError(t, w.Close(ctx))

			v2.register(flow(v1.name, "hold", dsl.Renamed("reserve", "hold")))
			v2.work()
			v2.waitStatus(run, journal.Completed, 15*time.Second)
			require.Equal(t, 1, ef.get(run, "hold"), "the branch went on at the new name")
			require.Zero(t, ef.get(run, "reserve"))
			require.Equal(t, 1, ef.get(run, "notify"))
			n, _ := joins.Load(run)
			require.Equal(t, 1, *n.(*int), "the join fired once")
			require.Zero(t, h.Depth(v1.name+".reserve"))
		})
	})
}

// TestDeleteDrained: the queues of a step a flow no longer has are deleted
// once they are empty and unread, never while they hold a message, while
// something consumes them, or while the flow still says what became of
// the step.
func TestDeleteDrained(t *testing.T) {
	brokertest.Each(t, func(t *testing.T, h *brokertest.Harness) {
		ctx := brokertest.Ctx(t)
		ef := newEffects()
		v1, v2 := versions(t, h)
		v1.register(dsl.Flow(v1.name, dsl.Step("a", appendStep(ef, "a")), dsl.Step("b", appendStep(ef, "b")), dsl.Step("c", appendStep(ef, "c"))))
		w := v1.work()
		v1.waitStatus(v1.start(Order{ID: "1"}), journal.Completed, 10*time.Second)
		require.NoError(t, w.Close(ctx))
		bq, cq := v1.name+".b", v1.name+".c"
		h.DeleteLater(bq, bq+broker.DeadLetterSuffix, bq+broker.ParkedSuffix, cq, cq+broker.DeadLetterSuffix, cq+broker.ParkedSuffix)

		still := newFixture(t, h, engine.Config{Journal: v1.eng.Journal()})
		still.name = v1.name
		still.register(dsl.Flow(v1.name, dsl.Step("a", appendStep(ef, "a")), dsl.Removed("b", dsl.To("a")), dsl.Removed("c")))
		got, err := still.eng.DeleteDrained(ctx, v1.name)
		require.NoError(t, err)
		require.Len(t, got, 2)
		for _, d := range got {
			require.False(t, d.Deleted)
			require.Contains(t, d.Left, "still says Renamed or Removed")
		}

		v2.register(dsl.Flow(v1.name, dsl.Step("a", appendStep(ef, "a"))))
		require.NoError(t, h.Admin.Transport().Publish(ctx, transport.Publishing{RoutingKey: cq, Message: transport.Message{MessageID: "late", Body: []byte(`{}`)}}))
		sub, err := h.Admin.Transport().Consume(ctx, bq+broker.DeadLetterSuffix, transport.ConsumeOptions{Prefetch: 1})
		require.NoError(t, err)
		got, err = v2.eng.DeleteDrained(ctx, v1.name)
		require.NoError(t, err)
		left := map[string]string{}
		for _, d := range got {
			require.False(t, d.Deleted, "%+v", d)
			left[d.Step] = d.Left
		}
		require.Equal(t, map[string]string{"b": bq + broker.DeadLetterSuffix + " has 1 consumers (a worker of an older version?)", "c": cq + " holds 1 messages"}, left)
		require.Equal(t, 1, h.Depth(cq))

		require.NoError(t, sub.Cancel(ctx))
		require.Len(t, h.Drain(cq), 1)
		got, err = v2.eng.DeleteDrained(ctx, v1.name)
		require.NoError(t, err)
		require.Len(t, got, 2)
		for _, d := range got {
			require.True(t, d.Deleted, "%+v", d)
			require.Contains(t, d.Queues, v1.name+"."+d.Step)
			for _, q := range d.Queues {
				_, err := h.Admin.Transport().Inspect(ctx, q)
				require.True(t, transport.IsCode(err, transport.NotFound), "%s: %v", q, err)
			}
		}
		require.NoError(t, v2.eng.Flush(ctx))
		got, err = v2.eng.DeleteDrained(ctx, v1.name)
		require.NoError(t, err)
		require.Empty(t, got, "nothing left to delete")
	})
}

// TestRollingDeploy: while workers of two versions run side by side, a
// step's message done by the older one under the step's old name and
// delivered again to the newer one (its acknowledgement lost with the
// connection) is a duplicate there, not a second run of the step; the
// newer one sends the run on under the names it came with; and a worker
// takes a run whose route names, among the steps it has done, one its
// version does not have.
func TestRollingDeploy(t *testing.T) {
	brokertest.Each(t, func(t *testing.T, h *brokertest.Harness) {
		ctx := brokertest.Ctx(t)
		ef := newEffects()
		ran := make(chan string, 4)
		v1, v2 := versions(t, h)
		v1.register(dsl.Flow(v1.name, dsl.Step("a", appendStep(ef, "a")), dsl.Step("b", appendStep(ef, "b")), dsl.Step("c", appendStep(ef, "c"))))
		w := v1.work()
		tapB, tapC := h.Queue("tap-b"), h.Queue("tap-c")
		h.Bind(tapB, v1.name, "b")
		h.Bind(tapC, v1.name, "c")
		done := v1.start(Order{ID: "1"})
		v1.waitStatus(done, journal.Completed, 10*time.Second)
		again := h.Get(tapB, 5*time.Second)
		h.Get(tapC, 5*time.Second)
		require.NoError(t, w.Close(ctx))

		b2 := func(ctx context.Context, o Order) (Order, error) {
			m, _ := broker.Handling(ctx)
			ran <- m.RunID
			return appendStep(ef, "b2")(ctx, o)
		}
		v2.register(dsl.Flow(v1.name, dsl.Step("a", appendStep(ef, "a")), dsl.Step("x", appendStep(ef, "x")), dsl.Step("b2", b2),
			dsl.Step("c", appendStep(ef, "c")), dsl.Renamed("b", "b2")))
		w2 := v2.work()
		require.NoError(t, h.Admin.Transport().Publish(ctx, transport.Publishing{RoutingKey: v1.name + ".b", Message: again.Message}))
		brokertest.Nothing(t, ran, 500*time.Millisecond)
		require.Zero(t, ef.get(done, "b2"), "b was claimed under its old name: the copy is a duplicate")
		require.Equal(t, 1, ef.get(done, "c"))

		// A run of version 1 at b goes on under b's name.
		inFlightRun, err := v1.eng.Start(ctx, v1.name, Order{ID: "2"})
		require.NoError(t, err)
		require.Equal(t, inFlightRun.RunID, <-ran)
		v2.waitStatus(inFlightRun.RunID, journal.Completed, 10*time.Second)
		hop := h.Get(tapC, 5*time.Second)
		require.Equal(t, []string{"a", "b", "c"}, routeOf(t, hop), "the route it was sent on keeps b's name")
		require.NoError(t, w2.Close(ctx))

		// Version 1 takes a run of version 2 at c: x, done, is history.
		w = v1.work()
		out, err := h.Admin.Prepare(ctx, Order{ID: "3"}, broker.ToExchange(v1.name), broker.To("c"), broker.Mandatory(),
			broker.Route([]string{"a", "x", "b2", "c"}, 3), broker.RunID("run-of-v2"))
		require.NoError(t, err)
		require.NoError(t, h.Admin.Send(ctx, out))
		require.Eventually(t, func() bool { return ef.get("run-of-v2", "c") == 1 }, 10*time.Second, 5*time.Millisecond)
		require.Zero(t, h.Depth(v1.name+".c"+broker.DeadLetterSuffix))
		require.NoError(t, w.Close(ctx))
	})
}

// routeOf is the route a step's message carries.
func routeOf(t *testing.T, d *transport.Delivery) []string {
	t.Helper()
	arr, ok := d.Headers[broker.HeaderRoute].([]any)
	require.True(t, ok, "%v", d.Headers)
	var steps []string
	for _, s := range arr {
		steps = append(steps, fmt.Sprint(s))
	}
	return steps
}

// TestHeldAtARenamedStep: a run of the older version that fails at a
// renamed step and is held for replay is set aside in the old name's
// dead-letter queue, and when its hold ends, compensated, it is taken out
// of that queue: nothing is left there for a replay to find.
func TestHeldAtARenamedStep(t *testing.T) {
	brokertest.Each(t, func(t *testing.T, h *brokertest.Harness) {
		ef := newEffects()
		undo := func(ctx context.Context, _ Order) error {
			m, _ := broker.Handling(ctx)
			ef.add(m.RunID, "undo-a")
			return nil
		}
		v1, v2 := versions(t, h)
		v1.register(dsl.Flow(v1.name, dsl.Step("a", appendStep(ef, "a")).Compensate(undo), dsl.Delay(time.Second),
			dsl.Step("b", appendStep(ef, "b")), dsl.HoldForReplay(time.Second)))
		ids := inFlight(t, v1, ef, Order{ID: "1"})
		v2.register(dsl.Flow(v1.name, dsl.Step("a", appendStep(ef, "a")).Compensate(undo),
			dsl.Step("b2", func(context.Context, Order) (Order, error) { return Order{}, broker.Fatal(errors.New("declined")) }),
			dsl.Renamed("b", "b2"), dsl.HoldForReplay(time.Second)))
		v2.work()
		v2.waitStatus(ids[0], journal.Compensated, 15*time.Second)
		require.Equal(t, 1, ef.get(ids[0], "undo-a"))
		require.Eventually(t, func() bool { return h.Depth(v1.name+".b"+broker.DeadLetterSuffix) == 0 }, 5*time.Second, 10*time.Millisecond,
			"the held run's message is taken out of b's dead-letter queue")
	})
}

// TestRenamedToNoCompensation: a compensation a run of the older version
// owes for a step renamed to one without a compensation is given up (the
// run is unresolved), and the compensations before it still run.
func TestRenamedToNoCompensation(t *testing.T) {
	brokertest.Each(t, func(t *testing.T, h *brokertest.Harness) {
		ef := newEffects()
		undo := func(name string) func(context.Context, Order) error {
			return func(ctx context.Context, _ Order) error {
				m, _ := broker.Handling(ctx)
				ef.add(m.RunID, name)
				return nil
			}
		}
		fail := func(context.Context, Order) (Order, error) {
			return Order{}, broker.Fatal(errors.New("nothing to ship"))
		}
		v1, v2 := versions(t, h)
		v1.register(dsl.Flow(v1.name, dsl.Step("a", appendStep(ef, "a")).Compensate(undo("undo-a")),
			dsl.Step("b", appendStep(ef, "b")).Compensate(undo("undo-b")), dsl.Delay(time.Second), dsl.Step("c", fail)))
		w, err := v1.eng.StartWorker(brokertest.Ctx(t))
		require.NoError(t, err)
		id := v1.start(Order{ID: "1"})
		require.Eventually(t, func() bool { return ef.get(id, "b") == 1 }, 10*time.Second, 5*time.Millisecond)
		require.NoError(t, w.Close(brokertest.Ctx(t)))
		v1.waitStatus(id, journal.Waiting, 5*time.Second)

		v2.register(dsl.Flow(v1.name, dsl.Step("a", appendStep(ef, "a")).Compensate(undo("undo-a")),
			dsl.Step("b2", appendStep(ef, "b2")), dsl.Step("c", fail), dsl.Renamed("b", "b2")))
		v2.work()
		v2.waitStatus(id, journal.Unresolved, 15*time.Second)
		require.Equal(t, 1, ef.get(id, "undo-a"), "the compensation before it still ran")
		require.Zero(t, ef.get(id, "undo-b"))
		require.Zero(t, h.Depth(v1.name+".compensate.b"), "nothing sent where no worker reads")
	})
}
