package patterns_test

import (
	"encoding/json"
	"errors"
	"math"
	"testing"
	"time"

	"github.com/acemq/acemq-flow/broker"
	"github.com/acemq/acemq-flow/patterns"
)

// fuzzMaxJSON bounds the inputs worth trying: a longer one reaches nothing
// a shorter one does not, and the fuzzer's minimizing of every new input
// takes time that grows with the square of its length.
const fuzzMaxJSON = 384

// slipAt is a step's time as the wire has it: epoch ms, 0 for none.
func slipAt(t time.Time) int64 {
	if t.IsZero() {
		return 0
	}
	return t.UnixMilli()
}

// sameSlip fails t unless a and b have the same itinerary and done steps,
// times compared as the wire carries them.
func sameSlip(t *testing.T, what string, a, b *patterns.RoutingSlip) {
	t.Helper()
	for _, side := range []struct {
		name string
		a, b []patterns.SlipStep
	}{{"itinerary", a.Itinerary(), b.Itinerary()}, {"done", a.Done(), b.Done()}} {
		if len(side.a) != len(side.b) {
			t.Fatalf("%s: %s %v, then %v", what, side.name, side.a, side.b)
		}
		for i, x := range side.a {
			y := side.b[i]
			if x.Name != y.Name || x.Exchange != y.Exchange || x.RoutingKey != y.RoutingKey || slipAt(x.At) != slipAt(y.At) {
				t.Fatalf("%s: %s step %d %#v, then %#v", what, side.name, i, x, y)
			}
		}
	}
}

// FuzzRoutingSlipJSON: whatever acemq-routing-slip holds, reading it never
// panics and refuses with ErrInvalidSlip; a slip that reads has a routing
// key and a name at every step to run, writes back to JSON that reads as
// the same itinerary and done steps, and so does the slip advanced one
// step; SlipFrom reads the header (string or bytes, route headers beside
// it or not) as UnmarshalJSON does, refusing a finished slip.
func FuzzRoutingSlipJSON(f *testing.F) {
	for _, s := range []string{
		`{"itinerary":[{"name":"charge","exchange":"orders-events","routing_key":"order.charge"},
		              {"name":"ship","exchange":"orders-events","routing_key":"order.ship"}],
		 "done":[{"name":"validate","exchange":"orders-events","routing_key":"order.validate","at":1764489600123}]}`,
		`{"itinerary":[{"routing_key":"k","extra":{"kept":[1,2]}}],"done":[{"routing_key":"d","at":0}]}`,
		`{"itinerary":[{"name":"a","exchange":"","routing_key":"k","at":5}],"done":[{"name":"b","at":-9223372036854775808}]}`,
		`{"itinerary":[{"name":"a","routing_key":"k"}],"done":[{"name":"b","routing_key":"k","at":9223372036854775807}]}`,
		`{"itinerary":[{"name":"a","routing_key":""}]}`,
		`{"itinerary":[{"name":"a","routing_key":"k"}],"done":[{"name":"b","routing_key":"k"}]}`,
		`{"itinerary":[{"name":"a","routing_key":"k"}],"done":[{"name":"b","routing_key":"k","at":1.5}]}`,
		`{"itinerary":[{"name":"a","routing_key":"k"}],"done":[{"name":"b","routing_key":"k","at":"5"}]}`,
		`{"itinerary":[{"Name":"a","ROUTING_KEY":"k","name":"b"}],"Done":null}`,
		`{"itinerary":[{"name":"\u00e9\ud800<&>","routing_key":"k\u2028"}],"itinerary":[{"routing_key":"second"}]}`,
		"{\"itinerary\":[{\"name\":\"a\xff\",\"routing_key\":\"k\"}]}",
		`{"itinerary":[null],"done":[]}`,
		`{"itinerary":{},"done":[]}`,
		`{"itinerary":[],"done":[]}`,
		`{}`, `null`, `[]`, `"slip"`, ``, `{"itinerary":[`,
	} {
		f.Add([]byte(s), int64(1764489600123))
	}
	f.Add([]byte(`{"itinerary":[{"name":"a","routing_key":"k"}]}`), int64(0))
	f.Add([]byte(`{"itinerary":[{"name":"a","routing_key":"k"}]}`), int64(math.MinInt64))
	f.Add([]byte(`{"itinerary":[{"name":"a","routing_key":"k"}]}`), int64(math.MaxInt64))
	f.Fuzz(func(t *testing.T, data []byte, at int64) {
		if len(data) > fuzzMaxJSON {
			return
		}
		var s patterns.RoutingSlip
		err := s.UnmarshalJSON(data)
		for _, m := range []*broker.Message{
			{Headers: broker.Table{broker.HeaderRoutingSlip: string(data)}},
			{Headers: broker.Table{broker.HeaderRoutingSlip: data}},
			{Headers: broker.Table{broker.HeaderRoutingSlip: string(data)}, Envelope: broker.Envelope{Route: []string{"elsewhere"}}},
		} {
			got, ferr := patterns.SlipFrom(m)
			switch {
			case err != nil || s.Finished():
				if !errors.Is(ferr, patterns.ErrInvalidSlip) {
					t.Fatalf("SlipFrom %q: %v, want ErrInvalidSlip", data, ferr)
				}
			case ferr != nil:
				t.Fatalf("SlipFrom refused %q, which UnmarshalJSON read: %v", data, ferr)
			default:
				sameSlip(t, "SlipFrom", &s, got)
			}
		}
		if err != nil {
			if !errors.Is(err, patterns.ErrInvalidSlip) {
				t.Fatalf("%q refused with %v, want ErrInvalidSlip", data, err)
			}
			return
		}
		for i, st := range s.Itinerary() {
			if st.RoutingKey == "" || st.Name == "" {
				t.Fatalf("itinerary step %d %#v of %q has no routing key or name", i, st, data)
			}
		}
		for i, st := range s.Done() {
			if !st.At.IsZero() && st.At.UnixMilli() == 0 {
				t.Fatalf("done step %d %#v of %q: a time of 0 is no time", i, st, data)
			}
		}
		for _, slip := range []*patterns.RoutingSlip{&s, s.Advance(time.UnixMilli(at))} {
			b, err := json.Marshal(slip)
			if err != nil {
				t.Fatalf("cannot write %v read from %q: %v", slip, data, err)
			}
			var again patterns.RoutingSlip
			if err := json.Unmarshal(b, &again); err != nil {
				t.Fatalf("cannot read %s, written from %q: %v", b, data, err)
			}
			sameSlip(t, string(b), slip, &again)
		}
	})
}
