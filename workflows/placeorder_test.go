package workflows_test

import (
	"context"
	"encoding/json"
	"errors"
	"reflect"
	"slices"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/acemq/acemq-flow/broker"
	"github.com/acemq/acemq-flow/dsl"
	"github.com/acemq/acemq-flow/engine"
	"github.com/acemq/acemq-flow/engine/journal"
	"github.com/acemq/acemq-flow/internal/brokertest"
	"github.com/acemq/acemq-flow/workflows"
)

// TestFlows: every shipped flow builds, has an example that its own input
// takes, and has a distinct name; place-order is what its documentation
// says.
func TestFlows(t *testing.T) {
	t.Parallel()
	flows := workflows.Flows()
	require.NotEmpty(t, flows)
	seen := map[string]bool{}
	for _, f := range flows {
		require.NoError(t, f.Err(), f.Name())
		require.False(t, seen[f.Name()], "%s shipped twice", f.Name())
		seen[f.Name()] = true
		ex, ok := f.Example()
		require.True(t, ok, "%s has no example", f.Name())
		require.Equal(t, f.Input(), reflect.TypeOf(ex), "%s's example is not its input", f.Name())
	}
	require.Same(t, workflows.PlaceOrder, flows[0])

	conn, err := broker.Open(t.Context(), "memory://")
	require.NoError(t, err)
	t.Cleanup(func() { require.NoError(t, conn.Close(context.Background())) })
	eng, err := engine.New(engine.Config{Conn: conn})
	require.NoError(t, err)
	require.NoError(t, eng.Register(flows...))
	info, err := eng.Flow("place-order")
	require.NoError(t, err)
	require.Equal(t, "10m0s", info.HoldForReplay)
	require.JSONEq(t, `{"id":"o-1001","customer":"Ada","item":"coffee beans","quantity":2,"amount_cents":2400,
		"card":"4242 4242 4242 4242","address":"12 Harbour Street, Bristol","digital":false}`, string(info.ExamplePayload))
	type step struct{ name, when, delayUntil, retry, compensation string }
	var got []step
	for _, s := range info.Steps {
		got = append(got, step{s.Name, s.When, s.DelayUntil, s.Retry, s.Compensation})
	}
	require.Equal(t, []step{
		{"validate", "", "", "5 attempts, 1s doubling up to 5m0s", ""},
		{"charge", "", "", "3 attempts, 1s doubling up to 5m0s", "place-order.compensate.charge"},
		{"reserve", "payload.digital == false", "", "5 attempts, 1s doubling up to 5m0s", ""},
		{"ship", "payload.digital == false", "payload.ship_at", "4 attempts, 1s doubling up to 5m0s", ""},
		{"reserve-stock", "", "", "5 attempts, 1s doubling up to 5m0s", "place-order.compensate.reserve-stock"},
		{"book-courier", "", "", "5 attempts, 1s doubling up to 5m0s", "place-order.compensate.book-courier"},
	}, got)
	require.Equal(t, &engine.ForkInfo{Kind: "parallel", Branches: [][]string{{"reserve-stock"}, {"book-courier"}}}, info.Steps[2].Fork,
		"reserve is two branches side by side")

	// The example starts a run as pasted: JSON with no unknown field.
	b, err := json.Marshal(workflows.ExampleOrder())
	require.NoError(t, err)
	_, err = eng.Start(t.Context(), "place-order", json.RawMessage(b))
	require.NoError(t, err)
}

// TestNewPlaceOrderWithoutAService: a service left nil is a build error,
// not a panic at run time.
func TestNewPlaceOrderWithoutAService(t *testing.T) {
	t.Parallel()
	s := workflows.NewStandIns()
	for name, svc := range map[string]workflows.Services{
		"payments":  {Inventory: s, Courier: s},
		"inventory": {Payments: s, Courier: s},
		"courier":   {Payments: s, Inventory: s},
	} {
		err := workflows.NewPlaceOrder("p", svc).Err()
		require.ErrorIs(t, err, dsl.ErrInvalidFlow, name)
		require.ErrorContains(t, err, "no function", name)
	}
}

