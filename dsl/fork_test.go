package dsl_test

import (
	"context"
	"encoding/json"
	"errors"
	"reflect"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/acemq/acemq-flow/dsl"
)

func joinTwo(_ context.Context, o Order, a Order, s Shipment) (Order, error) { return o, nil }

func items(_ context.Context, o Order) ([]Item, error) { return o.Items, nil }

func pick(_ context.Context, it Item) (int, error) { return it.Qty, nil }

func total(_ context.Context, _ Order, qty []int) (int, error) {
	n := 0
	for _, q := range qty {
		n += q
	}
	return n, nil
}

// A Parallel and a ForEach build into one place of the flow each, with
// their branches' steps and their types: what reaches them and what their
// join returns.
func TestForksBuild(t *testing.T) {
	t.Parallel()
	f := dsl.Flow("f",
		dsl.Step("validate", pass),
		dsl.Parallel("fulfil",
			dsl.Branch(dsl.Step("reserve", pass), dsl.Delay(time.Minute), dsl.Step("hold", pass).Compensate(refund)),
			dsl.Branch(dsl.Step("book", ship)),
		).Join(joinTwo),
		dsl.ForEach("each", items, dsl.Step("pick", pick), total).Concurrency(3))
	require.NoError(t, f.Err())
	steps := f.Steps()
	require.Len(t, steps, 3, "a fork is one place of the flow")
	par := steps[1]
	require.NotNil(t, par.Fork)
	require.False(t, par.Fork.ForEach)
	require.Equal(t, reflect.TypeFor[Order](), par.In)
	require.Equal(t, reflect.TypeFor[Order](), par.Out)
	require.Len(t, par.Fork.Branches, 2)
	require.Equal(t, "hold", par.Fork.Branches[0][1].Name)
	require.Equal(t, time.Minute, par.Fork.Branches[0][1].Delay)
	require.True(t, par.Fork.Branches[0][1].Compensable)
	each := steps[2]
	require.True(t, each.Fork.ForEach)
	require.Equal(t, 3, each.Fork.Concurrency)
	require.Equal(t, reflect.TypeFor[int](), each.Out)

	// The join gets the input and the outputs, decoded by the caller.
	out, err := par.Fork.Join(context.Background(),
		func(v any) error { return json.Unmarshal([]byte(`{"id":"o-1"}`), v) }, 2,
		func(i int, v any) error {
			return json.Unmarshal([]byte([]string{`{"id":"a"}`, `{"carrier":"c"}`}[i]), v)
		})
	require.NoError(t, err)
	require.Equal(t, "o-1", out.(Order).ID)
	its, err := each.Fork.Items(context.Background(),
		func(v any) error {
			return json.Unmarshal([]byte(`{"items":[{"sku":"a","qty":2},{"sku":"b","qty":5}]}`), v)
		}, json.Marshal)
	require.NoError(t, err)
	require.Equal(t, [][]byte{[]byte(`{"sku":"a","qty":2}`), []byte(`{"sku":"b","qty":5}`)}, its)
	sum, err := each.Fork.Join(context.Background(), func(v any) error { return nil }, 2,
		func(i int, v any) error { *(v.(*int)) = []int{2, 5}[i]; return nil })
	require.NoError(t, err)
	require.Equal(t, 7, sum)
	def := dsl.Flow("g", dsl.ForEach("e", items, dsl.Step("pick", pick), total))
	require.Equal(t, dsl.DefaultForEachConcurrency, def.Steps()[0].Fork.Concurrency)
}

// A Child step names its flow, takes what the child takes and returns
// what the child's last step returns.
func TestChildBuilds(t *testing.T) {
	t.Parallel()
	g := dsl.Flow("g", dsl.Step("a", pass), dsl.Step("b", ship))
	f := dsl.Flow("f", dsl.Step("v", pass), dsl.Child[Order, Shipment]("c", g).Compensate(func(context.Context, Shipment) error { return nil }),
		dsl.Step("l", label))
	require.NoError(t, f.Err())
	c := f.Steps()[1]
	require.Equal(t, "g", c.Child.Flow)
	require.True(t, c.Compensable)
	require.Equal(t, reflect.TypeFor[Shipment](), c.Out)
}

