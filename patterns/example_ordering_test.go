package patterns_test

import (
	"context"
	"fmt"
	"time"

	"github.com/acemq/acemq-flow/broker"
	"github.com/acemq/acemq-flow/patterns"
)

func ExamplePartitionedRoutingKey() {
	key, err := patterns.PartitionedRoutingKey("orders", "order-42", 8)
	if err != nil {
		fmt.Println(err)
		return
	}
	p, _ := patterns.Partition("order-42", 8)
	fmt.Println(key, p)
	// Output:
	// orders.4 4
}

func ExampleOrdered() {
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	conn, err := broker.Open(ctx, "memory://")
	if err != nil {
		fmt.Println(err)
		return
	}
	defer conn.Close(ctx)

	handled := make(chan string, 3)
	apply := patterns.Ordered("x-order-id", func(_ context.Context, m *broker.Message) broker.Ack {
		var event string
		if err := m.Decode(&event); err != nil {
			return broker.Reject(err)
		}
		handled <- event
		return broker.Accept()
	})
	for _, event := range []string{"placed", "paid", "cancelled"} {
		if err := conn.Publish(ctx, event, broker.To("orders.events"), broker.Header("x-order-id", "o-1")); err != nil {
			fmt.Println(err)
			return
		}
	}
	if _, err := conn.Consume(ctx, "orders.events", apply, broker.Concurrency(16)); err != nil {
		fmt.Println(err)
		return
	}
	fmt.Println(<-handled, <-handled, <-handled)
	// Output:
	// placed paid cancelled
}
