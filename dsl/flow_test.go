package dsl_test

import (
	"context"
	"encoding/json"
	"errors"
	"reflect"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/acemq/acemq-flow/broker"
	"github.com/acemq/acemq-flow/dsl"
)

type Order struct {
	ID      string    `json:"id"`
	Digital bool      `json:"digital"`
	Amount  int       `json:"amount_cents"`
	ShipAt  time.Time `json:"ship_at"`
	Items   []Item    `json:"items,omitempty"`
	Address *Address  `json:"address,omitempty"`
	secret  string
}

type Item struct {
	SKU string `json:"sku"`
	Qty int    `json:"qty"`
}

type Address struct {
	Country string `json:"country"`
}

type Shipment struct {
	Carrier string `json:"carrier"`
}

func pass(_ context.Context, o Order) (Order, error)            { return o, nil }
func refund(context.Context, Order) error                       { return nil }
func ship(_ context.Context, _ Order) (Shipment, error)         { return Shipment{}, nil }
func label(_ context.Context, s Shipment) (Shipment, error)     { return s, nil }
func anyStep(_ context.Context, v json.RawMessage) (any, error) { return v, nil }

func TestFlowBuilds(t *testing.T) {
	t.Parallel()
	f := dsl.Flow("place-order",
		dsl.Step("validate", pass),
		dsl.Step("charge", pass).Compensate(refund).Retry(broker.Exponential(5, time.Second)).Timeout(time.Minute),
		dsl.Delay(30*time.Minute),
		dsl.Step("reserve", pass).When(`payload.digital == false && len(payload.items) > 0`),
		dsl.DelayUntil(`payload.ship_at`),
		dsl.Step("ship", ship).OrderedBy(`payload.address.country`).Concurrency(4).Prefetch(10),
		dsl.External("invoice"),
		dsl.Step("archive", anyStep),
		dsl.Example(Order{ID: "o-1"}),
		dsl.HoldForReplay(10*time.Minute),
	)
	require.NoError(t, f.Err())
	require.Equal(t, "place-order", f.Name())
	require.Equal(t, reflect.TypeFor[Order](), f.Input())
	ex, ok := f.Example()
	require.True(t, ok)
	require.Equal(t, Order{ID: "o-1"}, ex)
	require.Equal(t, 10*time.Minute, f.HoldForReplay())
	require.Equal(t, "application/json", f.Codec().ContentType())
	steps := f.Steps()
	require.Len(t, steps, 6)
	require.True(t, steps[1].Compensable)
	require.Equal(t, "5 attempts, 1s doubling up to 5m0s", steps[1].Retry.String())
	require.Equal(t, 30*time.Minute, steps[2].Delay, "the delay holds the hop into the step after it")
	require.NotNil(t, steps[2].When)
	require.NotNil(t, steps[3].DelayUntil)
	require.NotNil(t, steps[3].OrderKey)
	require.True(t, steps[4].External)

	route, err := f.Route(context.Background(), nil)
	require.NoError(t, err)
	require.Equal(t, []string{"validate", "charge", "reserve", "ship", "invoice", "archive"}, route)
}

