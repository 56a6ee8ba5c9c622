package engine_test

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"slices"
	"sync"
	"testing"
	"time"

	amqp "github.com/rabbitmq/amqp091-go"
	"github.com/stretchr/testify/require"

	"github.com/acemq/acemq-flow/broker"
	"github.com/acemq/acemq-flow/dsl"
	"github.com/acemq/acemq-flow/engine"
	"github.com/acemq/acemq-flow/engine/journal"
	"github.com/acemq/acemq-flow/internal/brokertest"
	"github.com/acemq/acemq-flow/patterns"
)

// Reservation and Booking are what the parallel branches of the test flow
// return.
type (
	Reservation struct{ Items int }
	Booking     struct{ Courier string }
	Shipped     struct {
		Order   Order
		Items   int
		Courier string
	}
)

// TestParallelJoinsOnce: two branches (one of two steps) run side by side
// on the payload that reached them; the join gets the input and both
// outputs in branch order, fires once, and the run goes on to the step
// after it and completes. The timeline shows the fork, both branches'
// steps, the arrivals and the join.
func TestParallelJoinsOnce(t *testing.T) {
	brokertest.Each(t, func(t *testing.T, h *brokertest.Harness) {
		fx := newFixture(t, h, engine.Config{})
		ef := newEffects()
		var got Shipped
		done := make(chan struct{})
		fx.register(dsl.Flow(fx.name,
			dsl.Step("validate", appendStep(ef, "validate")),
			dsl.Parallel("fulfil",
				dsl.Branch(
					dsl.Step("pick", appendStep(ef, "pick")),
					dsl.Step("reserve", func(ctx context.Context, o Order) (Reservation, error) {
						m, _ := broker.Handling(ctx)
						ef.add(m.RunID, "reserve")
						return Reservation{Items: len(o.Trail)}, nil
					})),
				dsl.Branch(dsl.Step("book", func(ctx context.Context, o Order) (Booking, error) {
					m, _ := broker.Handling(ctx)
					ef.add(m.RunID, "book")
					return Booking{Courier: "c-" + o.ID}, nil
				})),
			).Join(func(ctx context.Context, o Order, r Reservation, b Booking) (Shipped, error) {
				m, _ := broker.Handling(ctx)
				ef.add(m.RunID, "join")
				return Shipped{Order: o, Items: r.Items, Courier: b.Courier}, nil
			}),
			dsl.Step("notify", func(ctx context.Context, s Shipped) (Shipped, error) {
				got = s
				close(done)
				return s, nil
			})))
		fx.work()
		run := fx.start(Order{ID: "o-1", Amount: 7})
		brokertest.Next(t, done, 10*time.Second)
		fx.waitStatus(run, journal.Completed, 10*time.Second)
		require.Equal(t, "o-1", got.Order.ID)
		require.Equal(t, []string{"validate"}, got.Order.Trail, "the join got the payload that reached the fork")
		require.Equal(t, 2, got.Items, "the reserve branch got pick's output (validate, pick)")
		require.Equal(t, "c-o-1", got.Courier)
		for _, step := range []string{"validate", "pick", "reserve", "book", "join"} {
			require.Equal(t, 1, ef.get(run, step), step)
		}
		// A branch's step records its events as its consumer settles it,
		// which may be after the join it led to went on.
		var out []string
		require.Eventually(t, func() bool { out = fx.outcomes(run); return len(out) >= 10 }, 10*time.Second, 10*time.Millisecond)
		require.Len(t, out, 10, "%v", out)
		require.Equal(t, "start::started", out[0])
		require.Equal(t, "step:validate:completed", out[1])
		require.Equal(t, "step:fulfil:forked: 2 branches", out[2])
		require.ElementsMatch(t, []string{"step:pick:completed", "step:reserve:completed", "step:book:completed",
			"step:fulfil:branch 0 arrived", "step:fulfil:branch 1 arrived"}, out[3:8])
		require.Equal(t, []string{"step:fulfil:completed", "step:notify:completed"}, out[8:])
	})
}

