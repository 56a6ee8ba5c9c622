package patterns_test

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"log/slog"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/acemq/acemq-flow/broker"
	"github.com/acemq/acemq-flow/internal/brokertest"
	"github.com/acemq/acemq-flow/patterns"
)

func TestChainFirstIsOutermost(t *testing.T) {
	t.Parallel()
	var trace []string
	mw := func(name string) broker.Middleware {
		return func(next broker.Handler) broker.Handler {
			return func(ctx context.Context, m *broker.Message) broker.Ack {
				trace = append(trace, name+" in")
				ack := next(ctx, m)
				trace = append(trace, name+" out")
				return ack
			}
		}
	}
	h := patterns.Chain(func(context.Context, *broker.Message) broker.Ack {
		trace = append(trace, "handler")
		return broker.Accept()
	}, mw("outer"), mw("inner"))
	h(t.Context(), &broker.Message{})
	require.Equal(t, []string{"outer in", "inner in", "handler", "inner out", "outer out"}, trace)
	require.Nil(t, patterns.Chain(nil, mw("x")))
	require.Nil(t, patterns.Chain(func(context.Context, *broker.Message) broker.Ack { return broker.Accept() }, nil))
}

func TestWithTimeout(t *testing.T) {
	t.Parallel()
	waitsForCancel := func(ctx context.Context, _ *broker.Message) broker.Ack {
		<-ctx.Done()
		return broker.Accept() // claims success after the deadline
	}
	ack := patterns.WithTimeout(20*time.Millisecond)(waitsForCancel)(t.Context(), &broker.Message{})
	require.Equal(t, broker.OutcomeRetry, ack.Outcome(), "an overrun is a retry whatever the handler said")
	require.ErrorIs(t, ack.Err(), patterns.ErrHandlerTimeout)

	quick := func(context.Context, *broker.Message) broker.Ack { return broker.Reject(errors.New("bad")) }
	ack = patterns.WithTimeout(time.Minute)(quick)(t.Context(), &broker.Message{})
	require.Equal(t, broker.OutcomeReject, ack.Outcome(), "in time, the handler's own decision stands")

	ctx, cancel := context.WithCancel(t.Context())
	cancel()
	ack = patterns.WithTimeout(time.Minute)(waitsForCancel)(ctx, &broker.Message{})
	require.Equal(t, broker.OutcomeAccept, ack.Outcome(), "the consumer's own cancellation is not an overrun")

	returned := make(chan struct{})
	slow := func(ctx context.Context, _ *broker.Message) broker.Ack {
		<-ctx.Done()
		time.Sleep(30 * time.Millisecond) // finishing up after the cancel
		close(returned)
		return broker.Accept()
	}
	patterns.WithTimeout(time.Millisecond)(slow)(t.Context(), &broker.Message{})
	select {
	case <-returned:
	default:
		t.Fatal("WithTimeout returned before the handler did")
	}
	require.NotNil(t, patterns.WithTimeout(0)(quick), "no timeout passes the handler through")
}

func TestWithLogging(t *testing.T) {
	t.Parallel()
	var buf bytes.Buffer
	log := slog.New(slog.NewJSONHandler(&buf, nil))
	h := patterns.WithLogging(log)(func(context.Context, *broker.Message) broker.Ack {
		return broker.Retry(errors.New("warehouse down"))
	})
	h(t.Context(), &broker.Message{Envelope: broker.Envelope{ID: "m-1", Attempt: 2}, Queue: "orders"})
	var line map[string]any
	require.NoError(t, json.Unmarshal(buf.Bytes(), &line))
	require.Equal(t, "WARN", line["level"])
	require.Equal(t, "m-1", line["message_id"])
	require.Equal(t, "orders", line["queue"])
	require.EqualValues(t, 2, line["attempt"])
	require.Equal(t, "retry", line["outcome"])
	require.Equal(t, "warehouse down", line["error"])
}

