package patterns_test

import (
	"context"
	"fmt"
	"slices"
	"strings"
	"sync"
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

	var mu sync.Mutex
	running := map[string]int{}
	handled := make(chan string, 6)
	// Events of one order are handled one at a time; different orders run
	// concurrently on the consumer's 16 handlers.
	apply := patterns.Ordered("x-order-id", func(_ context.Context, m *broker.Message) broker.Ack {
		key := m.Headers["x-order-id"].(string)
		mu.Lock()
		running[key]++
		alone := running[key] == 1
		mu.Unlock()
		time.Sleep(time.Millisecond) // the work
		mu.Lock()
		running[key]--
		mu.Unlock()
		handled <- fmt.Sprintf("%s alone: %t", key, alone)
		return broker.Accept()
	})
	// Declared first, so the events published before the consumer starts
	// wait for it.
	if err := conn.Declare(ctx, broker.ConsumerTopology("orders.events")); err != nil {
		fmt.Println(err)
		return
	}
	for _, order := range []string{"o-1", "o-2", "o-1", "o-2", "o-1", "o-2"} {
		if err := conn.Publish(ctx, "event", broker.To("orders.events"), broker.Header("x-order-id", order)); err != nil {
			fmt.Println(err)
			return
		}
	}
	if _, err := conn.Consume(ctx, "orders.events", apply, broker.Concurrency(16)); err != nil {
		fmt.Println(err)
		return
	}
	lines := make([]string, 0, 6)
	for range 6 {
		lines = append(lines, <-handled)
	}
	slices.Sort(lines)
	fmt.Println(strings.Join(lines, "\n"))
	// Output:
	// o-1 alone: true
	// o-1 alone: true
	// o-1 alone: true
	// o-2 alone: true
	// o-2 alone: true
	// o-2 alone: true
}
