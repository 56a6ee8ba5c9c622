package patterns_test

import (
	"encoding/json"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/acemq/acemq-flow/broker"
	"github.com/acemq/acemq-flow/patterns"
)

func TestSlipBuilderAndString(t *testing.T) {
	t.Parallel()
	slip := patterns.NewRoutingSlip()
	same := slip.Step("validate", "orders-events", "order.validate").
		Step("charge", "orders-events", "order.charge").
		Step("", "orders-events", "order.ship")
	require.Same(t, slip, same, "Step mutates and returns the slip")
	require.NoError(t, slip.Validate())
	require.Equal(t, "RoutingSlip[done: - | next: validate -> charge -> order.ship]", slip.String(),
		"a step without a name is named after its routing key")

	t1 := time.UnixMilli(1764489600123)
	once := slip.Advance(t1)
	twice := once.Advance(t1.Add(time.Second))
	require.Equal(t, "RoutingSlip[done: - | next: validate -> charge -> order.ship]", slip.String(), "Advance returns a copy")
	require.Equal(t, "RoutingSlip[done: validate -> charge | next: order.ship]", twice.String())
	require.Equal(t, []patterns.SlipStep{
		{Name: "validate", Exchange: "orders-events", RoutingKey: "order.validate", At: t1},
		{Name: "charge", Exchange: "orders-events", RoutingKey: "order.charge", At: t1.Add(time.Second)},
	}, twice.Done(), "each done step is stamped")
	next, ok := twice.NextStep()
	require.True(t, ok)
	require.Equal(t, "order.ship", next.RoutingKey)
	require.False(t, twice.Finished())

	end := twice.Advance(t1).Advance(t1)
	require.True(t, end.Finished())
	_, ok = end.NextStep()
	require.False(t, ok)
	require.Equal(t, "RoutingSlip[done: validate -> charge -> order.ship | next: -]", end.String())

	done := twice.Done()
	done[0].Name = "changed"
	require.Equal(t, "validate", twice.Done()[0].Name, "Done is a copy")
}

func TestSlipValidate(t *testing.T) {
	t.Parallel()
	require.ErrorIs(t, patterns.NewRoutingSlip().Validate(), patterns.ErrInvalidSlip)
	bad := patterns.NewRoutingSlip().Step("a", "ex", "").Step("b", "ex", "b")
	require.ErrorIs(t, bad.Validate(), patterns.ErrInvalidSlip)
	_, err := bad.Start(t.Context(), nil, "x")
	require.ErrorIs(t, err, patterns.ErrInvalidSlip, "an invalid slip is refused before anything is published")
}

// TestSlipJSONContract reads and writes the contract's example exactly.
func TestSlipJSONContract(t *testing.T) {
	t.Parallel()
	const wire = `{"itinerary":[{"name":"charge","exchange":"orders-events","routing_key":"order.charge"},
              {"name":"ship","exchange":"orders-events","routing_key":"order.ship"}],
 "done":[{"name":"validate","exchange":"orders-events","routing_key":"order.validate","at":1764489600123}]}`
	var slip patterns.RoutingSlip
	require.NoError(t, json.Unmarshal([]byte(wire), &slip))
	require.Equal(t, "RoutingSlip[done: validate | next: charge -> ship]", slip.String())
	require.Equal(t, time.UnixMilli(1764489600123), slip.Done()[0].At)
	out, err := json.Marshal(&slip)
	require.NoError(t, err)
	require.JSONEq(t, wire, string(out))

	for name, bad := range map[string]string{
		"no routing key": `{"itinerary":[{"name":"a","exchange":"x"}],"done":[]}`,
		"done without at": `{"itinerary":[{"name":"a","exchange":"x","routing_key":"a"}],
			"done":[{"name":"b","exchange":"x","routing_key":"b"}]}`,
	} {
		require.ErrorIs(t, json.Unmarshal([]byte(bad), &slip), patterns.ErrInvalidSlip, name)
	}
}

func TestSlipFrom(t *testing.T) {
	t.Parallel()
	slipHeader := `{"itinerary":[{"name":"ship","exchange":"e","routing_key":"order.ship"}],"done":[]}`
	cases := []struct {
		name string
		m    broker.Message
		want string
		err  error
	}{
		{name: "slip", m: broker.Message{Headers: broker.Table{broker.HeaderRoutingSlip: slipHeader}},
			want: "RoutingSlip[done: - | next: ship]"},
		{name: "slip as bytes", m: broker.Message{Headers: broker.Table{broker.HeaderRoutingSlip: []byte(slipHeader)}},
			want: "RoutingSlip[done: - | next: ship]"},
		{name: "route", m: broker.Message{Envelope: broker.Envelope{Route: []string{"validate", "charge", "ship"}, RoutePosition: 1}},
			want: "RoutingSlip[done: validate | next: charge -> ship]"},
		{name: "both forms read as the slip", m: broker.Message{
			Envelope: broker.Envelope{Route: []string{"validate", "charge"}, RoutePosition: 1},
			Headers:  broker.Table{broker.HeaderRoutingSlip: slipHeader}},
			want: "RoutingSlip[done: - | next: ship]"},
		{name: "neither", m: broker.Message{}, err: patterns.ErrNoSlip},
		{name: "slip not json", m: broker.Message{Headers: broker.Table{broker.HeaderRoutingSlip: "{"}}, err: patterns.ErrInvalidSlip},
		{name: "slip not a string", m: broker.Message{Headers: broker.Table{broker.HeaderRoutingSlip: int64(7)}}, err: patterns.ErrInvalidSlip},
		{name: "slip finished", m: broker.Message{Headers: broker.Table{broker.HeaderRoutingSlip: `{"itinerary":[],"done":[]}`}}, err: patterns.ErrInvalidSlip},
		{name: "route position past the end", m: broker.Message{Envelope: broker.Envelope{Route: []string{"a"}, RoutePosition: 1}}, err: patterns.ErrInvalidSlip},
		{name: "empty route", m: broker.Message{Envelope: broker.Envelope{Route: []string{}}}, err: patterns.ErrInvalidSlip},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			t.Parallel()
			slip, err := patterns.SlipFrom(&c.m)
			if c.err != nil {
				require.ErrorIs(t, err, c.err)
				return
			}
			require.NoError(t, err)
			require.Equal(t, c.want, slip.String())
		})
	}
}
