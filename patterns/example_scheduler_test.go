package patterns_test

import (
	"context"
	"fmt"
	"time"

	"github.com/acemq/acemq-flow/broker"
	"github.com/acemq/acemq-flow/patterns"
)

func ExampleScheduler() {
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	conn, err := broker.Open(ctx, "memory://")
	if err != nil {
		fmt.Println(err)
		return
	}
	defer conn.Close(ctx)

	got := make(chan string, 1)
	if _, err := conn.Consume(ctx, "invoice.due", broker.Func(func(_ context.Context, m *broker.Message) error {
		var invoice string
		if err := m.Decode(&invoice); err != nil {
			return err
		}
		got <- fmt.Sprintf("%s, type %s, headers %v", invoice, m.ContentType, m.Headers)
		return nil
	})); err != nil {
		fmt.Println(err)
		return
	}
	scheduler := patterns.NewScheduler(conn)
	if err := scheduler.Start(ctx); err != nil {
		fmt.Println(err)
		return
	}
	start := time.Now()
	if err := scheduler.In(ctx, 200*time.Millisecond, "invoice i-7", broker.To("invoice.due")); err != nil {
		fmt.Println(err)
		return
	}
	fmt.Println(<-got)
	fmt.Println("not early:", time.Since(start) >= 200*time.Millisecond)
	fmt.Println("scheduled:", scheduler.Stats().Scheduled)
	// Output:
	// invoice i-7, type application/json, headers map[]
	// not early: true
	// scheduled: 1
}
