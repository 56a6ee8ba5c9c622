package patterns_test

import (
	"context"
	"errors"
	"fmt"

	"github.com/acemq/acemq-flow/patterns"
)

func ExampleSaga() {
	type order struct{ ID string }
	step := func(what string, err error) patterns.SagaFunc[order] {
		return func(_ context.Context, o order) error {
			fmt.Println(what, o.ID)
			return err
		}
	}
	booking := patterns.NewSaga[order]("place-order").
		Step("take-payment", step("charge", nil)).CompensateWith(step("refund", nil)).
		Step("reserve-stock", step("reserve", nil)).CompensateWith(step("release", nil)).
		Step("book-courier", step("book", errors.New("no courier today")))

	result := booking.Run(context.Background(), order{ID: "o-1"})
	fmt.Println(result.Compensated(), result.FailedAt(), result.Completed(), result.HasUnresolved())
	fmt.Println(result.Failure())
	// Output:
	// charge o-1
	// reserve o-1
	// book o-1
	// release o-1
	// refund o-1
	// true book-courier [take-payment reserve-stock] false
	// no courier today
}