// TestForEachHandsOutItemsAndReduces: a ForEach over 50 items with at
// most 4 in flight runs its step once per item and gives the join every
// output in item order; an empty list joins at once.
func TestForEachHandsOutItemsAndReduces(t *testing.T) {
	brokertest.Each(t, func(t *testing.T, h *brokertest.Harness) {
		fx := newFixture(t, h, engine.Config{})
		ef := newEffects()
		type Batch struct{ N int }
		var (
			inFlight, most int
			mu             = make(chan struct{}, 1)
		)
		results := make(chan []int, 2)
		fx.register(dsl.Flow(fx.name,
			dsl.ForEach("each",
				func(_ context.Context, b Batch) ([]int, error) {
					items := make([]int, b.N)
					for i := range items {
						items[i] = i
					}
					return items, nil
				},
				dsl.Step("square", func(ctx context.Context, i int) (int, error) {
					mu <- struct{}{}
					inFlight++
					most = max(most, inFlight)
					<-mu
					m, _ := broker.Handling(ctx)
					ef.add(m.RunID, fmt.Sprint("square-", i))
					mu <- struct{}{}
					inFlight--
					<-mu
					return i * i, nil
				}),
				func(_ context.Context, b Batch, outs []int) ([]int, error) {
					results <- outs
					return outs, nil
				}).Concurrency(4)))
		fx.work()
		run := fx.start(Batch{N: 50})
		var outs []int
		select {
		case outs = <-results:
		case <-time.After(20 * time.Second):
			t.Fatalf("no join; timeline %v", fx.outcomes(run))
		}
		require.Len(t, outs, 50)
		for i, v := range outs {
			require.Equal(t, i*i, v, "item %d", i)
			require.Equal(t, 1, ef.get(run, fmt.Sprint("square-", i)), "item %d ran once", i)
		}
		fx.waitStatus(run, journal.Completed, 10*time.Second)
		require.LessOrEqual(t, most, 4, "at most 4 items in flight")

		empty := fx.start(Batch{N: 0})
		select {
		case outs = <-results:
		case <-time.After(10 * time.Second):
			t.Fatalf("no join of the empty list; timeline %v", fx.outcomes(empty))
		}
		require.Empty(t, outs)
		fx.waitStatus(empty, journal.Completed, 10*time.Second)
	})
}

// TestBranchGivenUpCompensatesEverything: a branch whose step is given up
// (after the other branch's step completed) fails the run; the other
// branch's completed step, and the step before the fork, are compensated
// once each, and the join never fires.
func TestBranchGivenUpCompensatesEverything(t *testing.T) {
	brokertest.Each(t, func(t *testing.T, h *brokertest.Harness) {
		fx := newFixture(t, h, engine.Config{})
		ef := newEffects()
		undo := func(name string) func(context.Context, Order) error {
			return func(ctx context.Context, o Order) error {
				m, _ := broker.Handling(ctx)
				ef.add(m.RunID, "undo-"+name)
				return nil
			}
		}
		reserved := make(chan struct{})
		var once sync.Once
		fx.register(dsl.Flow(fx.name,
			dsl.Step("charge", appendStep(ef, "charge")).Compensate(undo("charge")),
			dsl.Parallel("fulfil",
				dsl.Branch(dsl.Step("reserve", func(ctx context.Context, o Order) (Order, error) {
					defer once.Do(func() { close(reserved) })
					return appendStep(ef, "reserve")(ctx, o)
				}).Compensate(undo("reserve"))),
				dsl.Branch(dsl.Step("book", func(ctx context.Context, o Order) (Order, error) {
					// Given up once the other branch has completed its step.
					<-reserved
					return o, broker.Fatal(errors.New("no courier"))
				})),
			).Join(func(ctx context.Context, o Order, a, b Order) (Order, error) {
				m, _ := broker.Handling(ctx)
				ef.add(m.RunID, "join")
				return o, nil
			})))
		fx.work()
		run := fx.start(Order{ID: "o-3"})
		fx.waitStatus(run, journal.Compensated, 15*time.Second)
		require.Equal(t, 1, ef.get(run, "undo-charge"))
		require.Equal(t, 1, ef.get(run, "undo-reserve"))
		require.Zero(t, ef.get(run, "join"), "the join never fired")
	})
}

// forgetfulJoins is a Memory journal whose Settle fails after it has
// settled, once per branch: a worker that committed an arrival and lost
// its connection (or died) before acknowledging it. The redelivery must
// make the same decision.
type forgetfulJoins struct {
	*journal.Memory
	mu   sync.Mutex
	seen map[string]bool
}

func (f *forgetfulJoins) Settle(ctx context.Context, runID, key string, branch int, s journal.Settled) (journal.Decision, error) {
	d, err := f.Memory.Settle(ctx, runID, key, branch, s)
	if err != nil {
		return d, err
	}
	f.mu.Lock()
	defer f.mu.Unlock()
	k := fmt.Sprint(runID, key, branch)
	if !f.seen[k] {
		f.seen[k] = true
		return journal.Decision{}, errors.New("connection lost after the commit")
	}
	return d, nil
}

