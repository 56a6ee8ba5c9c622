package patterns_test

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"strconv"
	"sync"
	"testing"
	"time"

	amqp "github.com/rabbitmq/amqp091-go"
	"github.com/stretchr/testify/require"
	"go.opentelemetry.io/otel/attribute"
	sdkmetric "go.opentelemetry.io/otel/sdk/metric"
	"go.opentelemetry.io/otel/sdk/metric/metricdata"

	"github.com/acemq/acemq-flow/broker"
	"github.com/acemq/acemq-flow/internal/brokertest"
	"github.com/acemq/acemq-flow/patterns"
)

type requestPrice struct {
	SKU string `json:"sku"`
	N   int    `json:"n"`
}

// requestDouble answers {"n": 2n} and fails for sku "boom".
func requestDouble(_ context.Context, m *broker.Message) (any, error) {
	req, err := broker.Decode[requestPrice](m)
	if err != nil {
		return nil, err
	}
	if req.SKU == "boom" {
		return nil, errors.New("catalogue unavailable")
	}
	return requestPrice{SKU: req.SKU, N: 2 * req.N}, nil
}

func TestRequestReplyRoundTrip(t *testing.T) {
	brokertest.Each(t, func(t *testing.T, h *brokertest.Harness) {
		ctx := brokertest.Ctx(t)
		reader := sdkmetric.NewManualReader()
		conn := h.Open(broker.Config{MeterProvider: sdkmetric.NewMeterProvider(sdkmetric.WithReader(reader))})
		q := h.Queue("price")
		responder, err := patterns.Serve(ctx, conn, q, requestDouble)
		require.NoError(t, err)
		prices, err := patterns.NewRequester(ctx, conn, q, 5*time.Second)
		require.NoError(t, err)
		h.DeleteLater(prices.ReplyQueue())

		var out requestPrice
		require.NoError(t, prices.Call(ctx, requestPrice{SKU: "X-1", N: 21}, &out))
		require.Equal(t, requestPrice{SKU: "X-1", N: 42}, out)
		require.Equal(t, int64(1), responder.Answered(), "counted before the reply was published")

		reply, err := prices.CallMessage(ctx, requestPrice{SKU: "X-2", N: 1}, broker.MessageID("req-7"), broker.CorrelationID("biz-7"))
		require.NoError(t, err)
		require.Equal(t, "req-7", reply.CausationID, "matched by causation = the request's id")
		require.Equal(t, "biz-7", reply.CorrelationID, "the request's correlation carried")

		start := time.Now()
		err = prices.Call(ctx, requestPrice{SKU: "boom"}, &out)
		var failed *patterns.ResponderFailed
		require.ErrorAs(t, err, &failed)
		require.Equal(t, "catalogue unavailable", failed.Message)
		require.Less(t, time.Since(start), time.Second, "a failure comes back, not a timeout")
		require.Equal(t, int64(3), responder.Answered())
		require.Never(t, func() bool { return responder.Answered() > 3 }, 1500*time.Millisecond, 50*time.Millisecond,
			"a failed request was answered, so it is settled, never retried (a retry would answer twice)")

		require.NoError(t, prices.Close(ctx))
		require.NoError(t, prices.Close(ctx), "idempotent")
		_, err = h.Admin.Transport().Inspect(ctx, prices.ReplyQueue())
		require.Error(t, err, "the reply queue went with the requester")
		err = prices.Call(ctx, requestPrice{SKU: "X-1"}, &out)
		require.ErrorIs(t, err, broker.ErrClosed)
		require.NoError(t, responder.Close(ctx))

		var rm metricdata.ResourceMetrics
		require.NoError(t, reader.Collect(ctx, &rm))
		counts := map[string]int64{}
		durations := uint64(0)
		for _, sm := range rm.ScopeMetrics {
			for _, m := range sm.Metrics {
				switch d := m.Data.(type) {
				case metricdata.Sum[int64]:
					if m.Name == "acemq.request.total" {
						for _, p := range d.DataPoints {
							v, _ := p.Attributes.Value("outcome")
							counts[v.AsString()] += p.Value
						}
					}
				case metricdata.Histogram[float64]:
					if m.Name == "acemq.request.duration" {
						for _, p := range d.DataPoints {
							durations += p.Count
						}
					}
				}
			}
		}
		require.Equal(t, map[string]int64{patterns.RequestOutcomeAnswered: 2, patterns.RequestOutcomeFailed: 1, patterns.RequestOutcomeError: 1}, counts)
		require.Equal(t, uint64(4), durations)
	})
}