// TestValidate: an order no retry can fix is given up at once, saying
// everything that is wrong with it.
func TestValidate(t *testing.T) {
	t.Parallel()
	s := workflows.NewStandIns()
	step := workflows.NewPlaceOrder("p", s.Services()).Steps()[0]
	run := func(o workflows.Order) error {
		_, err := step.Run(t.Context(), func(v any) error { *(v.(*workflows.Order)) = o; return nil })
		return err
	}
	require.NoError(t, run(workflows.ExampleOrder()))
	digital := workflows.ExampleOrder()
	digital.Digital, digital.Address = true, ""
	require.NoError(t, run(digital), "a digital order needs no address")

	for want, change := range map[string]func(*workflows.Order){
		"no id":                          func(o *workflows.Order) { o.ID = " " },
		"no customer":                    func(o *workflows.Order) { o.Customer = "" },
		"no item":                        func(o *workflows.Order) { o.Item = "" },
		"quantity 0, want at least 1":    func(o *workflows.Order) { o.Quantity = 0 },
		"amount_cents -5, want at least": func(o *workflows.Order) { o.AmountCents = -5 },
		"no card":                        func(o *workflows.Order) { o.Card = "" },
		"no address to ship to":          func(o *workflows.Order) { o.Address = "" },
		"no item; quantity 0":            func(o *workflows.Order) { o.Item, o.Quantity = "", 0 },
	} {
		o := workflows.ExampleOrder()
		change(&o)
		err := run(o)
		var fatal *broker.FatalError
		require.ErrorAs(t, err, &fatal, want)
		require.ErrorContains(t, err, want)
	}
}

// TestStandIns: each behaviour an order can choose, and the outage.
func TestStandIns(t *testing.T) {
	t.Parallel()
	ctx := t.Context()
	var outage atomic.Value
	outage.Store("")
	s := workflows.NewStandIns()
	s.Outage = func() string { return outage.Load().(string) }
	o := workflows.ExampleOrder()
	fatal := func(err error) bool {
		var f *broker.FatalError
		return errors.As(err, &f)
	}

	id, err := s.Charge(ctx, o)
	require.NoError(t, err)
	require.Equal(t, "pay-o-1001", id)
	id, err = s.Reserve(ctx, o)
	require.NoError(t, err)
	require.Equal(t, "res-o-1001", id)
	id, err = s.Book(ctx, o)
	require.NoError(t, err)
	require.Equal(t, "pickup-o-1001", id)
	id, err = s.Ship(ctx, o)
	require.NoError(t, err)
	require.Equal(t, "TRK-o-1001", id)

	declined := o
	declined.Card = "4000-0000-0000-0002"
	_, err = s.Charge(ctx, declined)
	require.True(t, fatal(err))
	require.ErrorContains(t, err, "declined")

	slow := o
	slow.Card = workflows.CardTimesOutOnce
	_, err = s.Charge(ctx, slow)
	require.ErrorContains(t, err, "timed out")
	require.False(t, fatal(err), "a timeout is retried")
	_, err = s.Charge(ctx, slow)
	require.NoError(t, err, "approved on the next try")
	other := slow
	other.ID = "o-2"
	_, err = s.Charge(ctx, other)
	require.Error(t, err, "each order times out once")

	gone := o
	gone.Item = "Unobtainium"
	_, err = s.Reserve(ctx, gone)
	require.True(t, fatal(err))
	require.ErrorContains(t, err, "out of stock")

	far := o
	far.Address = "1 Deep Road, atlantis"
	_, err = s.Book(ctx, far)
	require.True(t, fatal(err))
	require.ErrorContains(t, err, "no deliveries")

	for step, call := range map[string]func() error{
		"charge":  func() error { _, err := s.Charge(ctx, o); return err },
		"reserve": func() error { _, err := s.Book(ctx, o); return err },
		"ship":    func() error { _, err := s.Ship(ctx, o); return err },
	} {
		outage.Store(step)
		err := call()
		require.ErrorIs(t, err, workflows.ErrOutage, step)
		require.False(t, fatal(err), "an outage is retried")
		require.ErrorContains(t, err, "ACEMQ_DEMO_OUTAGE="+step)
		outage.Store("")
		require.NoError(t, call(), "read at each call: the outage is over")
	}
	outage.Store("ship")
	_, err = s.Reserve(ctx, o)
	require.NoError(t, err, "only the step named is down")
}

