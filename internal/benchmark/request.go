package benchmark

import (
	"context"
	"fmt"
	"sync"
	"time"

	amqp "github.com/rabbitmq/amqp091-go"

	"github.com/acemq/acemq-flow/broker"
	"github.com/acemq/acemq-flow/patterns"
)

// The request figure's load: RequestCallers callers on one requester; the
// responder answers with RequestConcurrency handlers and prefetch
// RequestPrefetch; replies are read with prefetch RequestReplyPrefetch.
const (
	RequestCallers       = 16
	RequestConcurrency   = 16
	RequestPrefetch      = 64
	RequestReplyPrefetch = 100
	// RequestTimeout is how long a call waits for its reply.
	RequestTimeout = 10 * time.Second
)

// requestBody is what every request carries, and its reply echoes.
var requestBody = []byte("ping")

// Request measures request/reply round trips, req/s and latency p50 and
// p99, at RequestCallers callers on one patterns.Requester against a
// patterns responder, on two connections as two services would be; the
// baseline is a plain amqp091-go requester and responder doing the same
// (the request persistent, mandatory and confirmed, the reply too, through
// an exclusive reply queue). A round trip is two messages.
func Request(ctx context.Context, cfg Config) ([]Result, error) {
	cfg, err := cfg.withDefaults()
	if err != nil {
		return nil, err
	}
	cfg.step("request: request/reply through patterns")
	rr, err := RequestReply(ctx, cfg, RequestCallers)
	if err != nil {
		return nil, err
	}
	name := fmt.Sprintf("request/reply, %d callers", RequestCallers)
	rate := figure("request", name, "req/s", HigherIsBetter, rr.Rate(), rr).withCPU(rr).noted("a round trip is 2 messages; baseline: requester and responder in amqp091-go")
	p50 := figure("request", name+", p50", "ms", LowerIsBetter, Millis(rr.Percentile(0.50)), rr)
	p99 := figure("request", name+", p99", "ms", LowerIsBetter, Millis(rr.Percentile(0.99)), rr)
	if !cfg.rabbit() {
		return []Result{rate.noted(noRabbitNote), p50, p99}, nil
	}
	cfg.step("request: request/reply through amqp091-go")
	plain, err := RequestReplyPlain(ctx, cfg, RequestCallers)
	if err != nil {
		return nil, err
	}
	const baseline = "amqp091-go"
	return []Result{
		rate.compare(baseline, plain.Rate(), plain, true),
		p50.compare(baseline, Millis(plain.Percentile(0.50)), plain, false),
		p99.compare(baseline, Millis(plain.Percentile(0.99)), plain, false),
	}, nil
}

// RequestReply makes N round trips from callers goroutines sharing one
// patterns.Requester, answered by a patterns responder (Serve) on another
// connection that echoes the request.
func RequestReply(ctx context.Context, cfg Config, callers int) (_ Measurement, err error) {
	cfg, s, err := newScope(ctx, cfg)
	if err != nil {
		return Measurement{}, err
	}
	defer s.close(ctx, &err)
	serving, err := s.open(ctx)
	if err != nil {
		return Measurement{}, err
	}
	q := s.queue("request")
	responder, err := patterns.Serve(ctx, serving, q, func(_ context.Context, m *broker.Message) (any, error) {
		return m.Body, nil
	}, broker.Concurrency(RequestConcurrency), broker.Prefetch(RequestPrefetch))
	if err != nil {
		return Measurement{}, fmt.Errorf("serve %s: %w", q, err)
	}
	s.closing("close the responder", responder.Close)
	calling, err := s.open(ctx)
	if err != nil {
		return Measurement{}, err
	}
	r, err := patterns.NewRequester(ctx, calling, q, RequestTimeout, patterns.RequestPrefetch(RequestReplyPrefetch))
	if err != nil {
		return Measurement{}, fmt.Errorf("requester: %w", err)
	}
	s.closing("close the requester", r.Close)
	n := cfg.N
	lat := newLatencies(n)
	return measureCalls(ctx, n, 2*n, callers, lat, func(ctx context.Context, _ int) error {
		t0 := time.Now()
		if _, err := r.CallMessage(ctx, requestBody); err != nil {
			return err
		}
		lat.add(time.Since(t0))
		return nil
	})
}