// TestBuildErrors: every mistake is a build error naming the flow and the
// step, matching ErrInvalidFlow.
func TestBuildErrors(t *testing.T) {
	t.Parallel()
	cases := []struct {
		name string
		flow *dsl.FlowDef
		want string
	}{
		{"empty flow", dsl.Flow("f"), `flow "f": no steps`},
		{"bad flow name", dsl.Flow("a b", dsl.Step("s", pass)), `flow "a b": the name "a b" is not letters, digits, '.', '-' and '_' (at most 100)`},
		{"bad step name", dsl.Flow("f", dsl.Step("s.1", pass)), `flow "f": step "s.1": the name is not letters, digits, '-' and '_' (at most 64)`},
		{"reserved step name", dsl.Flow("f", dsl.Step("compensate", pass)), `flow "f": step "compensate": "compensate" is reserved for the flow's compensation queues`},
		{"duplicate step", dsl.Flow("f", dsl.Step("a", pass), dsl.Step("a", pass)), `flow "f": step "a": named twice`},
		{"nil function", dsl.Flow("f", dsl.Step[Order, Order]("a", nil)), `flow "f": step "a": no function`},
		{"type chain", dsl.Flow("f", dsl.Step("ship", ship), dsl.Step("charge", pass)),
			`flow "f": step "charge": takes dsl_test.Order, but step "ship" before it returns dsl_test.Shipment`},
		{"delay at the end", dsl.Flow("f", dsl.Step("a", pass), dsl.Delay(time.Minute)), `flow "f": a delay after step "a" with nothing after it`},
		{"two delays", dsl.Flow("f", dsl.Step("a", pass), dsl.Delay(time.Minute), dsl.Delay(time.Minute), dsl.Step("b", pass)),
			`flow "f": two delays in a row after step "a"`},
		{"sub-second delay", dsl.Flow("f", dsl.Step("a", pass), dsl.Delay(time.Millisecond), dsl.Step("b", pass)),
			`flow "f": delay after step "a": delay 1ms, want at least 1s (the scheduler ladder's shortest rung)`},
		{"When on External", dsl.Flow("f", dsl.Step("a", pass), dsl.External("inv").When(`true`)),
			`flow "f": step "inv": When on an External step: the other service, not this flow, decides whether it runs`},
		{"Transactional on External", dsl.Flow("f", dsl.Step("a", pass), dsl.External("inv").Transactional()),
			`flow "f": step "inv": Transactional on an External step: it runs in another service, outside this flow's transactions`},
		{"When after External", dsl.Flow("f", dsl.Step("a", pass), dsl.External("inv"), dsl.Step("b", pass).When(`true`)),
			`flow "f": step "b": a When or a delay after External step "inv": the other service makes that hop and knows nothing of them`},
		{"delay after External", dsl.Flow("f", dsl.Step("a", pass), dsl.External("inv"), dsl.Delay(time.Minute), dsl.Step("b", pass)),
			`flow "f": step "b": a When or a delay after External step "inv"`},
		{"External first", dsl.Flow("f", dsl.External("inv"), dsl.Step("b", pass)), `flow "f": step "inv": the first step cannot be External`},
		{"compensate External", dsl.Flow("f", dsl.Step("a", pass), dsl.External("inv").Compensate(func(context.Context, json.RawMessage) error { return nil })),
			`flow "f": step "inv": an External step cannot be compensated here`},
		{"misspelt field", dsl.Flow("f", dsl.Step("a", pass), dsl.Step("b", pass).When(`payload.digitl == false`)),
			`flow "f": step "b": When "payload.digitl == false": type dsl_test.Order has no field digitl (column 9)`},
		{"Go field name is not the JSON name", dsl.Flow("f", dsl.Step("a", pass).When(`payload.Digital`)),
			`flow "f": step "a": When "payload.Digital": type dsl_test.Order has no field Digital (column 9)`},
		{"mismatched types", dsl.Flow("f", dsl.Step("a", pass).When(`payload.id > 3`)),
			`flow "f": step "a": When "payload.id > 3": invalid operation: > (mismatched types string and int) (column 12)`},
		{"not a bool", dsl.Flow("f", dsl.Step("a", pass).When(`payload.amount_cents`)),
			`flow "f": step "a": When "payload.amount_cents" gives int, want a bool (column 9)`},
		{"DelayUntil not a time", dsl.Flow("f", dsl.Step("a", pass), dsl.DelayUntil(`payload.amount_cents`), dsl.Step("b", pass)),
			`flow "f": step "b": DelayUntil before it: "payload.amount_cents" gives int, want a time (time.Time or an RFC 3339 string) (column 9)`},
		{"When changes the type", dsl.Flow("f", dsl.Step("a", pass), dsl.Step("ship", ship).When(`true`)),
			`flow "f": step "ship": has a When but returns dsl_test.Shipment for a dsl_test.Order`},
		{"bad retry", dsl.Flow("f", dsl.Step("a", pass).Retry(broker.Constant(3, 10*time.Millisecond))),
			`flow "f": step "a": invalid option: retry policy: delay 10ms`},
		{"bad concurrency", dsl.Flow("f", dsl.Step("a", pass).Concurrency(0)), `flow "f": step "a": concurrency 0, want at least 1`},
		{"bad timeout", dsl.Flow("f", dsl.Step("a", pass).Timeout(-time.Second)), `flow "f": step "a": timeout -1s, want a positive duration`},
		{"example of the wrong type", dsl.Flow("f", dsl.Step("a", pass), dsl.Example(Shipment{})), `flow "f": the example is a dsl_test.Shipment, but the flow takes dsl_test.Order`},
		{"itinerary with When", dsl.Flow("f", dsl.Itinerary(func(context.Context, Order) ([]string, error) { return nil, nil }), dsl.Step("a", pass).When(`true`)),
			`flow "f": step "a": a When or a delay in a flow with an Itinerary`},
		{"itinerary step of another type", dsl.Flow("f", dsl.Itinerary(func(context.Context, Order) ([]string, error) { return nil, nil }), dsl.Step("s", ship)),
			`flow "f": step "s": takes dsl_test.Order and returns dsl_test.Shipment; every step of an itinerary flow takes and returns dsl_test.Order`},
		{"nil part", dsl.Flow("f", dsl.Step("a", pass), nil), `flow "f": a nil part after 1 steps`},
		{"DelayUntil before External checked against what it is sent", dsl.Flow("f", dsl.Step("a", pass), dsl.DelayUntil(`payload.shipat`), dsl.External("inv")),
			`flow "f": step "inv": DelayUntil before it: "payload.shipat": type dsl_test.Order has no field shipat (column 9)`},
		{"OrderedBy on a bad field", dsl.Flow("f", dsl.Step("a", pass).OrderedBy(`payload.nope`)), `flow "f": step "a": OrderedBy "payload.nope": type dsl_test.Order has no field nope`},
		{"cron that does not parse", dsl.Flow("f", dsl.Step("a", pass), dsl.Cron("*/5 * * *", func(context.Context, time.Time) (Order, error) { return Order{}, nil })),
			`flow "f": cron "*/5 * * *": expected exactly 6 fields, found 4`},
		{"cron of another type", dsl.Flow("f", dsl.Step("a", pass), dsl.Cron("@every 1m", func(context.Context, time.Time) (Shipment, error) { return Shipment{}, nil })),
			`flow "f": cron "@every 1m" gives a dsl_test.Shipment, but the flow takes dsl_test.Order`},
		{"cron twice", dsl.Flow("f", dsl.Step("a", pass), dsl.Cron("@every 1m", func(context.Context, time.Time) (Order, error) { return Order{}, nil }),
			dsl.Cron("@every 1m", func(context.Context, time.Time) (Order, error) { return Order{}, nil })), `flow "f": cron "@every 1m" twice`},
		{"hold too short", dsl.Flow("f", dsl.Step("a", pass), dsl.HoldForReplay(0)), `flow "f": HoldForReplay 0s, want at least 1s`},
		{"ConcurrencyKey of 0", dsl.Flow("f", dsl.Step("a", pass).ConcurrencyKey(`payload.id`, 0)),
			`flow "f": step "a": ConcurrencyKey("payload.id", 0), want a limit of at least 1`},
		{"ConcurrencyKey with no key", dsl.Flow("f", dsl.Step("a", pass).ConcurrencyKey("", 2)), `flow "f": step "a": ConcurrencyKey with no key expression`},
		{"ConcurrencyKey on a bad field", dsl.Flow("f", dsl.Step("a", pass).ConcurrencyKey(`payload.tenant`, 2)),
			`flow "f": step "a": ConcurrencyKey "payload.tenant": type dsl_test.Order has no field tenant`},
		{"ConcurrencyKey on External", dsl.Flow("f", dsl.Step("a", pass), dsl.External("inv").ConcurrencyKey(`payload`, 2)),
			`flow "f": step "inv": a ConcurrencyKey or RateLimit on an External step: another service runs it`},
		{"RateLimit on a WaitFor", dsl.Flow("f", dsl.Step("a", pass), dsl.WaitFor[Order, string]("ok", time.Minute).RateLimit(1, time.Second)),
			`flow "f": step "ok": a ConcurrencyKey or RateLimit on a WaitFor: a wait runs nothing`},
		{"RateLimit on a Child", dsl.Flow("f", dsl.Step("a", pass), dsl.Child[Order, Order]("c", dsl.Flow("g", dsl.Step("x", pass))).RateLimit(1, time.Second)),
			`flow "f": step "c": a ConcurrencyKey or RateLimit on a Child step: limit the child flow's steps`},
		{"RateLimit of 0", dsl.Flow("f", dsl.Step("a", pass).RateLimit(0, time.Second)),
			`flow "f": step "a": rate limit of 0 per 1s, want at least 1 start per a positive interval, at most one per 1ms`},
		{"RateLimit too fine", dsl.Flow("f", dsl.Step("a", pass).RateLimit(10_000, time.Second)),
			`flow "f": step "a": rate limit of 10000 per 1s`},
		{"RateLimitBy with no key", dsl.Flow("f", dsl.Step("a", pass).RateLimitBy("", 1, time.Second)), `flow "f": step "a": RateLimitBy with no key expression`},
		{"RateLimitBy on a bad field", dsl.Flow("f", dsl.Step("a", pass).RateLimitBy(`payload.partner`, 1, time.Second)),
			`flow "f": step "a": RateLimitBy "payload.partner": type dsl_test.Order has no field partner`},
		{"Renamed from a step it has", dsl.Flow("f", dsl.Step("a", pass), dsl.Step("b", pass), dsl.Renamed("a", "b")),
			`flow "f": step "a": Renamed("a", "b"): the flow still has a step "a"`},
		{"Renamed to a step it lacks", dsl.Flow("f", dsl.Step("a", pass), dsl.Renamed("old", "nope")),
			`flow "f": step "nope": Renamed("old", "nope"): the flow has no step "nope"`},
		{"Renamed twice", dsl.Flow("f", dsl.Step("a", pass), dsl.Step("b", pass), dsl.Renamed("old", "a"), dsl.Renamed("old", "b")),
			`flow "f": step "old": "old" renamed or removed twice`},
		{"Renamed from a bad name", dsl.Flow("f", dsl.Step("a", pass), dsl.Renamed("o.ld", "a")),
			`flow "f": Renamed("o.ld", "a"): "o.ld" is not a step name`},
		{"Renamed from compensate", dsl.Flow("f", dsl.Step("a", pass), dsl.Renamed("compensate", "a")),
			`flow "f": step "compensate": Renamed("compensate", "a"): "compensate" is reserved`},
	}
	for _, c := range cases {
		err := c.flow.Err()
		require.Error(t, err, c.name)
		require.ErrorIs(t, err, dsl.ErrInvalidFlow, c.name)
		var be *dsl.BuildError
		require.True(t, errors.As(err, &be), c.name)
		require.Contains(t, err.Error(), c.want, c.name)
	}
}

