package engine_test

import (
	"context"
	"errors"
	"fmt"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/acemq/acemq-flow/broker"
	"github.com/acemq/acemq-flow/dsl"
	"github.com/acemq/acemq-flow/engine/journal"
	"github.com/acemq/acemq-flow/internal/brokertest"
)

// TestForksOnPostgreSQLAcrossTwoWorkers: two workers in two engines share
// a PostgreSQL journal and idempotency store; runs with a Parallel and a
// ForEach of 200 items (25 in flight) complete, every branch step and
// item ran once, each join fired once, and a run whose branch is given up
// is compensated across both workers.
func TestForksOnPostgreSQLAcrossTwoWorkers(t *testing.T) {
	brokertest.OnRabbit(t, func(t *testing.T, h *brokertest.Harness) {
		cfg := onPostgres(t)
		ef := newEffects()
		step := func(name string) func(context.Context, Order) (Order, error) {
			return func(ctx context.Context, o Order) (Order, error) {
				m, _ := broker.Handling(ctx)
				ef.add(m.RunID, name)
				if o.ID == "fail" && name == "book" {
					return o, broker.Fatal(errors.New("no courier"))
				}
				o.Trail = append(o.Trail, name)
				return o, nil
			}
		}
		undo := func(name string) func(context.Context, Order) error {
			return func(ctx context.Context, o Order) error {
				m, _ := broker.Handling(ctx)
				ef.add(m.RunID, "undo-"+name)
				return nil
			}
		}
		flow := func(name string) *dsl.FlowDef {
			return dsl.Flow(name,
				dsl.Step("charge", step("charge")).Compensate(undo("charge")),
				dsl.Parallel("fulfil",
					dsl.Branch(dsl.Step("reserve", step("reserve")).Compensate(undo("reserve"))),
					dsl.Branch(dsl.Step("book", step("book"))),
				).Join(func(ctx context.Context, o Order, a, b Order) (Order, error) {
					m, _ := broker.Handling(ctx)
					ef.add(m.RunID, "join-fulfil")
					o.Amount = 200
					return o, nil
				}),
				dsl.ForEach("lines",
					func(_ context.Context, o Order) ([]int, error) {
						items := make([]int, o.Amount)
						for i := range items {
							items[i] = i
						}
						return items, nil
					},
					dsl.Step("line", func(ctx context.Context, i int) (int, error) {
						m, _ := broker.Handling(ctx)
						ef.add(m.RunID, fmt.Sprint("line-", i))
						return i, nil
					}),
					func(ctx context.Context, o Order, outs []int) (Order, error) {
						m, _ := broker.Handling(ctx)
						ef.add(m.RunID, "join-lines")
						sum := 0
						for _, v := range outs {
							sum += v
						}
						o.Amount = sum
						return o, nil
					}).Concurrency(25))
		}
		a := newFixture(t, h, cfg)
		a.register(flow(a.name))
		b := newFixture(t, h, cfg)
		require.NoError(t, b.eng.Register(flow(a.name)))
		a.work()
		b.work()
		ok := a.start(Order{ID: "ok"})
		failed := a.start(Order{ID: "fail"})
		a.waitStatus(ok, journal.Completed, 60*time.Second)
		for _, s := range []string{"charge", "reserve", "book", "join-fulfil", "join-lines"} {
			require.Equal(t, 1, ef.get(ok, s), s)
		}
		for i := range 200 {
			require.Equal(t, 1, ef.get(ok, fmt.Sprint("line-", i)), "line %d", i)
		}
		st, err := cfg.Journal.(journal.JoinStore).JoinStatus(context.Background(), ok, "0/2/lines")
		require.NoError(t, err)
		require.Equal(t, journal.JoinStatus{Join: st.Join, Dispatched: 200, Arrived: 200}, st)
		require.Equal(t, 25, st.Limit)

		r := a.waitStatus(failed, journal.Compensated, 30*time.Second)
		require.Contains(t, r.Error, "no courier")
		require.Equal(t, 1, ef.get(failed, "undo-charge"))
		require.Equal(t, ef.get(failed, "reserve"), ef.get(failed, "undo-reserve"))
		require.Zero(t, ef.get(failed, "join-fulfil"))
	})
}
