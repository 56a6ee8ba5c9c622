package broker_test

import (
	"context"
	"errors"
	"fmt"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/acemq/acemq-flow/broker"
	"github.com/acemq/acemq-flow/broker/transport"
	"github.com/acemq/acemq-flow/internal/brokertest"
)

func TestPublishConsumeEnvelope(t *testing.T) {
	brokertest.Each(t, func(t *testing.T, h *brokertest.Harness) {
		ctx := brokertest.Ctx(t)
		conn := h.Open(broker.Config{})
		q := h.Queue("envelope")
		handler, got := brokertest.Recorder(func(*broker.Message) broker.Ack { return broker.Accept() })
		_, err := conn.Consume(ctx, q, handler, broker.WithRetry(broker.NoRetry()))
		require.NoError(t, err)

		before := time.Now().Truncate(time.Millisecond)
		require.NoError(t, conn.Publish(ctx, map[string]any{"order_id": "o-1"},
			broker.To(q), broker.Type("order.placed.v2"), broker.Header("tenant", "acme")))
		s := brokertest.Next(t, got, 5*time.Second)
		m := s.Msg
		require.Equal(t, "o-1", s.Payload["order_id"])
		require.NotEmpty(t, m.ID)
		require.Equal(t, m.ID, m.CorrelationID, "a message with no cause is its own correlation")
		require.Empty(t, m.CausationID)
		require.Equal(t, "order.placed.v2", m.Type)
		require.Equal(t, broker.ContentTypeJSON, m.ContentType)
		require.Equal(t, 1, m.Attempt)
		require.False(t, m.FirstSeen.Before(before), "first seen %s before publish %s", m.FirstSeen, before)
		require.WithinDuration(t, time.Now(), m.Timestamp, 5*time.Second)
		require.Equal(t, q, m.Queue)
		require.Equal(t, broker.Table{"tenant": "acme"}, m.Headers, "only application headers reach the handler")
	})
}

func TestCorrelationCarriedFromHandledMessage(t *testing.T) {
	brokertest.Each(t, func(t *testing.T, h *brokertest.Harness) {
		ctx := brokertest.Ctx(t)
		conn := h.Open(broker.Config{})
		first, second := h.Queue("cause"), h.Queue("effect")
		handler, got := brokertest.Recorder(func(*broker.Message) broker.Ack { return broker.Accept() })
		_, err := conn.Consume(ctx, second, handler, broker.WithRetry(broker.NoRetry()))
		require.NoError(t, err)
		_, err = conn.Consume(ctx, first, broker.Func(func(ctx context.Context, m *broker.Message) error {
			return conn.Publish(ctx, "next", broker.To(second))
		}), broker.WithRetry(broker.NoRetry()))
		require.NoError(t, err)

		require.NoError(t, conn.Publish(ctx, "start", broker.To(first), broker.MessageID("cause-1"), broker.CorrelationID("business-7")))
		m := brokertest.Next(t, got, 5*time.Second).Msg
		require.Equal(t, "business-7", m.CorrelationID)
		require.Equal(t, "cause-1", m.CausationID)
		require.NotEqual(t, "cause-1", m.ID)
	})
}

