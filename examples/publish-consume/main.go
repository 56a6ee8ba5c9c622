// Publish-consume shows the core of acemq-flow: open a connection, consume
// a queue with a handler, publish a few JSON messages to it, and wait until
// each has been handled. Consume declares the queue (a quorum queue) with
// its .dlq and .parked beside it; Publish returns once the broker has
// confirmed the message.
//
// It runs on the embedded in-process broker unless ACEMQ_URL names a
// RabbitMQ, for example amqp://guest:guest@127.0.0.1:5672/:
//
//	go run ./examples/publish-consume
package main

import (
	"context"
	"errors"
	"fmt"
	"os"
	"os/signal"
	"syscall"
	"time"

	"github.com/acemq/acemq-flow/broker"
)

// queue is the example's queue; it is deleted when the example ends.
const queue = "acemq-example.greetings"

// Greeting is the example's payload, published as JSON.
type Greeting struct {
	To   string `json:"to"`
	Text string `json:"text"`
}

func main() {
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	err := run(ctx)
	stop()
	if err != nil {
		fmt.Fprintln(os.Stderr, "publish-consume:", err)
		os.Exit(1)
	}
}

func run(ctx context.Context) (err error) {
	ctx, cancel := context.WithTimeout(ctx, 30*time.Second)
	defer cancel()
	url := os.Getenv("ACEMQ_URL")
	if url == "" {
		url = "memory://"
	}
	conn, err := broker.Open(ctx, url)
	if err != nil {
		return err
	}
	defer func() { err = errors.Join(err, conn.Close(context.WithoutCancel(ctx))) }()
	fmt.Printf("connected to %s\n", conn.Name())

	// The handler runs on the consumer's goroutine; it hands what it saw to
	// main, which does the printing.
	received := make(chan string)
	handler := broker.Func(func(ctx context.Context, m *broker.Message) error {
		g, err := broker.Decode[Greeting](m)
		if err != nil {
			return err // a *DecodeError: the message is parked, not retried
		}
		line := fmt.Sprintf("received %q for %s (type %s, attempt %d)", g.Text, g.To, m.Type, m.Attempt)
		select {
		case received <- line:
			return nil
		case <-ctx.Done():
			return ctx.Err()
		}
	})
	consumer, err := conn.Consume(ctx, queue, handler, broker.Prefetch(10))
	if err != nil {
		return err
	}
	defer func() {
		err = errors.Join(err, consumer.Cancel(context.WithoutCancel(ctx)))
		for _, q := range []string{queue, queue + broker.DeadLetterSuffix, queue + broker.ParkedSuffix} {
			if _, derr := conn.Transport().DeleteQueue(context.WithoutCancel(ctx), q); derr != nil {
				err = errors.Join(err, fmt.Errorf("delete %s: %w", q, derr))
			}
		}
	}()

	greetings := []Greeting{
		{To: "alice", Text: "hello"},
		{To: "bob", Text: "bonjour"},
		{To: "carol", Text: "hallo"},
	}
	for _, g := range greetings {
		if err := conn.Publish(ctx, g, broker.To(queue), broker.Type("greeting.v1"), broker.Mandatory()); err != nil {
			return err
		}
		fmt.Printf("published %q for %s\n", g.Text, g.To)
	}
	for range greetings {
		select {
		case line := <-received:
			fmt.Println(line)
		case <-ctx.Done():
			return fmt.Errorf("waiting for the greetings: %w", ctx.Err())
		}
	}
	fmt.Printf("all %d greetings handled\n", len(greetings))
	return nil
}