// ForEachExpr takes the items by an expression over the payload, checked
// when the flow is built.
func TestForEachExpr(t *testing.T) {
	t.Parallel()
	f := dsl.Flow("f", dsl.ForEachExpr("each", "filter(payload.items, .qty > 1)", dsl.Step("pick", pick), total))
	require.NoError(t, f.Err())
	its, err := f.Steps()[0].Fork.Items(context.Background(),
		func(v any) error {
			return json.Unmarshal([]byte(`{"items":[{"sku":"a","qty":2},{"sku":"b","qty":1},{"sku":"c","qty":3}]}`), v)
		}, json.Marshal)
	require.NoError(t, err)
	require.Equal(t, [][]byte{[]byte(`{"sku":"a","qty":2}`), []byte(`{"sku":"c","qty":3}`)}, its)
	for src, want := range map[string]string{
		"payload.itemz":        `flow "f": step "each": items "payload.itemz": type dsl_test.Order has no field itemz (column 9)`,
		"payload.amount_cents": `gives int, want a list (column 9)`,
	} {
		err := dsl.Flow("f", dsl.ForEachExpr("each", src, dsl.Step("pick", pick), total)).Err()
		require.ErrorIs(t, err, dsl.ErrInvalidFlow)
		require.ErrorContains(t, err, want)
	}
}