// TestExpressionsReadJSONNames: a When sees the payload by its JSON names,
// and evaluates on a Go value or on raw JSON alike.
func TestExpressionsReadJSONNames(t *testing.T) {
	t.Parallel()
	f := dsl.Flow("f",
		dsl.Step("a", pass).When(`payload.digital == false && payload.address != nil && payload.address.country == "FR"`).OrderedBy(`payload.id`),
		dsl.DelayUntil(`payload.ship_at`),
		dsl.Step("b", pass))
	require.NoError(t, f.Err())
	steps := f.Steps()
	when := steps[0].When
	ok, err := when.Bool(Order{Address: &Address{Country: "FR"}})
	require.NoError(t, err)
	require.True(t, ok)
	ok, err = when.Bool(json.RawMessage(`{"digital":true,"address":{"country":"FR"}}`))
	require.NoError(t, err)
	require.False(t, ok)
	ok, err = when.Bool(Order{})
	require.NoError(t, err)
	require.False(t, ok, "a nil address is no country")

	key, err := steps[0].OrderKey.Key(Order{ID: "o-9"})
	require.NoError(t, err)
	require.Equal(t, "o-9", key)

	at := time.Date(2026, 12, 24, 9, 0, 0, 0, time.UTC)
	due, err := steps[1].DelayUntil.Time(Order{ShipAt: at})
	require.NoError(t, err)
	require.True(t, at.Equal(due))
	_, err = steps[1].DelayUntil.Time(json.RawMessage(`{"ship_at":"not a time"}`))
	require.Error(t, err)
}

