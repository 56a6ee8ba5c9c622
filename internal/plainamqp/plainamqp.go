// Package plainamqp is the fastest plain amqp091-go code for confirmed
// publishing and acknowledged consuming that we know of: the baseline
// package broker's core figures are measured against (`acemq-flow bench`'s
// core rows, broker's go test benchmarks; docs/performance.md). It is what
// a programmer writing amqp091-go by hand for throughput writes: one
// confirm-mode channel published to from one goroutine with many publishes
// in flight, and one consumer acknowledging each delivery.
package plainamqp

import (
	"context"
	"errors"
	"fmt"
	"strconv"

	amqp "github.com/rabbitmq/amqp091-go"
)

// ContentType is the content type of the messages Publish sends.
const ContentType = "application/octet-stream"

// ErrNotConfirmed is a publish the broker nacked, or whose channel closed
// before its confirm came.
var ErrNotConfirmed = errors.New("amqp091-go: publish not confirmed")

// Publish publishes n copies of body to queue q through the default
// exchange on ch, which must be in confirm mode, from the calling
// goroutine, and returns once every one is confirmed. It keeps window
// publishes unconfirmed: before a publish that would make one more, it waits
// for the confirm of the oldest (a sliding window: the broker always has
// window messages to confirm). Each message is persistent, with content type
// ContentType and a message id (its index, in decimal). It fails on the
// first nack, on ctx's end and on a publish the channel refuses.
func Publish(ctx context.Context, ch *amqp.Channel, q string, body []byte, n, window int) error {
	if window < 1 {
		return fmt.Errorf("amqp091-go: window %d, want at least 1", window)
	}
	ring := make([]*amqp.DeferredConfirmation, min(window, n))
	for i := range n {
		slot := i % len(ring)
		if err := wait(ctx, ring[slot]); err != nil {
			return err
		}
		dc, err := ch.PublishWithDeferredConfirmWithContext(ctx, "", q, false, false, amqp.Publishing{
			DeliveryMode: amqp.Persistent, ContentType: ContentType, MessageId: strconv.Itoa(i), Body: body,
		})
		if err != nil {
			return fmt.Errorf("amqp091-go: publish: %w", err)
		}
		ring[slot] = dc
	}
	for i := range ring {
		// Oldest first: the one after the last slot published is the oldest.
		if err := wait(ctx, ring[(n+i)%len(ring)]); err != nil {
			return err
		}
	}
	return nil
}

// wait waits for dc's confirm (nil: none to wait for).
func wait(ctx context.Context, dc *amqp.DeferredConfirmation) error {
	if dc == nil {
		return nil
	}
	ok, err := dc.WaitContext(ctx)
	if err != nil {
		return fmt.Errorf("amqp091-go: confirm: %w", err)
	}
	if !ok {
		return ErrNotConfirmed
	}
	return nil
}

// Consumer consumes from one queue on a channel of its own, acknowledging
// each delivery (multiple=false) as it arrives. Stop it once it has
// counted what it was to consume.
type Consumer struct {
	ch      *amqp.Channel
	stopped chan struct{}
}

// Consume opens a channel on ac, sets its prefetch and consumes q with
// manual acknowledgements on a goroutine of its own, which acknowledges
// each delivery and then calls each (an atomic count, typically: it must
// not block). It refuses a prefetch outside 1..65535 as the broker does.
func Consume(ac *amqp.Connection, q string, prefetch int, each func()) (*Consumer, error) {
	ch, err := ac.Channel()
	if err != nil {
		return nil, fmt.Errorf("amqp091-go: open channel: %w", err)
	}
	if err := ch.Qos(prefetch, 0, false); err != nil {
		_ = ch.Close()
		return nil, fmt.Errorf("amqp091-go: qos: %w", err)
	}
	deliveries, err := ch.Consume(q, "", false, false, false, false, nil)
	if err != nil {
		_ = ch.Close()
		return nil, fmt.Errorf("amqp091-go: consume %s: %w", q, err)
	}
	c := &Consumer{ch: ch, stopped: make(chan struct{})}
	go func() {
		defer close(c.stopped)
		for d := range deliveries {
			if d.Ack(false) == nil {
				each()
			}
		}
	}()
	return c, nil
}

// Stop closes the consumer's channel, which hands what it had prefetched
// back to the queue and ends its goroutine, and waits for that goroutine.
func (c *Consumer) Stop() {
	_ = c.ch.Close()
	<-c.stopped
}