// TestJoinFiresOnceAcrossWorkersAndRedeliveries: two workers share the
// journal and the idempotency store; every arrival of a ForEach of 60
// items (10 in flight) is delivered again after it settled. Each item runs
// once, every item is handed out once, and the join fires exactly once.
func TestJoinFiresOnceAcrossWorkersAndRedeliveries(t *testing.T) {
	brokertest.Each(t, func(t *testing.T, h *brokertest.Harness) {
		mem, err := journal.NewMemory(0)
		require.NoError(t, err)
		j := &forgetfulJoins{Memory: mem, seen: map[string]bool{}}
		store, err := patterns.NewInMemoryIdempotencyStore(time.Hour)
		require.NoError(t, err)
		retry := broker.Constant(20, 0)
		cfg := engine.Config{Journal: j, Store: store, Retry: &retry}
		ef := newEffects()
		joined := make(chan []int, 4)
		flow := func(name string) *dsl.FlowDef {
			return dsl.Flow(name,
				dsl.ForEach("each",
					func(_ context.Context, n int) ([]int, error) {
						items := make([]int, n)
						for i := range items {
							items[i] = i
						}
						return items, nil
					},
					dsl.Step("item", func(ctx context.Context, i int) (int, error) {
						m, _ := broker.Handling(ctx)
						ef.add(m.RunID, fmt.Sprint("item-", i))
						return i + 1, nil
					}),
					func(ctx context.Context, _ int, outs []int) (int, error) {
						m, _ := broker.Handling(ctx)
						ef.add(m.RunID, "join")
						joined <- outs
						return len(outs), nil
					}).Concurrency(10))
		}
		a := newFixture(t, h, cfg)
		a.register(flow(a.name))
		b := newFixture(t, h, cfg)
		b.name = a.name
		require.NoError(t, b.eng.Register(flow(a.name)))
		a.work()
		b.work()
		run := a.start(60)
		var outs []int
		select {
		case outs = <-joined:
		case <-time.After(30 * time.Second):
			t.Fatalf("no join; timeline %v", a.outcomes(run))
		}
		require.Len(t, outs, 60)
		for i, v := range outs {
			require.Equal(t, i+1, v)
		}
		a.waitStatus(run, journal.Completed, 10*time.Second)
		brokertest.Nothing(t, joined, 500*time.Millisecond)
		require.Equal(t, 1, ef.get(run, "join"), "the join fired once")
		for i := range 60 {
			require.Equal(t, 1, ef.get(run, fmt.Sprint("item-", i)), "item %d ran once", i)
		}
		st, err := mem.JoinStatus(context.Background(), run, "0/0/each")
		require.NoError(t, err)
		require.Equal(t, 60, st.Dispatched)
		require.Equal(t, 60, st.Arrived)
	})
}

// TestOtherBranchesStopAtTheirNextStep: once a branch is given up, a
// branch still running stops at its next step: that step never runs, and
// what the branch completed is undone.
func TestOtherBranchesStopAtTheirNextStep(t *testing.T) {
	brokertest.Each(t, func(t *testing.T, h *brokertest.Harness) {
		fx := newFixture(t, h, engine.Config{})
		ef := newEffects()
		started := make(chan struct{})
		var once sync.Once
		fx.register(dsl.Flow(fx.name,
			dsl.Parallel("fulfil",
				dsl.Branch(
					dsl.Step("first", func(ctx context.Context, o Order) (Order, error) {
						m, _ := broker.Handling(ctx)
						ef.add(m.RunID, "first")
						once.Do(func() { close(started) })
						// Done only once the other branch has failed the join.
						for {
							st, err := fx.journal.JoinStatus(ctx, m.RunID, "0/0/fulfil")
							if err == nil && st.Failed {
								return o, nil
							}
							select {
							case <-ctx.Done():
								return o, ctx.Err()
							case <-time.After(5 * time.Millisecond):
							}
						}
					}).Compensate(func(ctx context.Context, o Order) error {
						m, _ := broker.Handling(ctx)
						ef.add(m.RunID, "undo-first")
						return nil
					}),
					dsl.Step("second", appendStep(ef, "second"))),
				dsl.Branch(dsl.Step("fails", func(ctx context.Context, o Order) (Order, error) {
					<-started
					return o, broker.Fatal(errors.New("out of stock"))
				})),
			).Join(func(ctx context.Context, o Order, a, b Order) (Order, error) { return o, nil })))
		fx.work()
		run := fx.start(Order{ID: "o-4"})
		fx.waitStatus(run, journal.Compensated, 15*time.Second)
		require.Equal(t, 1, ef.get(run, "first"))
		require.Equal(t, 1, ef.get(run, "undo-first"), "what the stopped branch completed was undone")
		require.Zero(t, ef.get(run, "second"), "the stopped branch's next step never ran")
		require.Contains(t, fx.outcomes(run), "step:second:stopped: another branch was given up")
	})
}