// TestResponderSkipsRequestsWhoseCallerGaveUp: a request that expired
// while it waited in the responder's prefetch (where the broker no longer
// expires it) is not worked on; one still wanted runs under its caller's
// deadline.
func TestResponderSkipsRequestsWhoseCallerGaveUp(t *testing.T) {
	brokertest.Each(t, func(t *testing.T, h *brokertest.Harness) {
		ctx := brokertest.Ctx(t)
		reader := sdkmetric.NewManualReader()
		conn := h.Open(broker.Config{MeterProvider: sdkmetric.NewMeterProvider(sdkmetric.WithReader(reader))})
		q := h.Queue("busy")
		release := make(chan struct{})
		ran := make(chan string, 10)
		deadlines := make(chan bool, 10)
		_, err := patterns.Serve(ctx, conn, q, func(ctx context.Context, m *broker.Message) (any, error) {
			body := string(m.Body)
			ran <- body
			_, ok := ctx.Deadline()
			deadlines <- ok
			if body == `"slow"` {
				<-release
			}
			return body, nil
		}, broker.Concurrency(1))
		require.NoError(t, err)
		r, err := patterns.NewRequester(ctx, conn, q, 10*time.Second)
		require.NoError(t, err)
		h.DeleteLater(r.ReplyQueue())
		defer r.Close(ctx)

		slow := make(chan error, 1)
		go func() { slow <- r.Call(ctx, "slow", nil) }()
		require.Equal(t, `"slow"`, brokertest.Next(t, ran, 5*time.Second))
		require.True(t, <-deadlines, "the responder works under its caller's deadline")
		short, cancel := context.WithTimeout(ctx, 100*time.Millisecond)
		defer cancel()
		require.ErrorIs(t, r.Call(short, "late", nil), patterns.ErrRequestTimedOut)
		time.Sleep(400 * time.Millisecond) // past the late request's expiry and the grace for clocks
		close(release)
		require.NoError(t, <-slow)

		total := func() int64 {
			var rm metricdata.ResourceMetrics
			require.NoError(t, reader.Collect(ctx, &rm))
			return pipelineSum(rm, "acemq.consume.total", attribute.String("queue", q), attribute.String("outcome", patterns.RequestOutcomeExpired))
		}
		require.Eventually(t, func() bool { return total() == 1 }, 5*time.Second, 10*time.Millisecond)
		brokertest.Nothing(t, ran, 100*time.Millisecond)
		require.Zero(t, h.Depth(q))
		require.Zero(t, h.Depth(q+broker.DeadLetterSuffix))
	})
}

func TestRequestTimesOutAndExpires(t *testing.T) {
	brokertest.Each(t, func(t *testing.T, h *brokertest.Harness) {
		ctx := brokertest.Ctx(t)
		conn := h.Open(broker.Config{})
		q := h.Queue("nobody")
		require.NoError(t, conn.Declare(ctx, broker.Topology{Queues: []broker.Queue{broker.QuorumQueue(q, nil)}}))
		r, err := patterns.NewRequester(ctx, conn, q, 200*time.Millisecond)
		require.NoError(t, err)
		h.DeleteLater(r.ReplyQueue())
		defer r.Close(ctx)

		start := time.Now()
		err = r.Call(ctx, "anyone?", nil)
		require.ErrorIs(t, err, patterns.ErrRequestTimedOut)
		require.ErrorIs(t, err, context.DeadlineExceeded)
		require.Less(t, time.Since(start), 2*time.Second)

		short, cancel := context.WithTimeout(ctx, 50*time.Millisecond)
		defer cancel()
		require.ErrorIs(t, r.Call(short, "sooner", nil), patterns.ErrRequestTimedOut, "the caller's deadline counts too")

		cancelled, cancelNow := context.WithCancel(ctx)
		cancelNow()
		err = r.Call(cancelled, "never", nil)
		require.ErrorIs(t, err, context.Canceled)
		require.NotErrorIs(t, err, patterns.ErrRequestTimedOut)

		// Nobody answered: the requests carry an expiration no longer than
		// the wait, so the broker discards them instead of a responder
		// working on them later for nobody.
		require.Eventually(t, func() bool { return h.Depth(q) == 0 }, 10*time.Second, 20*time.Millisecond,
			"expired requests leave the queue")

		// Replies are matched by the request's id: a second call under an
		// id still waiting is refused.
		patient, err := patterns.NewRequester(ctx, conn, q, time.Second)
		require.NoError(t, err)
		h.DeleteLater(patient.ReplyQueue())
		defer patient.Close(ctx)
		waiting := make(chan error, 1)
		go func() { waiting <- patient.Call(ctx, "first", nil, broker.MessageID("same-id")) }()
		h.WaitDepth(q, 1, 5*time.Second) // sent, so waiting under its id
		require.ErrorIs(t, patient.Call(ctx, "second", nil, broker.MessageID("same-id")), broker.ErrInvalidOption)
		require.ErrorIs(t, <-waiting, patterns.ErrRequestTimedOut)

		nowhere, err := patterns.NewRequester(ctx, conn, q+".missing", time.Second)
		require.NoError(t, err)
		h.DeleteLater(nowhere.ReplyQueue())
		defer nowhere.Close(ctx)
		require.ErrorIs(t, nowhere.Call(ctx, "to nowhere", nil), broker.ErrUnroutable, "a request nothing receives fails at once")
		_, err = patterns.NewRequester(ctx, conn, "", time.Second)
		require.ErrorIs(t, err, broker.ErrInvalidOption)
		_, err = patterns.NewRequester(ctx, conn, q, 0)
		require.ErrorIs(t, err, broker.ErrInvalidOption)
	})
}

