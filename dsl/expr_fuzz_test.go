package dsl_test

import (
	"context"
	"encoding/json"
	"errors"
	"reflect"
	"testing"
	"time"

	"github.com/acemq/acemq-flow/dsl"
)

// Payload types an expression is compiled against: JSON names that expr
// can and cannot read, a time, nesting through slices, maps, pointers and
// an embedded struct, a recursive type, and the untyped kinds.
type (
	fuzzOrder struct {
		fuzzMeta
		ID       string            `json:"id"`
		Digital  bool              `json:"digital"`
		Amount   float64           `json:"amount"`
		Count    int8              `json:"count"`
		ShipAt   time.Time         `json:"ship_at"`
		Due      string            `json:"due"`
		Items    []fuzzItem        `json:"items,omitempty"`
		Tags     map[string]string `json:"tags"`
		Address  *fuzzAddress      `json:"address,omitempty"`
		Dashed   string            `json:"not-an-ident"`
		Hidden   string            `json:"-"`
		Untagged uint64
		Raw      json.RawMessage `json:"raw"`
	}
	fuzzMeta    struct{ Source string }
	fuzzItem    struct{ SKU string }
	fuzzAddress struct {
		Country string `json:"country"`
	}
	fuzzNode struct {
		Name     string     `json:"name"`
		Children []fuzzNode `json:"children"`
	}
)

// fuzzFlow builds a one- or two-step flow over payloads of type T whose
// When (where 0), DelayUntil (1) or OrderedBy (2) is src, and returns it
// with the expression built and a zero T.
func fuzzFlow[T any](where uint8, src string) (*dsl.FlowDef, func(dsl.StepSpec) *dsl.Expr, any) {
	step := func(_ context.Context, v T) (T, error) { return v, nil }
	var zero T
	switch where % 3 {
	case 0:
		return dsl.Flow("fuzz", dsl.Step("a", step).When(src)), func(s dsl.StepSpec) *dsl.Expr { return s.When }, zero
	case 1:
		return dsl.Flow("fuzz", dsl.Step("a", step), dsl.DelayUntil(src), dsl.Step("b", step)),
			func(s dsl.StepSpec) *dsl.Expr { return s.DelayUntil }, zero
	default:
		return dsl.Flow("fuzz", dsl.Step("a", step).OrderedBy(src)), func(s dsl.StepSpec) *dsl.Expr { return s.OrderKey }, zero
	}
}

// FuzzFlowExpr: a flow whose When, DelayUntil or OrderedBy is any text
// either builds or fails with a *dsl.BuildError matching
// dsl.ErrInvalidFlow, never panicking; one that builds keeps the
// expression as written and evaluates it on any JSON payload, and on the
// payload type's zero value, without panicking (an error is fine).
func FuzzFlowExpr(f *testing.F) {
	payloads := []string{
		`{"id":"o-1","digital":false,"amount":12.5,"count":3,"ship_at":"2026-12-24T09:00:00Z","due":"2026-12-24T09:00:00Z",
		  "items":[{"SKU":"a"}],"tags":{"k":"v"},"address":{"country":"NL"},"Source":"web","Untagged":18446744073709551615,"raw":[1]}`,
		`{"name":"root","children":[{"name":"leaf","children":null}]}`,
		`null`, `{}`, `[]`, `42`, `"text"`, `{"amount":"not a number","items":{}}`, `{"count":1000}`, `{`, ``,
	}
	exprs := []string{
		`payload.digital == false && len(payload.items) > 0`, `payload.amount > 10`, `payload.ship_at`, `payload.due`,
		`payload.address.country`, `payload.items[0].SKU`, `payload.tags["k"]`, `payload.Source`, `payload.Untagged`,
		`payload.id + "-" + string(payload.count)`, `payload.children[0].children[0].name`, `payload.name`,
		`payload`, `payload.missing`, `payload.not-an-ident`, `payload.Hidden`, `payload.count / 0`, `1..3 | map(# * 2)`,
		`now()`, `date(payload.due)`, `payload.items[99].SKU`, `payload.address?.country ?? "none"`, `let x = 1; x + 1`,
		`"unterminated`, `((((`, `payload.raw`, ` `, ``, `nil`, `true`, `"2026-12-24T09:00:00Z"`, `-9223372036854775808`,
	}
	for i, src := range exprs {
		f.Add(src, uint8(i%3), uint8(i%6), []byte(payloads[i%len(payloads)]))
		f.Add(src, uint8(i%3+1), uint8(i%6+1), []byte(payloads[(i+1)%len(payloads)]))
	}
	f.Fuzz(func(t *testing.T, src string, where, typ uint8, payload []byte) {
		if len(src) > 256 || len(payload) > 256 {
			return
		}
		var (
			flow *dsl.FlowDef
			expr func(dsl.StepSpec) *dsl.Expr
			zero any
		)
		switch typ % 6 {
		case 0:
			flow, expr, zero = fuzzFlow[fuzzOrder](where, src)
		case 1:
			flow, expr, zero = fuzzFlow[*fuzzNode](where, src)
		case 2:
			flow, expr, zero = fuzzFlow[json.RawMessage](where, src)
		case 3:
			flow, expr, zero = fuzzFlow[map[string]any](where, src)
		case 4:
			flow, expr, zero = fuzzFlow[int](where, src)
		default:
			flow, expr, zero = fuzzFlow[string](where, src)
		}
		if err := flow.Err(); err != nil {
			var be *dsl.BuildError
			if !errors.As(err, &be) || !errors.Is(err, dsl.ErrInvalidFlow) || be.Flow != "fuzz" {
				t.Fatalf("%q: %v (%T), want a *dsl.BuildError", src, err, err)
			}
			return
		}
		steps := flow.Steps()
		e := expr(steps[len(steps)-1])
		if e == nil {
			if src != "" || where%3 == 1 {
				t.Fatalf("%q built without its expression", src)
			}
			return
		}
		if e.String() != src {
			t.Fatalf("expression %q kept as %q", src, e.String())
		}
		for _, p := range []any{json.RawMessage(payload), zero, reflect.New(reflect.TypeOf(zero)).Interface()} {
			switch where % 3 {
			case 0:
				_, _ = e.Bool(p)
			case 1:
				_, _ = e.Time(p)
			default:
				_, _ = e.Key(p)
			}
		}
	})
}