// TestEndInABranchFailsTheRun: a branch step that returns dsl.End cannot
// end its run (the other branch and the join would wait for ever): the
// branch is given up with ErrEndInBranch, the run fails and what it
// completed is compensated; a replay of a run that failed on a branch is
// refused, saying why.
func TestEndInABranchFailsTheRun(t *testing.T) {
	brokertest.Each(t, func(t *testing.T, h *brokertest.Harness) {
		fx := newFixture(t, h, engine.Config{})
		ef := newEffects()
		fx.register(dsl.Flow(fx.name,
			dsl.Step("charge", appendStep(ef, "charge")).Compensate(func(ctx context.Context, o Order) error {
				m, _ := broker.Handling(ctx)
				ef.add(m.RunID, "undo-charge")
				return nil
			}),
			dsl.Parallel("fulfil",
				dsl.Branch(dsl.Step("stop", func(context.Context, Order) (Order, error) { return Order{}, dsl.End })),
				dsl.Branch(dsl.Step("book", appendStep(ef, "book"))),
			).Join(func(ctx context.Context, o Order, a, b Order) (Order, error) {
				m, _ := broker.Handling(ctx)
				ef.add(m.RunID, "join")
				return o, nil
			})))
		fx.work()
		run := fx.start(Order{ID: "o-5"})
		r := fx.waitStatus(run, journal.Compensated, 15*time.Second)
		require.Contains(t, r.Error, engine.ErrEndInBranch.Error())
		require.Equal(t, 1, ef.get(run, "undo-charge"))
		require.Zero(t, ef.get(run, "join"))

		// A failed branch with nothing to undo stays failed, its message
		// in the step's dead-letter queue; replaying it is refused.
		lone := fx.name + "-lone"
		fx2 := newFixture(t, h, engine.Config{})
		fx2.name = lone
		fx2.register(dsl.Flow(lone,
			dsl.Parallel("fulfil",
				dsl.Branch(dsl.Step("fails", func(context.Context, Order) (Order, error) { return Order{}, broker.Fatal(errors.New("no")) })),
				dsl.Branch(dsl.Step("book", appendStep(ef, "book"))),
			).Join(func(ctx context.Context, o Order, a, b Order) (Order, error) { return o, nil })))
		fx2.work()
		failed := fx2.start(Order{ID: "o-6"})
		fx2.waitStatus(failed, journal.Failed, 15*time.Second)
		_, err := fx2.eng.Replay(brokertest.Ctx(t), failed)
		require.ErrorIs(t, err, engine.ErrNotReplayable)
		require.ErrorContains(t, err, `on a branch of "fulfil"`)
	})
}

// TestReplayOfAJoinGivenUpRunsItAgain: a join given up (nothing to
// compensate) leaves its run failed with the last arrival in the fork's
// dead-letter queue; a replay runs the join again, once, and the run
// completes without running any branch again.
func TestReplayOfAJoinGivenUpRunsItAgain(t *testing.T) {
	brokertest.Each(t, func(t *testing.T, h *brokertest.Harness) {
		fx := newFixture(t, h, engine.Config{})
		ef := newEffects()
		fx.register(dsl.Flow(fx.name,
			dsl.Parallel("fulfil",
				dsl.Branch(dsl.Step("reserve", appendStep(ef, "reserve"))),
				dsl.Branch(dsl.Step("book", appendStep(ef, "book"))),
			).Join(func(ctx context.Context, o Order, a, b Order) (Order, error) {
				m, _ := broker.Handling(ctx)
				if ef.add(m.RunID, "join") == 1 {
					return o, broker.Fatal(errors.New("warehouse offline"))
				}
				return o, nil
			}),
			dsl.Step("confirm", appendStep(ef, "confirm"))))
		fx.work()
		run := fx.start(Order{ID: "o-7"})
		r := fx.waitStatus(run, journal.Failed, 15*time.Second)
		require.Contains(t, r.Error, "warehouse offline")
		require.Equal(t, "fulfil", r.Step)
		moved, err := fx.eng.Replay(brokertest.Ctx(t), run)
		require.NoError(t, err)
		require.Equal(t, fx.name+".fulfil.dlq", moved.From)
		fx.waitStatus(run, journal.Completed, 15*time.Second)
		require.Equal(t, 2, ef.get(run, "join"), "the join ran again, once")
		require.Equal(t, 1, ef.get(run, "reserve"))
		require.Equal(t, 1, ef.get(run, "book"))
		require.Equal(t, 1, ef.get(run, "confirm"))
	})
}

