package patterns_test

import (
	"context"
	"fmt"
	"time"

	"github.com/acemq/acemq-flow/broker"
	"github.com/acemq/acemq-flow/patterns"
)

// A message delivered twice runs its work once: the copy is accepted as a
// duplicate. Behind more than one worker, use persistence.SQLIdempotencyStore.
func ExampleIdempotent() {
	ctx := context.Background()
	conn, err := broker.Open(ctx, "memory://")
	if err != nil {
		panic(err)
	}
	defer conn.Close(ctx)

	store, err := patterns.NewInMemoryIdempotencyStore(6 * time.Hour)
	if err != nil {
		panic(err)
	}
	guard, err := patterns.Idempotent(store)
	if err != nil {
		panic(err)
	}
	done := make(chan string, 2)
	observe := func(next broker.Handler) broker.Handler {
		return func(ctx context.Context, m *broker.Message) broker.Ack {
			ack := next(ctx, m)
			done <- ack.Label()
			return ack
		}
	}
	_, err = conn.Consume(ctx, "orders.new", broker.Func(func(ctx context.Context, m *broker.Message) error {
		fmt.Println("reserving stock for", m.ID)
		return nil
	}), broker.Use(observe, guard))
	if err != nil {
		panic(err)
	}
	for range 2 {
		if err := conn.Publish(ctx, map[string]string{"sku": "X-1"}, broker.To("orders.new"), broker.MessageID("order-42")); err != nil {
			panic(err)
		}
	}
	<-done
	fmt.Printf("second copy: %q\n", <-done)
	// Output:
	// reserving stock for order-42
	// second copy: "duplicate"
}