func TestRetryThenSuccess(t *testing.T) {
	brokertest.Each(t, func(t *testing.T, h *brokertest.Harness) {
		ctx := brokertest.Ctx(t)
		conn := h.Open(broker.Config{})
		q := h.Queue("retry")
		handler, got := brokertest.Recorder(func(m *broker.Message) broker.Ack {
			if m.Attempt < 3 {
				return broker.Retry(fmt.Errorf("flaky on attempt %d", m.Attempt))
			}
			return broker.Accept()
		})
		_, err := conn.Consume(ctx, q, handler, broker.WithRetry(broker.Constant(5, 0)))
		require.NoError(t, err)
		require.NoError(t, conn.Publish(ctx, map[string]string{"n": "1"}, broker.To(q), broker.Header("tenant", "acme")))

		first := brokertest.Next(t, got, 5*time.Second).Msg
		second := brokertest.Next(t, got, 5*time.Second).Msg
		third := brokertest.Next(t, got, 5*time.Second).Msg
		require.Equal(t, []int{1, 2, 3}, []int{first.Attempt, second.Attempt, third.Attempt})
		for _, m := range []*broker.Message{second, third} {
			require.Equal(t, first.ID, m.ID, "a retry keeps the message id")
			require.Equal(t, first.CorrelationID, m.CorrelationID)
			require.True(t, first.FirstSeen.Equal(m.FirstSeen), "first seen is never reset")
			require.Equal(t, broker.ContentTypeJSON, m.ContentType, "the content type is restored after the ladder")
			require.Equal(t, broker.Table{"tenant": "acme"}, m.Headers, "nothing of the ladder reaches the handler")
		}
		brokertest.Nothing(t, got, 300*time.Millisecond)
		require.Equal(t, 0, h.Depth(q+broker.DeadLetterSuffix))
	})
}

func TestExhaustedRetriesGoToDLQ(t *testing.T) {
	brokertest.Each(t, func(t *testing.T, h *brokertest.Harness) {
		ctx := brokertest.Ctx(t)
		conn := h.Open(broker.Config{})
		q := h.Queue("exhaust")
		handler, got := brokertest.Recorder(func(m *broker.Message) broker.Ack {
			return broker.Retry(errors.New("warehouse unreachable"))
		})
		_, err := conn.Consume(ctx, q, handler, broker.WithRetry(broker.Constant(2, 0)))
		require.NoError(t, err)
		require.NoError(t, conn.Publish(ctx, "order", broker.To(q), broker.MessageID("m-exhaust")))

		require.Equal(t, 1, brokertest.Next(t, got, 5*time.Second).Msg.Attempt)
		require.Equal(t, 2, brokertest.Next(t, got, 5*time.Second).Msg.Attempt)
		d := h.Get(q+broker.DeadLetterSuffix, 5*time.Second)
		require.Equal(t, "m-exhaust", d.MessageID)
		require.Contains(t, d.Headers[broker.HeaderError], "warehouse unreachable")
		require.Contains(t, d.Headers[broker.HeaderError], "2 of 2 attempts")
		require.Equal(t, q, d.Headers[broker.HeaderQueue])
		require.NotContains(t, d.Headers, "x-death")
		require.NotContains(t, d.Headers, broker.HeaderScheduleDueAt)
		brokertest.Nothing(t, got, 200*time.Millisecond)
	})
}

func TestFatalGoesStraightToDLQ(t *testing.T) {
	brokertest.Each(t, func(t *testing.T, h *brokertest.Harness) {
		ctx := brokertest.Ctx(t)
		conn := h.Open(broker.Config{})
		q := h.Queue("fatal")
		calls := make(chan int, 10)
		_, err := conn.Consume(ctx, q, broker.Func(func(ctx context.Context, m *broker.Message) error {
			calls <- m.Attempt
			return broker.Fatal(errors.New("order references a deleted customer"))
		}))
		require.NoError(t, err)
		require.NoError(t, conn.Publish(ctx, "order", broker.To(q)))
		d := h.Get(q+broker.DeadLetterSuffix, 5*time.Second)
		require.Contains(t, d.Headers[broker.HeaderError], "deleted customer")
		require.Equal(t, 1, <-calls)
		require.Empty(t, calls, "a fatal error is not retried")
		require.Equal(t, int64(1), mustInt(t, d.Headers[broker.HeaderAttempt]))
	})
}