// TestExternalStepOnABranch: a branch step another service serves, here a
// plain amqp091-go consumer that follows x-acemq-route and carries the
// application headers on as any AceMQ follower does: the branch comes back
// to its fork, and the join gets what the service returned.
func TestExternalStepOnABranch(t *testing.T) {
	brokertest.OnRabbit(t, func(t *testing.T, h *brokertest.Harness) {
		fx := newFixture(t, h, engine.Config{})
		done := make(chan Order, 1)
		fx.register(dsl.Flow(fx.name,
			dsl.Step("charge", same),
			dsl.Parallel("fulfil",
				dsl.Branch(dsl.Step("pick", same), dsl.External("invoice")),
				dsl.Branch(dsl.Step("book", same)),
			).Join(func(_ context.Context, o Order, invoiced json.RawMessage, _ Order) (Order, error) {
				var inv Order
				if err := json.Unmarshal(invoiced, &inv); err != nil {
					return o, err
				}
				o.ID = inv.ID
				return o, nil
			}),
			dsl.Step("archive", func(_ context.Context, o Order) (Order, error) { done <- o; return o, nil })))
		fx.work()
		ch := h.Plain()
		deliveries, err := ch.Consume(fx.name+".invoice", "", false, false, false, false, nil)
		require.NoError(t, err)
		served := make(chan amqp.Table, 1)
		go func() {
			d, ok := <-deliveries
			if !ok {
				return
			}
			var o map[string]any
			_ = json.Unmarshal(d.Body, &o)
			o["id"] = o["id"].(string) + "/INV-9"
			body, _ := json.Marshal(o)
			headers := d.Headers
			route := headers["x-acemq-route"].([]any)
			pos := headers["x-acemq-route-position"].(int64)
			headers["x-acemq-route-position"] = pos + 1
			_ = ch.Publish(fx.name, route[pos+1].(string), true, false, amqpPublishing(d.MessageId, d.CorrelationId, body, headers))
			_ = d.Ack(false)
			served <- d.Headers
		}()
		run := fx.start(Order{ID: "o-9"})
		got := brokertest.Next(t, done, 15*time.Second)
		require.Equal(t, "o-9/INV-9", got.ID)
		headers := brokertest.Next(t, served, time.Second)
		require.Equal(t, []any{"pick", "invoice", "fulfil"}, headers["x-acemq-route"], "the branch's route ends at its fork")
		require.Contains(t, headers, engine.HeaderBranch)
		fx.waitStatus(run, journal.Completed, 10*time.Second)
	})
}