func TestRequestWithoutReplyAddressIsDeadLettered(t *testing.T) {
	brokertest.Each(t, func(t *testing.T, h *brokertest.Harness) {
		ctx := brokertest.Ctx(t)
		conn := h.Open(broker.Config{})
		q := h.Queue("noreply")
		responder, err := patterns.Serve(ctx, conn, q, requestDouble)
		require.NoError(t, err)
		require.NoError(t, conn.Publish(ctx, requestPrice{SKU: "X-1"}, broker.To(q), broker.MessageID("lost-1")))
		require.Eventually(t, func() bool { return h.Depth(q+broker.DeadLetterSuffix) == 1 }, 10*time.Second, 20*time.Millisecond)
		require.Equal(t, int64(1), responder.Unanswerable())
		require.Zero(t, responder.Answered())
		d, err := h.Admin.Transport().Get(ctx, q+broker.DeadLetterSuffix)
		require.NoError(t, err)
		require.NotNil(t, d)
		require.Equal(t, "lost-1", d.MessageID)
		require.Contains(t, d.Headers[broker.HeaderError], "no reply address")
		require.NoError(t, d.Ack())
	})
}

func TestRequestConcurrentCallers(t *testing.T) {
	brokertest.Each(t, func(t *testing.T, h *brokertest.Harness) {
		ctx := brokertest.Ctx(t)
		conn := h.Open(broker.Config{})
		q := h.Queue("concurrent")
		_, err := patterns.Serve(ctx, conn, q, requestDouble, broker.Concurrency(8))
		require.NoError(t, err)
		r, err := patterns.NewRequester(ctx, conn, q, 10*time.Second)
		require.NoError(t, err)
		h.DeleteLater(r.ReplyQueue())
		defer r.Close(ctx)

		const callers = 16
		errs := make([]error, callers)
		var wg sync.WaitGroup
		for i := range callers {
			wg.Go(func() {
				for j := range 10 {
					n := i*100 + j
					var out requestPrice
					if err := r.Call(ctx, requestPrice{SKU: strconv.Itoa(n), N: n}, &out); err != nil {
						errs[i] = err
						return
					}
					if out != (requestPrice{SKU: strconv.Itoa(n), N: 2 * n}) {
						errs[i] = fmt.Errorf("caller %d asked %d, got %+v", i, n, out)
						return
					}
				}
			})
		}
		wg.Wait()
		for _, err := range errs {
			require.NoError(t, err)
		}
	})
}

func TestReplyAddressHeaderFirst(t *testing.T) {
	t.Parallel()
	m := &broker.Message{Headers: broker.Table{broker.HeaderReplyTo: "from-header"}}
	m.ReplyTo = "from-property"
	require.Equal(t, "from-header", patterns.ReplyAddress(m))
	m.Headers = broker.Table{broker.HeaderReplyTo: []byte("bytes-header")}
	require.Equal(t, "bytes-header", patterns.ReplyAddress(m))
	m.Headers = nil
	require.Equal(t, "from-property", patterns.ReplyAddress(m))
	m.ReplyTo = ""
	require.Empty(t, patterns.ReplyAddress(m))
}

