package benchmark

import (
	"context"
	"errors"
	"fmt"
	"sync"

	amqp "github.com/rabbitmq/amqp091-go"

	"github.com/acemq/acemq-flow/broker"
	"github.com/acemq/acemq-flow/internal/plainamqp"
)

// The core figures' load (issues 14 and 25): 256-byte persistent messages
// on a quorum queue, 256 publishes awaiting their confirm, consumed with
// prefetch 100.
const (
	CoreBodySize   = 256
	CorePublishers = 256
	CorePrefetch   = 100
)

// noRabbitNote is the note of a figure whose baseline needs RabbitMQ.
const noRabbitNote = "no baseline: amqp091-go needs RabbitMQ (set --url)"

// Core measures confirmed publishing and acknowledged consuming through
// package broker against the fastest plain amqp091-go code (package
// plainamqp): N messages of CoreBodySize bytes each way on a quorum queue.
// broker publishes from CorePublishers goroutines, each calling Publish,
// which returns once the broker confirmed its message; the baseline from
// one goroutine on one confirm-mode channel, keeping CorePublishers
// publishes unconfirmed. Each side then consumes what it published with
// prefetch CorePrefetch, one consumer acknowledging each message.
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
		noted(fmt.Sprintf("%d B; broker: %d goroutines each calling Publish, which waits for its confirm; "+
			"amqp091-go: one goroutine, one confirm channel, %d unconfirmed", CoreBodySize, CorePublishers, CorePublishers))
	conR := figure("core", "acknowledged consume", "msg/s", HigherIsBetter, con.Rate(), con).withCPU(con).
		noted(fmt.Sprintf("prefetch %d, one consumer acknowledging each message (amqp091-go: one ack each; "+
			"broker: acks written together)", CorePrefetch))
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
	cfg.step("core: consume through amqp091-go")
	conPlain, err := ConsumePlain(ctx, ac, qp, cfg.N)
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

// PublishPlain publishes n copies of body to queue q with amqp091-go as
// plainamqp.Publish does: from one goroutine on one channel in confirm
// mode, keeping CorePublishers publishes unconfirmed.
func PublishPlain(ctx context.Context, ac *amqp.Connection, q string, body []byte, n int) (Measurement, error) {
	ch, err := plainChannel(ac, true)
	if err != nil {
		return Measurement{}, err
	}
	defer func() { _ = ch.Close() }()
	c := startClock()
	err = plainamqp.Publish(ctx, ch, q, body, n, CorePublishers)
	return c.stop(n, n), err
}

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
		return plainamqp.ErrNotConfirmed
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

// ConsumePlain consumes n messages from q with amqp091-go as
// plainamqp.Consume does: prefetch CorePrefetch, one consumer
// acknowledging each delivery; then it stops the consumer.
func ConsumePlain(ctx context.Context, ac *amqp.Connection, q string, n int) (Measurement, error) {
	cd := newCountdown(n)
	c := startClock()
	k, err := plainamqp.Consume(ac, q, CorePrefetch, cd.add)
	if err != nil {
		return Measurement{}, err
	}
	err = cd.wait(ctx, nil, "consume through amqp091-go")
	m := c.stop(n, n)
	k.Stop()
	return m, err
}
