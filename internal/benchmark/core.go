package benchmark

import (
	"context"
	"errors"
	"fmt"
	"time"

	amqp "github.com/rabbitmq/amqp091-go"

	"github.com/acemq/acemq-flow/broker"
)

// The core figures' load (issue 14): 256-byte persistent messages on a
// quorum queue, 256 confirms in flight from 256 goroutines, consumed with
// prefetch 100.
const (
	CoreBodySize   = 256
	CorePublishers = 256
	CorePrefetch   = 100
)

// noRabbitNote is the note of a figure whose baseline needs RabbitMQ.
const noRabbitNote = "no baseline: amqp091-go needs RabbitMQ (set --url)"

// Core measures confirmed publishing and acknowledged consuming through
// package broker against plain amqp091-go doing the same: N messages of
// CoreBodySize bytes each way on a quorum queue, published by
// CorePublishers goroutines each waiting for its confirm, and consumed
// with prefetch CorePrefetch by one consumer that acknowledges each. Both
// consumers read messages published through broker.
func Core(ctx context.Context, cfg Config) (_ []Result, err error) {
	if cfg, err = cfg.withDefaults(); err != nil {
		return nil, err
	}
	s, err := newScope(ctx, cfg)
	if err != nil {
		return nil, err
	}
	defer s.close(ctx, &err)
	conn, err := s.open(ctx)
	if err != nil {
		return nil, err
	}
	q, err := s.consumerQueue(ctx, "core")
	if err != nil {
		return nil, err
	}
	body := make([]byte, CoreBodySize)
	cfg.step("core: publish through broker")
	pub, err := PublishBroker(ctx, conn, q, body, cfg.N)
	if err != nil {
		return nil, err
	}
	cfg.step("core: consume through broker")
	con, err := ConsumeBroker(ctx, conn, q, cfg.N)
	if err != nil {
		return nil, err
	}
	pubR := figure("core", "confirmed publish", "msg/s", HigherIsBetter, pub.Rate(), pub).withCPU(pub).
		noted(fmt.Sprintf("%d B, %d goroutines each waiting for its confirm", CoreBodySize, CorePublishers))
	conR := figure("core", "acknowledged consume", "msg/s", HigherIsBetter, con.Rate(), con).withCPU(con).
		noted(fmt.Sprintf("prefetch %d, one consumer", CorePrefetch))
	if !cfg.rabbit() {
		return []Result{pubR.noted(noRabbitNote), conR.noted(noRabbitNote)}, nil
	}
	ac, err := s.dial()
	if err != nil {
		return nil, err
	}
	qp, err := s.consumerQueue(ctx, "core-plain")
	if err != nil {
		return nil, err
	}
	cfg.step("core: publish through amqp091-go")
	pubPlain, err := PublishPlain(ctx, ac, qp, body, cfg.N)
	if err != nil {
		return nil, err
	}
	// The plain consumer reads what broker published, as broker's did.
	qc, err := s.consumerQueue(ctx, "core-consume")
	if err != nil {
		return nil, err
	}
	cfg.step("core: consume through amqp091-go")
	if _, err := PublishBroker(ctx, conn, qc, body, cfg.N); err != nil {
		return nil, err
	}
	conPlain, err := ConsumePlain(ctx, ac, qc, cfg.N)
	if err != nil {
		return nil, err
	}
	return []Result{
		pubR.compare("amqp091-go", pubPlain.Rate(), pubPlain, true),
		conR.compare("amqp091-go", conPlain.Rate(), conPlain, true),
	}, nil
}

// PublishBroker publishes n copies of body to queue q through conn from
// CorePublishers goroutines, each call returning once the broker confirmed
// its message.
func PublishBroker(ctx context.Context, conn *broker.Conn, q string, body []byte, n int) (Measurement, error) {
	c := startClock()
	err := runFeed(ctx, n, CorePublishers, func(ctx context.Context, _ int) error {
		if err := conn.Publish(ctx, body, broker.To(q)); err != nil {
			return fmt.Errorf("publish: %w", err)
		}
		return nil
	})
	return c.stop(n, n), err
}

