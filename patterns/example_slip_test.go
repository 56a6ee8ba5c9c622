package patterns_test

import (
	"context"
	"fmt"
	"time"

	"github.com/acemq/acemq-flow/broker"
	"github.com/acemq/acemq-flow/patterns"
)

func ExampleRoutingSlip() {
	slip := patterns.NewRoutingSlip().
		Step("validate", "orders-events", "order.validate").
		Step("charge", "orders-events", "order.charge").
		Step("ship", "orders-events", "order.ship")
	now := time.Now()
	at := slip.Advance(now).Advance(now)
	next, _ := at.NextStep()
	fmt.Println(slip)
	fmt.Println(at)
	fmt.Println(next.RoutingKey, at.Finished())
	// Output:
	// RoutingSlip[done: - | next: validate -> charge -> ship]
	// RoutingSlip[done: validate -> charge | next: ship]
	// order.ship false
}

func ExampleFollowSlip() {
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	conn, err := broker.Open(ctx, "memory://")
	if err != nil {
		fmt.Println(err)
		return
	}
	defer conn.Close(ctx)

	slipped := make(chan string, 1)
	charge, err := patterns.FollowSlip(conn, func(_ context.Context, m *broker.Message) (any, error) {
		return map[string]string{"charged": "yes"}, nil // sent on to the next step
	})
	if err != nil {
		fmt.Println(err)
		return
	}
	ship, err := patterns.FollowSlip(conn, func(_ context.Context, m *broker.Message) (any, error) {
		slip, err := patterns.SlipFrom(m)
		if err != nil {
			return nil, err
		}
		slipped <- slip.String()
		return nil, nil // the last step: nothing to send on
	})
	if err != nil {
		fmt.Println(err)
		return
	}
	for q, h := range map[string]broker.Handler{"charge-queue": charge, "ship-queue": ship} {
		if _, err := conn.Consume(ctx, q, h); err != nil {
			fmt.Println(err)
			return
		}
	}
	slip := patterns.NewRoutingSlip().Step("charge", "", "charge-queue").Step("ship", "", "ship-queue")
	if _, err := slip.Start(ctx, conn, map[string]string{"order": "o-1"}); err != nil {
		fmt.Println(err)
		return
	}
	fmt.Println(<-slipped)
	// Output:
	// RoutingSlip[done: charge | next: ship]
}