// TestRequestInteropPlainClient: a client that sets only AMQP's reply_to
// property, as the Java library did, gets its answer, matched by the
// causation header and carrying its correlation id.
func TestRequestInteropPlainClient(t *testing.T) {
	brokertest.OnRabbit(t, func(t *testing.T, h *brokertest.Harness) {
		ctx := brokertest.Ctx(t)
		conn := h.Open(broker.Config{})
		q := h.Queue("interop")
		_, err := patterns.Serve(ctx, conn, q, requestDouble)
		require.NoError(t, err)

		ch := h.Plain()
		replies, err := ch.QueueDeclare("", false, true, true, false, nil)
		require.NoError(t, err)
		got, err := ch.Consume(replies.Name, "", true, true, false, false, nil)
		require.NoError(t, err)
		require.NoError(t, ch.PublishWithContext(ctx, "", q, false, false, amqp.Publishing{
			ContentType:   "application/json",
			MessageId:     "java-req-1",
			CorrelationId: "java-corr-1",
			ReplyTo:       replies.Name,
			Body:          []byte(`{"sku":"X-1","n":5}`),
		}))
		d := brokertest.Next(t, got, 10*time.Second)
		require.Equal(t, "java-req-1", d.Headers[broker.HeaderCausationID])
		require.Equal(t, "java-corr-1", d.CorrelationId)
		var out requestPrice
		require.NoError(t, json.Unmarshal(d.Body, &out))
		require.Equal(t, requestPrice{SKU: "X-1", N: 10}, out)
	})
}

// TestRequestFailedReplyInAnyContentType: a responder of another library
// whose codec stamps every reply application/json answers a failure with
// acemq-error and an empty body. The caller gets *ResponderFailed at once,
// since acemq-error is read before anything is decoded (docs/wire.md,
// "Request / reply"); and a successful reply whose body does not decode
// comes back to the caller as a *broker.DecodeError, not as a timeout.
func TestRequestFailedReplyInAnyContentType(t *testing.T) {
	brokertest.OnRabbit(t, func(t *testing.T, h *brokertest.Harness) {
		ctx := brokertest.Ctx(t)
		conn := h.Open(broker.Config{})
		q := h.Queue("foreign-responder")
		h.Declare(q)
		prices, err := patterns.NewRequester(ctx, conn, q, 10*time.Second)
		require.NoError(t, err)
		h.DeleteLater(prices.ReplyQueue())
		t.Cleanup(func() { _ = prices.Close(context.Background()) })

		ch := h.Plain()
		requests, err := ch.Consume(q, "", true, true, false, false, nil)
		require.NoError(t, err)
		answer := func(headers amqp.Table, body []byte) {
			t.Helper()
			d := brokertest.Next(t, requests, 5*time.Second)
			headers[broker.HeaderCausationID] = d.MessageId
			require.NoError(t, ch.PublishWithContext(ctx, "", d.ReplyTo, true, false, amqp.Publishing{
				ContentType: "application/json", CorrelationId: d.CorrelationId, Headers: headers, Body: body,
			}))
		}
		call := func() (<-chan error, time.Time) {
			done := make(chan error, 1)
			go func() {
				var out requestPrice
				done <- prices.Call(ctx, requestPrice{SKU: "X-1", N: 1}, &out)
			}()
			return done, time.Now()
		}

		done, start := call()
		answer(amqp.Table{broker.HeaderReplyError: "catalogue unavailable"}, nil)
		err = brokertest.Next(t, done, 5*time.Second)
		var failed *patterns.ResponderFailed
		require.ErrorAs(t, err, &failed, "got %v", err)
		require.Equal(t, "catalogue unavailable", failed.Message)
		require.Less(t, time.Since(start), 5*time.Second, "a failure comes back, not a timeout")

		done, start = call()
		answer(amqp.Table{}, []byte("{not json"))
		err = brokertest.Next(t, done, 5*time.Second)
		var undecodable *broker.DecodeError
		require.ErrorAs(t, err, &undecodable, "got %v", err)
		require.NotErrorIs(t, err, patterns.ErrRequestTimedOut)
		require.Less(t, time.Since(start), 5*time.Second, "an undecodable reply comes back, not a timeout")
	})
}