func TestUndecodableGoesToParked(t *testing.T) {
	brokertest.Each(t, func(t *testing.T, h *brokertest.Harness) {
		ctx := brokertest.Ctx(t)
		conn := h.Open(broker.Config{})
		q := h.Queue("parked")
		handler, got := brokertest.Recorder(func(*broker.Message) broker.Ack { return broker.Accept() })
		_, err := conn.Consume(ctx, q, handler)
		require.NoError(t, err)
		pub := func(id, contentType string, body []byte, headers transport.Table) {
			require.NoError(t, conn.Transport().Publish(ctx, transport.Publishing{RoutingKey: q, Mandatory: true,
				Message: transport.Message{MessageID: id, ContentType: contentType, Body: body, Headers: headers}}))
		}
		pub("garbage", broker.ContentTypeJSON, []byte("{not json"), nil)
		pub("unknown", "application/x-klingon", []byte("Qapla'"), nil)
		pub("bad-attempt", broker.ContentTypeJSON, []byte(`{}`), transport.Table{broker.HeaderAttempt: "three"})

		reasons := map[string]string{}
		for range 3 {
			d := h.Get(q+broker.ParkedSuffix, 5*time.Second)
			reasons[d.MessageID] = d.Headers[broker.HeaderError].(string)
			require.Equal(t, q, d.Headers[broker.HeaderQueue])
		}
		require.Contains(t, reasons["garbage"], "not valid JSON")
		require.Contains(t, reasons["unknown"], "unknown content type")
		require.Contains(t, reasons["bad-attempt"], broker.HeaderAttempt)
		brokertest.Nothing(t, got, 200*time.Millisecond)
	})
}

func TestPanicIsRetried(t *testing.T) {
	brokertest.Each(t, func(t *testing.T, h *brokertest.Harness) {
		ctx := brokertest.Ctx(t)
		conn := h.Open(broker.Config{})
		q := h.Queue("panic")
		handler, got := brokertest.Recorder(func(m *broker.Message) broker.Ack {
			if m.Attempt == 1 {
				panic("nil map in handler")
			}
			return broker.Accept()
		})
		_, err := conn.Consume(ctx, q, handler, broker.WithRetry(broker.Constant(3, 0)))
		require.NoError(t, err)
		require.NoError(t, conn.Publish(ctx, "x", broker.To(q)))
		require.Equal(t, 1, brokertest.Next(t, got, 5*time.Second).Msg.Attempt)
		require.Equal(t, 2, brokertest.Next(t, got, 5*time.Second).Msg.Attempt)
	})
}

func TestInProgressPutBackKeepsAttempt(t *testing.T) {
	brokertest.Each(t, func(t *testing.T, h *brokertest.Harness) {
		ctx := brokertest.Ctx(t)
		conn := h.Open(broker.Config{})
		q := h.Queue("inprogress")
		calls := 0
		handler, got := brokertest.Recorder(func(m *broker.Message) broker.Ack {
			calls++
			if calls < 3 {
				return broker.InProgress(50 * time.Millisecond)
			}
			return broker.Accept()
		})
		// A policy of one attempt: a put-back must not spend it.
		_, err := conn.Consume(ctx, q, handler, broker.WithRetry(broker.NoRetry()))
		require.NoError(t, err)
		require.NoError(t, conn.Publish(ctx, "x", broker.To(q)))
		for range 3 {
			require.Equal(t, 1, brokertest.Next(t, got, 5*time.Second).Msg.Attempt)
		}
		brokertest.Nothing(t, got, 200*time.Millisecond)
		require.Equal(t, 0, h.Depth(q+broker.DeadLetterSuffix), "an in-progress put-back is never dead-lettered")
	})
}

func TestMandatoryUnroutableIsAnError(t *testing.T) {
	brokertest.Each(t, func(t *testing.T, h *brokertest.Harness) {
		ctx := brokertest.Ctx(t)
		conn := h.Open(broker.Config{})
		err := conn.Publish(ctx, "x", broker.To(h.Queue("nobody-home")), broker.Mandatory())
		require.ErrorIs(t, err, broker.ErrUnroutable)
		var re *transport.ReturnedError
		require.ErrorAs(t, err, &re)
		require.Equal(t, 312, re.ReplyCode)
		// Without mandatory the broker confirms and drops it: the default.
		require.NoError(t, conn.Publish(ctx, "x", broker.To(h.Queue("nobody-home"))))
	})
}

