package dsl_test

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/acemq/acemq-flow/broker"
	"github.com/acemq/acemq-flow/dsl"
)

// Purchase is the payload of the examples' flow.
type Purchase struct {
	ID   string `json:"id"`
	Gift bool   `json:"gift"`
}

func chargeCard(_ context.Context, p Purchase) (Purchase, error) { return p, nil }
func refundCard(context.Context, Purchase) error                 { return nil }
func giftWrap(_ context.Context, p Purchase) (Purchase, error)   { return p, nil }
func handOver(_ context.Context, p Purchase) (Purchase, error)   { return p, nil }

// A flow is a value, built and checked with no broker; package engine
// runs it (engine's Example_compensation runs one like it). A step with a
// Compensate is undone if a later step is given up; a When decides per
// run, on the payload by its JSON names; a Delay holds each run before
// the step after it.
func ExampleFlow() {
	placeOrder := dsl.Flow("place-order",
		dsl.Step("charge", chargeCard).Compensate(refundCard).Retry(broker.Exponential(3, time.Second)),
		dsl.Step("wrap", giftWrap).When(`payload.gift`),
		dsl.Delay(30*time.Minute),
		dsl.Step("ship", handOver),
	)
	if err := placeOrder.Err(); err != nil {
		fmt.Println(err)
		return
	}
	fmt.Println(placeOrder.Name(), "takes a", placeOrder.Input())
	for _, s := range placeOrder.Steps() {
		fmt.Print(s.Name)
		if s.Compensable {
			fmt.Print(", compensable")
		}
		if s.Retry != nil {
			fmt.Printf(", retry %s", s.Retry)
		}
		if s.When != nil {
			gift, _ := s.When.Bool(Purchase{ID: "o-1", Gift: true})
			plain, _ := s.When.Bool(Purchase{ID: "o-2"})
			fmt.Printf(", when %s (a gift: %t, not a gift: %t)", s.When, gift, plain)
		}
		if s.Delay > 0 {
			fmt.Printf(", held %s before it", s.Delay)
		}
		fmt.Println()
	}
	// Output:
	// place-order takes a dsl_test.Purchase
	// charge, compensable, retry 3 attempts, 1s doubling up to 5m0s
	// wrap, when payload.gift (a gift: true, not a gift: false)
	// ship, held 30m0s before it
}

// Every mistake in a flow is a build error naming the flow and the step;
// an expression is compiled against the payload's type when the flow is
// built, so a misspelt field is found then, with its column.
func ExampleFlow_buildError() {
	placeOrder := dsl.Flow("place-order",
		dsl.Step("charge", chargeCard),
		dsl.Step("wrap", giftWrap).When(`payload.gfit`),
	)
	err := placeOrder.Err()
	fmt.Println(err)
	fmt.Println(errors.Is(err, dsl.ErrInvalidFlow))
	// Output:
	// flow "place-order": step "wrap": When "payload.gfit": type dsl_test.Purchase has no field gfit (column 9)
	// true
}

// PurchaseV1 is what the examples' flow took before amounts were added.
type PurchaseV1 struct {
	ID string `json:"id"`
}

// A flow changed while runs are in flight says what became of its old
// steps: "bill" was called "charge", "fraud" is gone and its runs go on at
// "ship", and runs started on the old route take the new one from their
// next step, their payload mapped where "ship" now takes another type.
// `acemq-flow flows check` shows what each does to the runs in flight.
func ExampleRemoved() {
	placeOrder := dsl.Flow("place-order",
		dsl.Step("bill", chargeCard).Compensate(refundCard),
		dsl.Step("wrap", giftWrap).When(`payload.gift`),
		dsl.Step("ship", handOver),
		dsl.Renamed("charge", "bill"),
		dsl.Removed("fraud", dsl.To("ship")),
		dsl.Adopt(dsl.MapPayload("ship", func(_ context.Context, old PurchaseV1) (Purchase, error) {
			return Purchase{ID: old.ID}, nil
		})),
	)
	if err := placeOrder.Err(); err != nil {
		fmt.Println(err)
		return
	}
	for _, m := range placeOrder.Migrations() {
		fmt.Printf("%+v\n", m)
	}
	adopts, maps := placeOrder.Adopts()
	fmt.Println("adopts:", adopts, "maps ship:", maps["ship"].Map != nil)
	// Output:
	// {Old:charge New:bill Removed:false}
	// {Old:fraud New:ship Removed:true}
	// adopts: true maps ship: true
}