// RequestReplyPlain is RequestReply written with amqp091-go alone: the
// responder consumes a quorum request queue with prefetch RequestPrefetch
// on RequestConcurrency goroutines, each publishing the reply (persistent,
// mandatory, correlation id = the request's message id) and acknowledging
// the request after its confirm; the requester's callers each publish on
// a confirm channel of their own to the request queue, with reply-to its
// exclusive auto-delete reply queue, which one goroutine consumes with
// prefetch RequestReplyPrefetch, handing each reply to its caller.
func RequestReplyPlain(ctx context.Context, cfg Config, callers int) (_ Measurement, err error) {
	cfg, s, err := newScope(ctx, cfg)
	if err != nil {
		return Measurement{}, err
	}
	defer s.close(ctx, &err)
	q, err := s.consumerQueue(ctx, "request-plain")
	if err != nil {
		return Measurement{}, err
	}
	serving, err := s.dial()
	if err != nil {
		return Measurement{}, err
	}
	calling, err := s.dial()
	if err != nil {
		return Measurement{}, err
	}
	var consuming plainConsumers
	defer consuming.stop()

	// The responder.
	requests, err := consuming.consume(serving, q, RequestPrefetch)
	if err != nil {
		return Measurement{}, err
	}
	for range RequestConcurrency {
		pch, err := plainChannel(serving, true)
		if err != nil {
			return Measurement{}, err
		}
		consuming.wg.Go(func() {
			for d := range requests {
				err := publishConfirmed(ctx, pch, "", d.ReplyTo, true, amqp.Publishing{
					DeliveryMode: amqp.Persistent, ContentType: d.ContentType, MessageId: broker.NewID(),
					CorrelationId: d.MessageId, Timestamp: time.Now(), Body: d.Body,
				})
				if err == nil {
					_ = d.Ack(false)
				} else {
					_ = d.Nack(false, true)
				}
			}
		})
	}

	// The requester.
	qch, err := plainChannel(calling, false)
	if err != nil {
		return Measurement{}, err
	}
	consuming.chans = append(consuming.chans, qch)
	rq, err := qch.QueueDeclare("", false, true, true, false, amqp.Table{"x-queue-type": "classic"})
	if err != nil {
		return Measurement{}, fmt.Errorf("amqp091-go: declare the reply queue: %w", err)
	}
	if err := qch.Qos(RequestReplyPrefetch, 0, false); err != nil {
		return Measurement{}, fmt.Errorf("amqp091-go: qos: %w", err)
	}
	replies, err := qch.Consume(rq.Name, "", false, true, false, false, nil)
	if err != nil {
		return Measurement{}, fmt.Errorf("amqp091-go: consume %s: %w", rq.Name, err)
	}
	var mu sync.Mutex
	pending := map[string]chan struct{}{}
	consuming.wg.Go(func() {
		for d := range replies {
			mu.Lock()
			ch, ok := pending[d.CorrelationId]
			delete(pending, d.CorrelationId)
			mu.Unlock()
			_ = d.Ack(false)
			if ok {
				ch <- struct{}{}
			}
		}
	})
	free, err := confirmPool(calling, callers)
	if err != nil {
		return Measurement{}, err
	}
	n := cfg.N
	lat := newLatencies(n)
	return measureCalls(ctx, n, 2*n, callers, lat, func(ctx context.Context, _ int) error {
		ch := <-free
		defer func() { free <- ch }()
		t0 := time.Now()
		id := broker.NewID()
		got := make(chan struct{}, 1)
		mu.Lock()
		pending[id] = got
		mu.Unlock()
		defer func() {
			mu.Lock()
			delete(pending, id)
			mu.Unlock()
		}()
		err := publishConfirmed(ctx, ch, "", q, true, amqp.Publishing{
			DeliveryMode: amqp.Persistent, ContentType: "application/octet-stream", MessageId: id,
			ReplyTo: rq.Name, Timestamp: time.Now(), Body: requestBody,
		})
		if err != nil {
			return err
		}
		wait := time.NewTimer(RequestTimeout)
		defer wait.Stop()
		select {
		case <-got:
			lat.add(time.Since(t0))
			return nil
		case <-wait.C:
			return fmt.Errorf("amqp091-go: no reply to %s within %s", id, RequestTimeout)
		case <-ctx.Done():
			return ctx.Err()
		}
	})
}