// PublishPlain publishes n copies of body to queue q with amqp091-go from
// CorePublishers goroutines, each on a channel of its own in confirm mode,
// waiting for the confirm of each message: persistent, with a message id
// and a timestamp, as broker publishes.
func PublishPlain(ctx context.Context, ac *amqp.Connection, q string, body []byte, n int) (Measurement, error) {
	chans := make([]*amqp.Channel, CorePublishers)
	defer func() {
		for _, ch := range chans {
			if ch != nil {
				_ = ch.Close()
			}
		}
	}()
	for i := range chans {
		ch, err := ac.Channel()
		if err != nil {
			return Measurement{}, fmt.Errorf("amqp091-go: open channel: %w", err)
		}
		chans[i] = ch
		if err := ch.Confirm(false); err != nil {
			return Measurement{}, fmt.Errorf("amqp091-go: confirm mode: %w", err)
		}
	}
	free := make(chan *amqp.Channel, len(chans))
	for _, ch := range chans {
		free <- ch
	}
	c := startClock()
	err := runFeed(ctx, n, CorePublishers, func(ctx context.Context, _ int) error {
		ch := <-free
		defer func() { free <- ch }()
		return publishConfirmed(ctx, ch, "", q, false, amqp.Publishing{
			DeliveryMode: amqp.Persistent, ContentType: "application/octet-stream", MessageId: broker.NewID(),
			Timestamp: time.Now(), Body: body,
		})
	})
	return c.stop(n, n), err
}

// errNotConfirmed: the broker nacked a plain publish, or its channel closed
// before the confirm came.
var errNotConfirmed = errors.New("amqp091-go: publish not confirmed")

// publishConfirmed publishes msg on ch (in confirm mode) and waits for its
// confirm.
func publishConfirmed(ctx context.Context, ch *amqp.Channel, exchange, key string, mandatory bool, msg amqp.Publishing) error {
	dc, err := ch.PublishWithDeferredConfirmWithContext(ctx, exchange, key, mandatory, false, msg)
	if err != nil {
		return fmt.Errorf("amqp091-go: publish: %w", err)
	}
	ok, err := dc.WaitContext(ctx)
	if err != nil {
		return fmt.Errorf("amqp091-go: confirm: %w", err)
	}
	if !ok {
		return errNotConfirmed
	}
	return nil
}

// ConsumeBroker consumes n messages from q through conn with prefetch
// CorePrefetch, accepting each, and stops the consumer.
func ConsumeBroker(ctx context.Context, conn *broker.Conn, q string, n int) (_ Measurement, err error) {
	cd := newCountdown(n)
	c := startClock()
	k, err := conn.Consume(ctx, q, func(context.Context, *broker.Message) broker.Ack {
		cd.add()
		return broker.Accept()
	}, broker.Prefetch(CorePrefetch), broker.WithRetry(broker.NoRetry()))
	if err != nil {
		return Measurement{}, fmt.Errorf("consume %s: %w", q, err)
	}
	defer func() {
		if cerr := k.Cancel(context.WithoutCancel(ctx)); cerr != nil {
			err = errors.Join(err, fmt.Errorf("stop consuming %s: %w", q, cerr))
		}
	}()
	err = cd.wait(ctx, nil, "consume through broker")
	return c.stop(n, n), err
}

// ConsumePlain consumes n messages from q with amqp091-go, prefetch
// CorePrefetch, acknowledging each, then closes its channel.
func ConsumePlain(ctx context.Context, ac *amqp.Connection, q string, n int) (Measurement, error) {
	ch, err := ac.Channel()
	if err != nil {
		return Measurement{}, fmt.Errorf("amqp091-go: open channel: %w", err)
	}
	if err := ch.Qos(CorePrefetch, 0, false); err != nil {
		_ = ch.Close()
		return Measurement{}, fmt.Errorf("amqp091-go: qos: %w", err)
	}
	cd := newCountdown(n)
	c := startClock()
	deliveries, err := ch.Consume(q, "", false, false, false, false, nil)
	if err != nil {
		_ = ch.Close()
		return Measurement{}, fmt.Errorf("amqp091-go: consume %s: %w", q, err)
	}
	stopped := make(chan struct{})
	go func() {
		defer close(stopped)
		for d := range deliveries {
			if d.Ack(false) == nil {
				cd.add()
			}
		}
	}()
	err = cd.wait(ctx, nil, "consume through amqp091-go")
	m := c.stop(n, n)
	_ = ch.Close() // ends deliveries; what was prefetched goes back
	<-stopped
	return m, err
}
