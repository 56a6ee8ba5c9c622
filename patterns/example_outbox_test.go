package patterns_test

import (
	"context"
	"fmt"

	"github.com/acemq/acemq-flow/broker"
	"github.com/acemq/acemq-flow/patterns"
)

// A record is written with the work and relayed afterwards. Sweep publishes
// what is pending now; Start would do it in the background. With
// persistence.SQLOutboxStore, Add runs on the caller's transaction.
func ExampleOutboxRelay() {
	ctx := context.Background()
	conn, err := broker.Open(ctx, "memory://")
	if err != nil {
		panic(err)
	}
	defer conn.Close(ctx)
	if err := conn.Declare(ctx, broker.ConsumerTopology("order.placed")); err != nil {
		panic(err)
	}

	store, err := patterns.NewInMemoryOutboxStore(patterns.InMemoryOutboxStoreConfig{})
	if err != nil {
		panic(err)
	}
	rec, err := patterns.Record(ctx, conn, map[string]string{"order_id": "o-1"},
		broker.To("order.placed"), broker.Type("order.placed.v2"))
	if err != nil {
		panic(err)
	}
	if _, err := store.Add(ctx, rec); err != nil {
		panic(err)
	}

	relay, err := patterns.NewOutboxRelay(conn, store, patterns.OutboxRelayConfig{
		OnError: func(err error, dest patterns.OutboxDestination) {
			fmt.Println("the outbox cannot reach", dest.Exchange, dest.RoutingKey, err)
		},
	})
	if err != nil {
		panic(err)
	}
	defer relay.Close(ctx)
	n, err := relay.Sweep(ctx)
	fmt.Println("published", n, err)

	d, err := conn.Transport().Get(ctx, "order.placed")
	if err != nil {
		panic(err)
	}
	fmt.Println(d.Type, string(d.Body))
	fmt.Println("left in the outbox:", len(store.Records()))
	// Output:
	// published 1 <nil>
	// order.placed.v2 {"order_id":"o-1"}
	// left in the outbox: 0
}