// TestStepRunsTyped: the engine runs a step through its spec with the
// payload decoded into the step's own input type.
func TestStepRunsTyped(t *testing.T) {
	t.Parallel()
	f := dsl.Flow("f",
		dsl.Step("double", func(_ context.Context, o Order) (Order, error) { o.Amount *= 2; return o, nil }).
			Compensate(func(_ context.Context, o Order) error {
				if o.Amount != 84 {
					return errors.New("wrong amount")
				}
				return nil
			}))
	require.NoError(t, f.Err())
	s := f.Steps()[0]
	out, err := s.Run(context.Background(), func(v any) error { return json.Unmarshal([]byte(`{"amount_cents":42}`), v) })
	require.NoError(t, err)
	require.Equal(t, 84, out.(Order).Amount)
	require.NoError(t, s.Compensate(context.Background(), func(v any) error { return json.Unmarshal([]byte(`{"amount_cents":84}`), v) }))
	_, err = dsl.Flow("g", dsl.Step("a", pass), dsl.External("x")).Steps()[1].Run(context.Background(), nil)
	require.ErrorContains(t, err, `step "x" is served by another service`)
}

func TestItineraryRoute(t *testing.T) {
	t.Parallel()
	f := dsl.Flow("f",
		dsl.Itinerary(func(_ context.Context, o Order) ([]string, error) {
			if o.Digital {
				return []string{"charge"}, nil
			}
			return []string{"charge", "pack", "nowhere"}, nil
		}),
		dsl.Step("charge", pass), dsl.Step("pack", pass))
	require.NoError(t, f.Err())
	require.True(t, f.HasItinerary())
	route, err := f.Route(context.Background(), func(v any) error { return json.Unmarshal([]byte(`{"digital":true}`), v) })
	require.NoError(t, err)
	require.Equal(t, []string{"charge"}, route)
	_, err = f.Route(context.Background(), func(v any) error { return json.Unmarshal([]byte(`{}`), v) })
	require.ErrorContains(t, err, `the itinerary chose "nowhere", which is not one of its steps`)
}