// What a fork cannot be is refused when the flow is built, naming it.
func TestForkBuildErrors(t *testing.T) {
	t.Parallel()
	two := func(parts ...dsl.Part) *dsl.ParallelDef {
		return dsl.Parallel("p", dsl.Branch(parts...), dsl.Branch(dsl.Step("book", ship)))
	}
	cases := []struct {
		name string
		flow *dsl.FlowDef
		want string
	}{
		{"one branch", dsl.Flow("f", dsl.Parallel("p", dsl.Branch(dsl.Step("a", pass))).Join(joinTwo)),
			`flow "f": step "p": a Parallel of 1 branches, want at least 2`},
		{"no join", dsl.Flow("f", two(dsl.Step("a", pass))), `flow "f": step "p": a Parallel with no Join`},
		{"join not a func", dsl.Flow("f", two(dsl.Step("a", pass)).Join(42)),
			`flow "f": step "p": Join is a int, want a func(context.Context, In, <one output per branch: 2>) (Out, error)`},
		{"join of the wrong arity", dsl.Flow("f", two(dsl.Step("a", pass)).Join(func(context.Context, Order, Order) (Order, error) { return Order{}, nil })),
			`want a func(context.Context, In, <one output per branch: 2>) (Out, error)`},
		{"join's type does not fit", dsl.Flow("f", two(dsl.Step("a", pass)).Join(func(context.Context, Order, Shipment, Shipment) (Order, error) { return Order{}, nil })),
			`flow "f": step "p": Join takes dsl_test.Shipment for branch 1, whose last step "a" returns dsl_test.Order`},
		{"branch takes another type", dsl.Flow("f", two(dsl.Step("a", label)).Join(func(context.Context, Order, Shipment, Shipment) (Order, error) { return Order{}, nil })),
			`branch 1's first step "a" takes dsl_test.Shipment, but the Parallel is given dsl_test.Order`},
		{"type chain in a branch", dsl.Flow("f", two(dsl.Step("a", ship), dsl.Step("b", pass)).Join(joinTwo)),
			`flow "f": step "b": takes dsl_test.Order, but step "a" before it returns dsl_test.Shipment`},
		{"names unique across branches", dsl.Flow("f", two(dsl.Step("book", pass)).Join(joinTwo)), `flow "f": step "book": named twice`},
		{"a branch named like the fork", dsl.Flow("f", two(dsl.Step("p", pass)).Join(joinTwo)), `flow "f": step "p": named twice`},
		{"nested", dsl.Flow("f", two(two(dsl.Step("a", pass)).Join(joinTwo)).Join(joinTwo)),
			`flow "f": step "p": branch 1: a Parallel or ForEach inside a branch: branches do not nest`},
		{"empty branch", dsl.Flow("f", two().Join(joinTwo)), `flow "f": step "p": branch 1: no steps`},
		{"delay at a branch's end", dsl.Flow("f", two(dsl.Step("a", pass), dsl.Delay(time.Minute)).Join(joinTwo)),
			`branch 1: a delay with nothing after it`},
		{"When after External in a branch", dsl.Flow("f", dsl.Step("v", pass), dsl.Parallel("p",
			dsl.Branch(dsl.External("ext"), dsl.Step("a", pass).When("payload.digital")),
			dsl.Branch(dsl.Step("book", ship))).Join(func(context.Context, Order, Order, Shipment) (Order, error) { return Order{}, nil })),
			`flow "f": step "a": a When or a delay after External step "ext"`},
		{"with an Itinerary", dsl.Flow("f", dsl.Step("a", pass), dsl.ForEach("e", items, dsl.Step("pick", pick), total),
			dsl.Itinerary(func(context.Context, Order) ([]string, error) { return nil, nil })),
			`a Parallel or ForEach in a flow with an Itinerary`},
		{"ForEach without a step", dsl.Flow("f", dsl.ForEach[Order, Item, int, int]("e", items, nil, total)), `flow "f": step "e": ForEach with no step`},
		{"ForEach concurrency 0", dsl.Flow("f", dsl.ForEach("e", items, dsl.Step("pick", pick), total).Concurrency(0)),
			`flow "f": step "e": concurrency 0, want at least 1`},
		{"ForEach's step broken", dsl.Flow("f", dsl.ForEach("e", items, dsl.Step("pick", pick).Concurrency(0), total)),
			`flow "f": step "e": its step "pick": concurrency 0, want at least 1`},
		{"Child of nil", dsl.Flow("f", dsl.Child[Order, Order]("c", nil)), `flow "f": step "c": Child of a nil flow`},
		{"Child of a broken flow", dsl.Flow("f", dsl.Child[Order, Order]("c", dsl.Flow("g"))), `flow "f": step "c": its child flow: flow "g": no steps`},
		{"Child that takes another type", dsl.Flow("f", dsl.Child[Shipment, Order]("c", dsl.Flow("g", dsl.Step("a", pass)))),
			`flow "f": step "c": takes dsl_test.Shipment, but child flow "g" takes dsl_test.Order`},
		{"Child that returns another type", dsl.Flow("f", dsl.Child[Order, Order]("c", dsl.Flow("g", dsl.Step("a", ship)))),
			`flow "f": step "c": returns dsl_test.Order, but child flow "g"'s last step returns dsl_test.Shipment`},
		{"ForEach's join returns what the next step does not take", dsl.Flow("f", dsl.ForEach("e", items, dsl.Step("pick", pick), total), dsl.Step("a", pass)),
			`flow "f": step "a": takes dsl_test.Order, but step "e" before it returns int`},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			err := tc.flow.Err()
			require.Error(t, err)
			require.True(t, errors.Is(err, dsl.ErrInvalidFlow), "%v", err)
			require.Contains(t, err.Error(), tc.want)
		})
	}
}

// Transactional on a Parallel or a ForEach runs its join in the
// transaction that records it fired; the branches' steps keep their own.
func TestForkJoinsTransactional(t *testing.T) {
	t.Parallel()
	f := dsl.Flow("f",
		dsl.Parallel("fulfil", dsl.Branch(dsl.Step("reserve", pass)), dsl.Branch(dsl.Step("book", ship))).Join(joinTwo).Transactional(),
		dsl.ForEach("each", items, dsl.Step("pick", pick).Transactional(), total).Transactional())
	require.NoError(t, f.Err())
	g := dsl.Flow("g", dsl.ForEach("plain", items, dsl.Step("pack", pick), total))
	require.NoError(t, g.Err())
	steps := f.Steps()
	require.True(t, steps[0].Transactional)
	require.False(t, steps[0].Fork.Branches[0][0].Transactional)
	require.True(t, steps[1].Transactional)
	require.True(t, steps[1].Fork.Branches[0][0].Transactional)
	require.False(t, g.Steps()[0].Transactional)
}
