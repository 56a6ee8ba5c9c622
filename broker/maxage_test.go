package broker_test

import (
	"errors"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/acemq/acemq-flow/broker"
	"github.com/acemq/acemq-flow/internal/brokertest"
)

// TestGiveUpOnAgeOnArrival: a message that arrives older than the policy's
// MaxAge (measured from x-acemq-first-seen) is given up into Q.dlq without
// its handler ever running, whatever attempt it is on.
func TestGiveUpOnAgeOnArrival(t *testing.T) {
	brokertest.Each(t, func(t *testing.T, h *brokertest.Harness) {
		ctx := brokertest.Ctx(t)
		conn := h.Open(broker.Config{})
		q := h.Queue("too-old")
		handler, got := brokertest.Recorder(func(*broker.Message) broker.Ack { return broker.Accept() })
		_, err := conn.Consume(ctx, q, handler, broker.WithRetry(broker.Exponential(5, time.Second).WithMaxAge(time.Hour)))
		require.NoError(t, err)
		old := time.Now().Add(-2 * time.Hour)
		require.NoError(t, conn.Publish(ctx, "order", broker.To(q), broker.MessageID("m-old"), broker.FirstSeen(old)))

		d := h.Get(q+broker.DeadLetterSuffix, 5*time.Second)
		require.Equal(t, "m-old", d.MessageID)
		require.Contains(t, d.Headers[broker.HeaderError], "max age 1h0m0s exceeded")
		require.Equal(t, q, d.Headers[broker.HeaderQueue])
		require.Equal(t, old.UnixMilli(), mustInt(t, d.Headers[broker.HeaderFirstSeen]), "first seen is never reset")
		brokertest.Nothing(t, got, 100*time.Millisecond)
	})
}

// TestGiveUpOnAgeAfterFailure: a message whose handler fails after the
// message grew older than MaxAge is given up rather than retried, with the
// handler's error and the age in x-acemq-error, though attempts are left.
func TestGiveUpOnAgeAfterFailure(t *testing.T) {
	brokertest.Each(t, func(t *testing.T, h *brokertest.Harness) {
		ctx := brokertest.Ctx(t)
		conn := h.Open(broker.Config{})
		q := h.Queue("grew-old")
		const maxAge = time.Hour
		handler, got := brokertest.Recorder(func(m *broker.Message) broker.Ack {
			// Fail only once the message is past its age: the handler is
			// what took the time.
			<-time.After(time.Until(m.FirstSeen.Add(maxAge + 10*time.Millisecond)))
			return broker.Retry(errors.New("bank unreachable"))
		})
		_, err := conn.Consume(ctx, q, handler, broker.WithRetry(broker.Constant(5, 0).WithMaxAge(maxAge)))
		require.NoError(t, err)
		// Young enough on arrival, with room for a slow broker.
		first := time.Now().Add(-maxAge + 2*time.Second)
		require.NoError(t, conn.Publish(ctx, "order", broker.To(q), broker.MessageID("m-aging"), broker.FirstSeen(first)))

		require.Equal(t, 1, brokertest.Next(t, got, 5*time.Second).Msg.Attempt)
		d := h.Get(q+broker.DeadLetterSuffix, 10*time.Second)
		require.Equal(t, "m-aging", d.MessageID)
		reason, _ := d.Headers[broker.HeaderError].(string)
		require.Contains(t, reason, "bank unreachable")
		require.Contains(t, reason, "max age 1h0m0s exceeded")
		require.Equal(t, int64(1), mustInt(t, d.Headers[broker.HeaderAttempt]), "given up on attempt 1 of 5")
		brokertest.Nothing(t, got, 100*time.Millisecond)
	})
}