// TestMiddlewareOnConsumer: a chain given to Consume through broker.Use
// behaves as the wrapped handler would.
func TestMiddlewareOnConsumer(t *testing.T) {
	brokertest.Each(t, func(t *testing.T, h *brokertest.Harness) {
		ctx := brokertest.Ctx(t)
		q := h.Queue("chained")
		conn := h.Open(broker.Config{})
		seen := make(chan int, 8)
		_, err := conn.Consume(ctx, q, func(ctx context.Context, m *broker.Message) broker.Ack {
			seen <- m.Attempt
			if m.Attempt == 1 {
				<-ctx.Done() // overruns
			}
			return broker.Accept()
		}, broker.Use(patterns.WithLogging(conn.Logger()), patterns.WithTimeout(50*time.Millisecond), patterns.WithOrdering(patterns.ByCorrelation())),
			broker.WithRetry(broker.Constant(3, 0)))
		require.NoError(t, err)
		require.NoError(t, conn.Publish(ctx, "x", broker.To(q)))
		require.Equal(t, 1, brokertest.Next(t, seen, 10*time.Second))
		require.Equal(t, 2, brokertest.Next(t, seen, 10*time.Second), "the overrun was retried")
	})
}

func TestThenPublish(t *testing.T) {
	brokertest.Each(t, func(t *testing.T, h *brokertest.Harness) {
		ctx := brokertest.Ctx(t)
		in, out := h.Queue("orders-new"), h.Queue("shipments")
		conn := h.Open(broker.Config{})
		shipped := h.Sink(conn, out)
		next, err := patterns.ThenPublish(conn, func(_ context.Context, m *broker.Message) (any, error) {
			var order map[string]any
			if err := m.Decode(&order); err != nil {
				return nil, err
			}
			if order["digital"] == true {
				return nil, nil
			}
			return map[string]any{"order_id": order["order_id"]}, nil
		}, broker.To(out), broker.Type("shipment.requested"))
		require.NoError(t, err)
		_, err = conn.Consume(ctx, in, next, broker.WithRetry(broker.NoRetry()))
		require.NoError(t, err)

		require.NoError(t, conn.Publish(ctx, map[string]any{"order_id": "o-1", "digital": true}, broker.To(in)))
		require.NoError(t, conn.Publish(ctx, map[string]any{"order_id": "o-2"}, broker.To(in),
			broker.MessageID("order-msg"), broker.CorrelationID("business-2")))
		m := brokertest.Next(t, shipped, 10*time.Second).Msg
		require.JSONEq(t, `{"order_id":"o-2"}`, string(m.Body), "nil published nothing; the next one continued")
		require.Equal(t, "business-2", m.CorrelationID, "the correlation goes forward")
		require.Equal(t, "order-msg", m.CausationID, "the causation records what produced it")
		require.Equal(t, "shipment.requested", m.Type)
		brokertest.Nothing(t, shipped, 200*time.Millisecond)
	})
}

// TestThenPublishUnboundRetries: a destination nothing is bound to
// retries the input rather than the broker dropping the output.
func TestThenPublishUnboundRetries(t *testing.T) {
	brokertest.Each(t, func(t *testing.T, h *brokertest.Harness) {
		ctx := brokertest.Ctx(t)
		in := h.Queue("then-unbound")
		conn := h.Open(broker.Config{})
		attempts := make(chan int, 8)
		next, err := patterns.ThenPublish(conn, func(_ context.Context, m *broker.Message) (any, error) {
			attempts <- m.Attempt
			return "on", nil
		}, broker.To(h.Queue("unbound")))
		require.NoError(t, err)
		_, err = conn.Consume(ctx, in, next, broker.WithRetry(broker.Constant(2, 0)))
		require.NoError(t, err)
		require.NoError(t, conn.Publish(ctx, "x", broker.To(in), broker.MessageID("input")))
		require.Equal(t, 1, brokertest.Next(t, attempts, 10*time.Second))
		require.Equal(t, 2, brokertest.Next(t, attempts, 10*time.Second))
		d := h.Get(in+broker.DeadLetterSuffix, 10*time.Second)
		require.Equal(t, "input", d.MessageID)
		require.Contains(t, d.Headers[broker.HeaderError], "returned")
	})
}

func TestThenPublishRefusesBadArguments(t *testing.T) {
	t.Parallel()
	conn, err := broker.Open(t.Context(), "memory://")
	require.NoError(t, err)
	defer conn.Close(context.Background())
	fn := func(context.Context, *broker.Message) (any, error) { return nil, nil }
	_, err = patterns.ThenPublish(nil, fn, broker.To("q"))
	require.ErrorIs(t, err, broker.ErrInvalidOption)
	_, err = patterns.ThenPublish(conn, nil, broker.To("q"))
	require.ErrorIs(t, err, broker.ErrInvalidOption)
	_, err = patterns.ThenPublish(conn, fn, broker.Header("x-acemq-run-id", "mine"))
	require.ErrorIs(t, err, broker.ErrReservedHeader, "a bad option is reported when the handler is built")
}