// TestPlaceOrderRuns runs place-order on the stand-ins through the engine:
// each behaviour an order can choose, as the journal shows it and as the
// services saw it.
func TestPlaceOrderRuns(t *testing.T) {
	each(t, func(t *testing.T, open func(*recorder) *fixture) {
		fx := open(newRecorder())
		order := func(id string, change func(*workflows.Order)) workflows.Order {
			o := workflows.ExampleOrder()
			o.ID = id
			if change != nil {
				change(&o)
			}
			return o
		}
		ok := fx.start(order("ok", nil))
		retried := fx.start(order("retried", func(o *workflows.Order) {
			o.Card, o.Digital, o.Address, o.Item = workflows.CardTimesOutOnce, true, "", "e-book"
		}))
		declined := fx.start(order("declined", func(o *workflows.Order) { o.Card = workflows.CardDeclined }))
		refused := fx.start(order("refused", func(o *workflows.Order) { o.Address = "Atlantis" }))
		shipAt := fx.now().Add(fx.short(30*time.Minute, 2*time.Second)).Truncate(time.Millisecond)
		later := fx.start(order("later", func(o *workflows.Order) { o.ShipAt = shipAt }))

		fx.wait(ok, journal.Completed, 10*time.Second)
		fx.timeline(ok, append(append([]string{"start::started", "step:validate:completed", "step:charge:completed"}, reserved...), "step:ship:completed")...)
		require.Equal(t, []string{"charge", "reserve", "book", "ship"}, side(fx.rec.of("ok")))

		fx.wait(retried, journal.Completed, 10*time.Second)
		// A digital order is neither reserved nor shipped.
		tl := fx.timeline(retried, "start::started", "step:validate:completed", "step:charge:retried", "step:charge:completed",
			"skip:reserve:skipped", "skip:ship:skipped")
		require.Contains(t, tl[2].Error, "charge 2400 cents: payment gateway timed out")
		require.Equal(t, 2, tl[3].Attempt)

		r := fx.wait(declined, journal.Failed, 10*time.Second)
		fx.timeline(declined, "start::started", "step:validate:completed", "step:charge:failed")
		require.Contains(t, r.Error, "card •••• 0002 declined", "the error names the card masked")
		require.NotContains(t, r.Error, "4000 0000 0000 0002")
		require.Nil(t, r.DueAt, "nothing to compensate: not held")
		require.Equal(t, []string{"charge!"}, fx.rec.of("declined"), "given up at once")

		r = fx.wait(refused, journal.Failed, 10*time.Second)
		require.Equal(t, "book-courier", r.Step)
		require.Contains(t, r.Error, `book a courier: fatal: courier: no deliveries to "Atlantis"`)
		require.NotNil(t, r.DueAt, "held for replay")
		require.WithinDuration(t, fx.now().Add(workflows.PlaceOrderHold), *r.DueAt, 10*time.Second)
		// The other branch goes on and comes back; the join waits for the
		// held one, and the charge and the stock wait with it.
		held := []string{"start::started", "step:validate:completed", "step:charge:completed", "step:reserve:forked: 2 branches",
			"step:reserve-stock:completed", "step:book-courier:failed", "step:reserve:branch 0 arrived"}
		fx.timeline(refused, held...)
		require.Equal(t, []string{"charge", "reserve", "book!"}, side(fx.rec.of("refused")))
		moved, err := fx.eng.Compensate(brokertest.Ctx(t), refused)
		require.NoError(t, err)
		require.Equal(t, fx.name+".book-courier.dlq", moved.From)
		fx.wait(refused, journal.Compensated, 10*time.Second)
		fx.timeline(refused, append(held, "compensation::compensation started on request",
			"compensation:reserve-stock:compensated", "compensation:charge:compensated")...)
		require.Equal(t, []string{"charge", "reserve", "book!", "release res-refused", "refund pay-refused"}, side(fx.rec.of("refused")))

		fx.wait(later, journal.Completed, 15*time.Second)
		tl = fx.timeline(later, append(append([]string{"start::started", "step:validate:completed", "step:charge:completed"}, reserved...),
			"delay:ship:waiting", "step:ship:completed")...)
		require.True(t, tl[len(tl)-2].DueAt.Equal(shipAt), "waits until ship_at: %s, want %s", tl[len(tl)-2].DueAt, shipAt)
		require.False(t, fx.rec.when("later", "ship").Before(shipAt), "never ships early")
	})
}

