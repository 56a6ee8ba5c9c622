package broker_test

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/acemq/acemq-flow/broker"
)

type order struct {
	ID    string `json:"id"`
	Items int    `json:"items"`
}

// Publishing and consuming: the handler sees the typed envelope and decodes
// the payload; returning nil accepts the message.
func ExampleConn_Consume() {
	ctx := context.Background()
	conn, err := broker.Open(ctx, "memory://") // or amqp://guest:guest@127.0.0.1:5672/
	if err != nil {
		fmt.Println(err)
		return
	}
	defer conn.Close(ctx)

	done := make(chan struct{})
	_, err = conn.Consume(ctx, "orders.new", broker.Func(func(ctx context.Context, m *broker.Message) error {
		defer close(done)
		o, err := broker.Decode[order](m)
		if err != nil {
			return err // parked: a body that will not decode never will
		}
		fmt.Printf("%s: order %s with %d items, attempt %d\n", m.Type, o.ID, o.Items, m.Attempt)
		return nil
	}), broker.Prefetch(20))
	if err != nil {
		fmt.Println(err)
		return
	}
	err = conn.Publish(ctx, order{ID: "o-1", Items: 3}, broker.To("orders.new"), broker.Type("order.placed.v2"))
	if err != nil {
		fmt.Println(err)
		return
	}
	<-done
	// Output: order.placed.v2: order o-1 with 3 items, attempt 1
}

// A failing handler is retried through the scheduler ladder, then given up
// into the queue's .dlq with the reason in x-acemq-error.
func ExampleWithRetry() {
	ctx := context.Background()
	conn, err := broker.Open(ctx, "memory://")
	if err != nil {
		fmt.Println(err)
		return
	}
	defer conn.Close(ctx)

	attempts := make(chan int, 3)
	_, err = conn.Consume(ctx, "payments", broker.Func(func(ctx context.Context, m *broker.Message) error {
		attempts <- m.Attempt
		return errors.New("gateway timed out")
	}), broker.WithRetry(broker.Constant(2, 0)))
	if err != nil {
		fmt.Println(err)
		return
	}
	if err := conn.Publish(ctx, "charge", broker.To("payments")); err != nil {
		fmt.Println(err)
		return
	}
	fmt.Println("attempt", <-attempts)
	fmt.Println("attempt", <-attempts)
	for {
		d, err := conn.Transport().Get(ctx, "payments.dlq")
		if err != nil {
			fmt.Println(err)
			return
		}
		if d != nil {
			fmt.Println("dead-lettered:", d.Headers[broker.HeaderError])
			_ = d.Ack()
			return
		}
		time.Sleep(10 * time.Millisecond)
	}
	// Output:
	// attempt 1
	// attempt 2
	// dead-lettered: gateway timed out (2 of 2 attempts used)
}

// Publishing mandatory turns "nothing is bound there" into an error instead
// of a message the broker confirms and drops.
func ExampleMandatory() {
	ctx := context.Background()
	conn, err := broker.Open(ctx, "memory://")
	if err != nil {
		fmt.Println(err)
		return
	}
	defer conn.Close(ctx)
	err = conn.Publish(ctx, "hello", broker.To("nobody.listens"), broker.Mandatory())
	fmt.Println(errors.Is(err, broker.ErrUnroutable))
	// Output: true
}
