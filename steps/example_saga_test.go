package steps_test

import (
	"context"
	"errors"
	"fmt"

	"github.com/acemq/acemq-flow/broker"
	"github.com/acemq/acemq-flow/steps"
)

func ExampleSaga() {
	type order struct {
		ID          string
		Reservation string
		Courier     string
	}
	reserveStock := func(_ context.Context, o order) (order, error) {
		o.Reservation = "R-" + o.ID
		fmt.Println("reserved", o.Reservation)
		return o, nil
	}
	releaseStock := func(_ context.Context, o order) error {
		fmt.Println("released", o.Reservation) // gets what reserveStock returned
		return nil
	}
	bookCourier := func(_ context.Context, o order) (order, error) {
		if o.ID == "o-2" {
			return o, broker.Fatal(errors.New("the courier does not deliver there"))
		}
		o.Courier = "C-" + o.ID
		fmt.Println("booked", o.Courier)
		return o, nil
	}
	// The step function of dsl.Step("reserve", reserve).
	reserve := steps.Saga("reserve",
		steps.Do("reserve-stock", reserveStock).Undo(releaseStock),
		steps.Do("book-courier", bookCourier))

	o, err := reserve(context.Background(), order{ID: "o-1"})
	fmt.Printf("%+v %v\n", o, err)

	_, err = reserve(context.Background(), order{ID: "o-2"})
	var fatal *broker.FatalError
	fmt.Println(err)
	fmt.Println("given up at once:", errors.As(err, &fatal))
	// Output:
	// reserved R-o-1
	// booked C-o-1
	// {ID:o-1 Reservation:R-o-1 Courier:C-o-1} <nil>
	// reserved R-o-2
	// released R-o-2
	// saga reserve failed at "book-courier": fatal: the courier does not deliver there; undone: reserve-stock
	// given up at once: true
}
