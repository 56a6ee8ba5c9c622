// Retry-dead-letter shows what becomes of a message its handler keeps
// failing on. Each failure sends it through the scheduler ladder back to
// its queue with x-acemq-attempt increased (the handler sees attempt 1, 2,
// 3); when the retry policy is spent, it is given up into the queue's .dlq
// with the reason in x-acemq-error. The example then reads it back from
// there. A handler that knows no retry can help returns broker.Fatal(err)
// instead, and the message goes to the .dlq at once.
//
// It runs on the embedded in-process broker unless ACEMQ_URL names a
// RabbitMQ, for example amqp://guest:guest@127.0.0.1:5672/:
//
//	go run ./examples/retry-dead-letter
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
const queue = "acemq-example.invoices"

// attempts is how many deliveries the retry policy allows.
const attempts = 3

// Invoice is the example's payload, published as JSON.
type Invoice struct {
	Number string `json:"number"`
	Amount int    `json:"amount_cents"`
}

// errUnavailable is the handler's failure, the same every time.
var errUnavailable = errors.New("ledger service unavailable")

func main() {
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	err := run(ctx)
	stop()
	if err != nil {
		fmt.Fprintln(os.Stderr, "retry-dead-letter:", err)
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

	// The handler reports each attempt to main, then fails.
	tried := make(chan int)
	handler := broker.Func(func(ctx context.Context, m *broker.Message) error {
		select {
		case tried <- m.Attempt:
		case <-ctx.Done():
			return ctx.Err()
		}
		return fmt.Errorf("book invoice: %w", errUnavailable)
	})
	// One second is the shortest delay the ladder can honour.
	policy := broker.Exponential(attempts, time.Second)
	consumer, err := conn.Consume(ctx, queue, handler, broker.WithRetry(policy))
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

	start := time.Now()
	invoice := Invoice{Number: "INV-7", Amount: 4200}
	if err := conn.Publish(ctx, invoice, broker.To(queue), broker.Type("invoice.issued.v1"), broker.Mandatory()); err != nil {
		return err
	}
	fmt.Printf("published invoice %s; retry policy: %s\n", invoice.Number, policy)
	for range attempts {
		select {
		case attempt := <-tried:
			fmt.Printf("%5.1fs  attempt %d failed: %v\n", time.Since(start).Seconds(), attempt, errUnavailable)
		case <-ctx.Done():
			return fmt.Errorf("waiting for the attempts: %w", ctx.Err())
		}
	}

	// Cancel lets the last handler's give-up finish: once it returns, the
	// invoice is confirmed in the .dlq.
	if err := consumer.Cancel(ctx); err != nil {
		return err
	}
	dlq := queue + broker.DeadLetterSuffix
	d, err := conn.Transport().Get(ctx, dlq)
	if err != nil {
		return fmt.Errorf("read %s: %w", dlq, err)
	}
	if d == nil {
		return fmt.Errorf("%s is empty: the invoice should be there", dlq)
	}
	if err := d.Ack(); err != nil {
		return fmt.Errorf("acknowledge the dead letter: %w", err)
	}
	fmt.Printf("given up into %s: %s\n", dlq, d.Body)
	for _, h := range []string{broker.HeaderError, broker.HeaderQueue, broker.HeaderAttempt} {
		fmt.Printf("  %s = %v\n", h, d.Headers[h])
	}
	return nil
}
