package patterns_test

import (
	"context"
	"fmt"
	"time"

	"github.com/acemq/acemq-flow/broker"
	"github.com/acemq/acemq-flow/patterns"
)

func ExamplePipeline_Topology() {
	p, err := patterns.NewPipeline("orders", "validate", "charge", "ship")
	if err != nil {
		fmt.Println(err)
		return
	}
	for _, b := range p.Topology().Bindings {
		fmt.Printf("%s -[%s]-> %s\n", b.Exchange, b.Key, b.Queue)
	}
	// Output:
	// orders -[validate]-> orders.validate
	// orders -[charge]-> orders.charge
	// orders -[ship]-> orders.ship
}

func ExamplePipeline_Follow() {
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	conn, err := broker.Open(ctx, "memory://")
	if err != nil {
		fmt.Println(err)
		return
	}
	defer conn.Close(ctx)

	orders, err := patterns.NewPipeline("orders", "validate", "charge", "ship")
	if err != nil {
		fmt.Println(err)
		return
	}
	if err := conn.Declare(ctx, orders.Topology()); err != nil {
		fmt.Println(err)
		return
	}
	done := make(chan string, 1)
	for _, step := range orders.Steps() {
		h, err := orders.Follow(conn, func(_ context.Context, m *broker.Message) (any, error) {
			var trail string
			if err := m.Decode(&trail); err != nil {
				return nil, err
			}
			trail += " " + step
			if step == "ship" {
				done <- fmt.Sprintf("%s (position %d of %v)", trail, m.RoutePosition, m.Route)
			}
			return trail, nil
		})
		if err != nil {
			fmt.Println(err)
			return
		}
		if _, err := conn.Consume(ctx, orders.QueueFor(step), h); err != nil {
			fmt.Println(err)
			return
		}
	}
	if _, err := orders.Start(ctx, conn, "order-42:", broker.Mandatory()); err != nil {
		fmt.Println(err)
		return
	}
	fmt.Println(<-done)
	// Output:
	// order-42: validate charge ship (position 2 of [validate charge ship])
}
