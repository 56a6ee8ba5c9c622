package patterns_test

import (
	"context"
	"fmt"
	"time"

	"github.com/acemq/acemq-flow/broker"
	"github.com/acemq/acemq-flow/patterns"
)

func ExampleNewRequester() {
	ctx := context.Background()
	conn, err := broker.Open(ctx, "memory://")
	if err != nil {
		fmt.Println(err)
		return
	}
	defer conn.Close(ctx)

	catalogue := map[string]int{"X-1": 1299}
	responder, err := patterns.Serve(ctx, conn, "price.requests", func(_ context.Context, m *broker.Message) (any, error) {
		req, err := broker.Decode[map[string]string](m)
		if err != nil {
			return nil, err
		}
		price, ok := catalogue[req["sku"]]
		if !ok {
			return nil, fmt.Errorf("no such sku %q", req["sku"])
		}
		return map[string]int{"price": price}, nil // the answer, not an Ack
	})
	if err != nil {
		fmt.Println(err)
		return
	}

	prices, err := patterns.NewRequester(ctx, conn, "price.requests", 5*time.Second)
	if err != nil {
		fmt.Println(err)
		return
	}
	defer prices.Close(ctx)

	var answer map[string]int
	if err := prices.Call(ctx, map[string]string{"sku": "X-1"}, &answer); err != nil {
		fmt.Println(err)
		return
	}
	fmt.Println("price:", answer["price"])
	fmt.Println(prices.Call(ctx, map[string]string{"sku": "Y-9"}, &answer))
	fmt.Println("answered:", responder.Answered())
	// Output:
	// price: 1299
	// responder at "price.requests" failed: no such sku "Y-9"
	// answered: 2
}