// TestPlaceOrderOutage is the operator's walkthrough: while ship's service
// is down, ship is retried and given up within seconds and the run is held
// for replay; once the outage is over, a replayed run completes, and a
// run compensated instead is undone step by step.
func TestPlaceOrderOutage(t *testing.T) {
	each(t, func(t *testing.T, open func(*recorder) *fixture) {
		rec := newRecorder()
		var outage atomic.Value
		outage.Store("ship")
		rec.Outage = func() string { return outage.Load().(string) }
		fx := open(rec)
		o := workflows.ExampleOrder()
		o.ID = "replayed"
		replayed := fx.start(o)
		o.ID = "compensated"
		compensated := fx.start(o)

		began := fx.now()
		r := fx.wait(replayed, journal.Failed, 20*time.Second)
		require.Less(t, fx.now().Sub(began), 15*time.Second, "given up within seconds")
		require.Equal(t, "ship", r.Step)
		require.Contains(t, r.Error, "ship: courier: service unavailable (outage simulated by ACEMQ_DEMO_OUTAGE=ship)")
		require.NotNil(t, r.DueAt, "held for replay")
		failed := append(append([]string{"start::started", "step:validate:completed", "step:charge:completed"}, reserved...),
			"step:ship:retried", "step:ship:retried", "step:ship:retried", "step:ship:failed")
		fx.timeline(replayed, failed...)
		fx.wait(compensated, journal.Failed, 20*time.Second)

		outage.Store("")
		_, err := fx.eng.Replay(brokertest.Ctx(t), replayed)
		require.NoError(t, err)
		fx.wait(replayed, journal.Completed, 10*time.Second)
		fx.timeline(replayed, append(slices.Clone(failed), "replay:ship:replayed", "step:ship:completed")...)
		require.Equal(t, []string{"charge", "reserve", "book", "ship!", "ship!", "ship!", "ship!", "ship"}, side(rec.of("replayed")))

		_, err = fx.eng.Compensate(brokertest.Ctx(t), compensated)
		require.NoError(t, err)
		fx.wait(compensated, journal.Compensated, 10*time.Second)
		// Newest first.
		fx.timeline(compensated, append(slices.Clone(failed), "compensation::compensation started on request",
			"compensation:book-courier:compensated", "compensation:reserve-stock:compensated", "compensation:charge:compensated")...)
		require.Equal(t, []string{"charge", "reserve", "book", "ship!", "ship!", "ship!", "ship!",
			"cancel pickup-compensated", "release res-compensated", "refund pay-compensated"}, side(rec.of("compensated")))
	})
}

// TestPlaceOrderCourierBack: an order whose courier cannot take it yet
// fails at ship and is held; replayed once the courier is back (within the
// hold), it completes. What `acemq-flow dev`'s dev-7 shows in the
// dashboard.
func TestPlaceOrderCourierBack(t *testing.T) {
	each(t, func(t *testing.T, open func(*recorder) *fixture) {
		fx := open(newRecorder())
		o := workflows.ExampleOrder()
		o.ID, o.CourierBackAt = "closed", fx.now().Add(30*time.Second)
		run := fx.start(o)
		r := fx.wait(run, journal.Failed, 20*time.Second)
		require.Contains(t, r.Error, "courier: the depot is closed until")
		require.NotNil(t, r.DueAt, "held for a replay")

		fx.pass(time.Minute)
		_, err := fx.eng.Replay(brokertest.Ctx(t), run)
		require.NoError(t, err)
		fx.wait(run, journal.Completed, 10*time.Second)
		require.Equal(t, []string{"charge", "reserve", "book", "ship!", "ship!", "ship!", "ship!", "ship"}, side(fx.rec.of("closed")))
	})
}

// reserved is the timeline of place-order's reserve: its two branches side
// by side, back at the fork, joined.
var reserved = []string{"step:reserve:forked: 2 branches", "step:reserve-stock:completed", "step:book-courier:completed",
	"step:reserve:branch 0 arrived", "step:reserve:branch 1 arrived", "step:reserve:completed"}

// side is what the services did for an order with the calls of reserve's
// two branches, which run side by side, in branch order: reserve, then
// book.
func side(calls []string) []string {
	out := slices.Clone(calls)
	for i := 0; i+1 < len(out); i++ {
		if strings.HasPrefix(out[i], "book") && strings.HasPrefix(out[i+1], "reserve") {
			out[i], out[i+1] = out[i+1], out[i]
		}
	}
	return out
}

// TestPlaceOrderCardIsSecret: the order's card is place-order's one
// secret, which redaction masks to its last four digits.
func TestPlaceOrderCardIsSecret(t *testing.T) {
	t.Parallel()
	require.Equal(t, []string{"payload.card"}, engine.Secrets(workflows.PlaceOrder))
	raw, err := json.Marshal(workflows.ExampleOrder())
	require.NoError(t, err)
	shown := string(engine.Redact(raw, engine.Secrets(workflows.PlaceOrder)))
	require.Contains(t, shown, `"card":"•••• 4242"`)
	require.NotContains(t, shown, workflows.CardApproved)
	require.Contains(t, shown, `"customer":"Ada"`)
}
