package patterns_test

import (
	"context"
	"fmt"
	"log/slog"
	"os"
	"time"

	"github.com/acemq/acemq-flow/broker"
	"github.com/acemq/acemq-flow/patterns"
)

func ExampleChain() {
	logger := slog.New(slog.NewTextHandler(os.Stdout, &slog.HandlerOptions{
		ReplaceAttr: func(_ []string, a slog.Attr) slog.Attr {
			if a.Key == slog.TimeKey || a.Key == "took" {
				return slog.Attr{} // left out so the output is the same every run
			}
			return a
		},
	}))
	slow := func(ctx context.Context, _ *broker.Message) broker.Ack {
		<-ctx.Done() // overruns its 10 ms
		return broker.Accept()
	}
	h := patterns.Chain(slow, patterns.WithLogging(logger), patterns.WithTimeout(10*time.Millisecond))
	ack := h(context.Background(), &broker.Message{Envelope: broker.Envelope{ID: "m-1", Attempt: 1}, Queue: "orders.new"})
	fmt.Println(ack.Outcome())
	// Output:
	// level=WARN msg="message handled" message_id=m-1 queue=orders.new attempt=1 outcome=retry error="handler overran its timeout (10ms)"
	// retry
}

func ExampleThenPublish() {
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	conn, err := broker.Open(ctx, "memory://")
	if err != nil {
		fmt.Println(err)
		return
	}
	defer conn.Close(ctx)

	shipped := make(chan string, 1)
	if _, err := conn.Consume(ctx, "shipment.requested", broker.Func(func(_ context.Context, m *broker.Message) error {
		shipped <- string(m.Body) + " caused by " + m.CausationID
		return nil
	})); err != nil {
		fmt.Println(err)
		return
	}
	next, err := patterns.ThenPublish(conn, func(_ context.Context, m *broker.Message) (any, error) {
		var order map[string]any
		if err := m.Decode(&order); err != nil {
			return nil, err
		}
		if order["digital"] == true {
			return nil, nil // nothing to ship: accepted, nothing published
		}
		return map[string]any{"order_id": order["order_id"]}, nil
	}, broker.To("shipment.requested"))
	if err != nil {
		fmt.Println(err)
		return
	}
	if _, err := conn.Consume(ctx, "orders.new", next); err != nil {
		fmt.Println(err)
		return
	}
	if err := conn.Publish(ctx, map[string]any{"order_id": "o-9"}, broker.To("orders.new"), broker.MessageID("order-9")); err != nil {
		fmt.Println(err)
		return
	}
	fmt.Println(<-shipped)
	// Output:
	// {"order_id":"o-9"} caused by order-9
}