func TestCronTrigger(t *testing.T) {
	t.Parallel()
	f := dsl.Flow("f", dsl.Step("a", pass),
		dsl.Cron("CRON_TZ=Europe/Paris 0 0 9 * * *", func(_ context.Context, tick time.Time) (Order, error) {
			return Order{ID: tick.Format(time.RFC3339)}, nil
		}).CatchUpLast())
	require.NoError(t, f.Err())
	crons := f.Crons()
	require.Len(t, crons, 1)
	require.Equal(t, dsl.CatchUpLast, crons[0].CatchUp)
	paris, err := time.LoadLocation("Europe/Paris")
	require.NoError(t, err)
	from := time.Date(2026, 12, 1, 9, 30, 0, 0, paris)
	next := crons[0].Next(from)
	require.True(t, next.Equal(time.Date(2026, 12, 2, 9, 0, 0, 0, paris)), "nine in Paris the next day, got %s", next)
	p, err := crons[0].Payload(context.Background(), next)
	require.NoError(t, err)
	require.Equal(t, next.Format(time.RFC3339), p.(Order).ID)
}

// TestLimitsCompile: a ConcurrencyKey and a RateLimitBy compile against
// the step's payload by its JSON names, and say what they limit; a
// RateLimit without a key limits every run alike.
func TestLimitsCompile(t *testing.T) {
	t.Parallel()
	f := dsl.Flow("f",
		dsl.Step("a", pass).ConcurrencyKey(`payload.address.country`, 3).RateLimitBy(`payload.id`, 10, time.Second),
		dsl.Step("b", pass).RateLimit(6, time.Minute))
	require.NoError(t, f.Err())
	a, b := f.Steps()[0], f.Steps()[1]
	require.Equal(t, 3, a.Limit.N)
	key, err := a.Limit.Key.Key(Order{Address: &Address{Country: "NL"}})
	require.NoError(t, err)
	require.Equal(t, "NL", key)
	key, err = a.Rate.Key.Key(json.RawMessage(`{"id":"o-7"}`))
	require.NoError(t, err)
	require.Equal(t, "o-7", key)
	require.Equal(t, 100*time.Millisecond, a.Rate.Interval())
	require.Nil(t, b.Limit)
	require.Nil(t, b.Rate.Key)
	require.Equal(t, 10*time.Second, b.Rate.Interval())
}