func TestBadInput(t *testing.T) {
	t.Parallel()
	ctx := brokertest.Ctx(t)
	conn, err := broker.Open(ctx, "memory://")
	require.NoError(t, err)
	defer conn.Close(ctx)

	err = conn.Publish(ctx, "x", broker.To("q"), broker.Header("x-acemq-attempt", int64(9)))
	require.ErrorIs(t, err, broker.ErrReservedHeader)
	require.ErrorContains(t, err, "x-acemq-attempt")

	err = conn.Publish(ctx, "x", broker.To("q"), broker.Header("tags", []string{"a"}))
	require.ErrorIs(t, err, transport.ErrInvalidHeader)

	err = conn.Publish(ctx, make(chan int), broker.To("q"))
	require.ErrorContains(t, err, "json")

	_, err = conn.Consume(ctx, "q", func(context.Context, *broker.Message) broker.Ack { return broker.Accept() }, broker.Prefetch(0))
	require.ErrorIs(t, err, broker.ErrInvalidOption)
	_, err = conn.Consume(ctx, "q", nil)
	require.ErrorIs(t, err, broker.ErrInvalidOption)
	_, err = conn.Consume(ctx, "", func(context.Context, *broker.Message) broker.Ack { return broker.Accept() })
	require.ErrorIs(t, err, broker.ErrInvalidOption)

	for _, u := range []string{"http://user:s3cret@host/", "amqp://user:s3cret@host:notaport/", "://s3cret"} {
		_, err = broker.Open(ctx, u)
		require.Error(t, err, u)
		require.NotContains(t, err.Error(), "s3cret", "the password never appears in an error")
	}
	_, err = broker.Open(ctx, "ftp://x")
	require.ErrorIs(t, err, broker.ErrInvalidURL)
	_, err = broker.Config{Prefetch: -1}.Open(ctx, "memory://")
	require.ErrorIs(t, err, broker.ErrInvalidOption)
}

func mustInt(t *testing.T, v any) int64 {
	t.Helper()
	n, ok := transport.Int(v)
	require.True(t, ok, "%v (%T) is not an integer", v, v)
	return n
}

// TestStreamOffsetArgumentChecked: an x-stream-offset RabbitMQ would close
// the connection over is refused before anything is sent.
func TestStreamOffsetArgumentChecked(t *testing.T) {
	t.Parallel()
	ctx := brokertest.Ctx(t)
	conn, err := broker.Open(ctx, "memory://")
	require.NoError(t, err)
	defer conn.Close(ctx)
	accept := func(context.Context, *broker.Message) broker.Ack { return broker.Accept() }
	for _, tc := range []struct {
		offset any
		ok     bool
	}{
		{"first", true}, {"last", true}, {"next", true}, {"7D", true}, {"30m", true},
		{int64(0), true}, {int64(42), true}, {7, true}, {time.Now(), true},
		{"beginning", false}, {"7 days", false}, {"D", false}, {"", false},
		{int64(-1), false}, {-3, false}, {3.5, false}, {true, false},
	} {
		_, err := conn.Consume(ctx, "q", accept, broker.ConsumeArgs(broker.Table{broker.HeaderStreamOffset: tc.offset}, nil))
		if tc.ok {
			// The loopback then refuses streams, for its own reason.
			require.NotErrorIs(t, err, broker.ErrInvalidOption, "%v (%T)", tc.offset, tc.offset)
		} else {
			require.ErrorIs(t, err, broker.ErrInvalidOption, "%v (%T)", tc.offset, tc.offset)
			require.ErrorContains(t, err, broker.HeaderStreamOffset)
		}
	}
}
