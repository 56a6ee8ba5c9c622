package patterns_test

import (
	"context"
	"fmt"
	"sync/atomic"

	"github.com/acemq/acemq-flow/broker"
	"github.com/acemq/acemq-flow/patterns"
)

func ExampleNewConsumerGroup() {
	ctx := context.Background()
	conn, err := broker.Open(ctx, "memory://")
	if err != nil {
		fmt.Println(err)
		return
	}
	defer conn.Close(ctx)

	var placed atomic.Int64
	done := make(chan struct{})
	group, err := patterns.NewConsumerGroup(ctx, conn, "orders.new", 4, func(context.Context, *broker.Message) broker.Ack {
		if placed.Add(1) == 8 {
			close(done)
		}
		return broker.Accept()
	}, broker.Prefetch(10))
	if err != nil {
		fmt.Println(err)
		return
	}
	for i := range 8 {
		if err := conn.Publish(ctx, map[string]int{"order": i}, broker.To("orders.new")); err != nil {
			fmt.Println(err)
			return
		}
	}
	<-done
	fmt.Println("members:", group.Size(), "placed:", placed.Load())
	fmt.Println("close:", group.Close(ctx))
	// Output:
	// members: 4 placed: 8
	// close: <nil>
}
