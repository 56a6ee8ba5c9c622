package benchmark

import (
	"context"
	"errors"
	"fmt"
	"sync"
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
	cfg, s, err := newScope(ctx, cfg)
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
	return measureCalls(ctx, n, n, CorePublishers, nil, func(ctx context.Context, _ int) error {
		if err := conn.Publish(ctx, body, broker.To(q)); err != nil {
			return fmt.Errorf("publish: %w", err)
		}
		return nil
	})
}

// PublishPlain publishes n copies of body to queue q with amqp091-go from
// CorePublishers goroutines, each on a channel of its own in confirm mode,
// waiting for the confirm of each message: persistent, with a message id
// and a timestamp, as broker publishes.
func PublishPlain(ctx context.Context, ac *amqp.Connection, q string, body []byte, n int) (Measurement, error) {
	free, err := confirmPool(ac, CorePublishers)
	if err != nil {
		return Measurement{}, err
	}
	// Every publisher has put its channel back once measureCalls returns.
	defer closePool(free)
	return measureCalls(ctx, n, n, CorePublishers, nil, func(ctx context.Context, _ int) error {
		ch := <-free
		defer func() { free <- ch }()
		return publishConfirmed(ctx, ch, "", q, false, amqp.Publishing{
			DeliveryMode: amqp.Persistent, ContentType: "application/octet-stream", MessageId: broker.NewID(),
			Timestamp: time.Now(), Body: body,
		})
	})
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

// plainChannel opens a channel on ac, in confirm mode when confirm.
func plainChannel(ac *amqp.Connection, confirm bool) (*amqp.Channel, error) {
	ch, err := ac.Channel()
	if err != nil {
		return nil, fmt.Errorf("amqp091-go: open channel: %w", err)
	}
	if confirm {
		if err := ch.Confirm(false); err != nil {
			_ = ch.Close()
			return nil, fmt.Errorf("amqp091-go: confirm mode: %w", err)
		}
	}
	return ch, nil
}

// confirmPool opens n channels on ac in confirm mode, one per publishing
// goroutine, handed out through the returned pool: a publisher takes one
// and puts it back when its publish is confirmed. On failure it closes
// those it opened.
func confirmPool(ac *amqp.Connection, n int) (chan *amqp.Channel, error) {
	pool := make(chan *amqp.Channel, n)
	for range n {
		ch, err := plainChannel(ac, true)
		if err != nil {
			closePool(pool)
			return nil, err
		}
		pool <- ch
	}
	return pool, nil
}

// closePool closes the channels in pool; call it once every publisher has
// put its channel back.
func closePool(pool chan *amqp.Channel) {
	close(pool)
	for ch := range pool {
		_ = ch.Close()
	}
}

// plainConsumers owns the consuming channels of a plain amqp091-go
// measurement and the goroutines ranging over their deliveries: stop
// closes the channels, which ends the deliveries, and waits for the
// goroutines.
type plainConsumers struct {
	wg    sync.WaitGroup
	chans []*amqp.Channel
}

// consume opens a channel on ac, consuming q with prefetch and manual
// acknowledgements; stop closes it.
func (p *plainConsumers) consume(ac *amqp.Connection, q string, prefetch int) (<-chan amqp.Delivery, error) {
	ch, err := plainChannel(ac, false)
	if err != nil {
		return nil, err
	}
	p.chans = append(p.chans, ch)
	if err := ch.Qos(prefetch, 0, false); err != nil {
		return nil, fmt.Errorf("amqp091-go: qos: %w", err)
	}
	deliveries, err := ch.Consume(q, "", false, false, false, false, nil)
	if err != nil {
		return nil, fmt.Errorf("amqp091-go: consume %s: %w", q, err)
	}
	return deliveries, nil
}

// stop closes the consuming channels and waits for the goroutines started
// with p.wg.Go.
func (p *plainConsumers) stop() {
	for _, ch := range p.chans {
		_ = ch.Close()
	}
	p.wg.Wait()
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
	ch, err := plainChannel(ac, false)
	if err != nil {
		return Measurement{}, err
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