// TestHeldBranchIsReplayedOnItsOwn: in a flow with HoldForReplay, a branch
// given up holds the run for a replay while the other branch goes on and
// comes back; a replay runs only the failed branch's step again, and the
// join fires once. Without a replay, the hold's end undoes the branch,
// fails the join and compensates what every branch and the steps before
// the fork did.
func TestHeldBranchIsReplayedOnItsOwn(t *testing.T) {
	brokertest.Each(t, func(t *testing.T, h *brokertest.Harness) {
		fx := newFixture(t, h, engine.Config{})
		ef := newEffects()
		undo := func(name string) func(context.Context, Order) error {
			return func(ctx context.Context, o Order) error {
				m, _ := broker.Handling(ctx)
				ef.add(m.RunID, "undo-"+name)
				return nil
			}
		}
		fx.register(dsl.Flow(fx.name,
			dsl.Step("charge", appendStep(ef, "charge")).Compensate(undo("charge")),
			dsl.Parallel("fulfil",
				dsl.Branch(dsl.Step("reserve", appendStep(ef, "reserve")).Compensate(undo("reserve"))),
				dsl.Branch(dsl.Step("book", func(ctx context.Context, o Order) (Order, error) {
					m, _ := broker.Handling(ctx)
					if ef.add(m.RunID, "book") == 1 {
						return o, broker.Fatal(errors.New("depot closed"))
					}
					return o, nil
				})),
			).Join(func(ctx context.Context, o Order, a, b Order) (Order, error) {
				m, _ := broker.Handling(ctx)
				ef.add(m.RunID, "join")
				return o, nil
			}),
			dsl.HoldForReplay(2*time.Second)))
		fx.work()

		run := fx.start(Order{ID: "o-8"})
		r := fx.waitStatus(run, journal.Failed, 15*time.Second)
		require.Contains(t, r.Error, "depot closed")
		require.Eventually(t, func() bool { return slices.Contains(fx.outcomes(run), "step:fulfil:branch 0 arrived") },
			10*time.Second, 10*time.Millisecond, "the other branch went on and came back")
		moved, err := fx.eng.Replay(brokertest.Ctx(t), run)
		require.NoError(t, err)
		require.Equal(t, fx.name+".book.dlq", moved.From)
		fx.waitStatus(run, journal.Completed, 15*time.Second)
		require.Equal(t, 2, ef.get(run, "book"), "the failed branch ran again")
		require.Equal(t, 1, ef.get(run, "reserve"), "the other did not")
		require.Equal(t, 1, ef.get(run, "charge"))
		require.Equal(t, 1, ef.get(run, "join"))
		require.Eventually(t, func() bool {
			return slices.Contains(fx.outcomes(run), "step:fulfil:hold ended: not needed, the run was replayed or cancelled meanwhile")
		}, 10*time.Second, 20*time.Millisecond, "the hold's timer was dropped")
		require.Zero(t, ef.get(run, "undo-reserve"))

		held := fx.start(Order{ID: "o-9"})
		r = fx.waitStatus(held, journal.Compensated, 20*time.Second)
		require.Contains(t, r.Error, "depot closed")
		require.Equal(t, 1, ef.get(held, "undo-reserve"))
		require.Equal(t, 1, ef.get(held, "undo-charge"))
		require.Zero(t, ef.get(held, "join"))
		require.Eventually(t, func() bool { return h.Depth(fx.name+".book"+broker.DeadLetterSuffix) == 0 },
			10*time.Second, 20*time.Millisecond, "the held message left the dead-letter queue (the worker's tidier takes it out)")

		// Compensated on request instead, while held: the same undoing.
		asked := fx.start(Order{ID: "o-10"})
		fx.waitStatus(asked, journal.Failed, 15*time.Second)
		require.Eventually(t, func() bool { return slices.Contains(fx.outcomes(asked), "step:fulfil:branch 0 arrived") },
			10*time.Second, 10*time.Millisecond)
		moved, err = fx.eng.Compensate(brokertest.Ctx(t), asked)
		require.NoError(t, err)
		require.Equal(t, fx.name+".book.dlq", moved.From)
		fx.waitStatus(asked, journal.Compensated, 15*time.Second)
		require.Equal(t, 1, ef.get(asked, "undo-reserve"))
		require.Equal(t, 1, ef.get(asked, "undo-charge"))
	})
}

// TestDelayAfterAJoin: a delay before the step after a fork holds the run
// after the join, and the run completes once the step has run: the
// waiting the join recorded does not outrank what follows.
func TestDelayAfterAJoin(t *testing.T) {
	brokertest.Each(t, func(t *testing.T, h *brokertest.Harness) {
		fx := newFixture(t, h, engine.Config{})
		ef := newEffects()
		fx.register(dsl.Flow(fx.name,
			dsl.Parallel("fulfil",
				dsl.Branch(dsl.Step("reserve", appendStep(ef, "reserve"))),
				dsl.Branch(dsl.Step("book", appendStep(ef, "book"))),
			).Join(func(ctx context.Context, o Order, a, b Order) (Order, error) { return o, nil }),
			dsl.Delay(time.Second),
			dsl.Step("ship", appendStep(ef, "ship"))))
		fx.work()
		run := fx.start(Order{ID: "o-10"})
		fx.waitStatus(run, journal.Completed, 15*time.Second)
		require.Equal(t, 1, ef.get(run, "ship"))
		out := fx.outcomes(run)
		require.Equal(t, []string{"step:fulfil:completed", "delay:ship:waiting", "step:ship:completed"}, out[len(out)-3:])
	})
}
