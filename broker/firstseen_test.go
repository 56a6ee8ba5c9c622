package broker_test

import (
	"errors"
	"testing"
	"time"

	amqp "github.com/rabbitmq/amqp091-go"
	"github.com/stretchr/testify/require"

	"github.com/acemq/acemq-flow/broker"
	"github.com/acemq/acemq-flow/broker/transport"
	"github.com/acemq/acemq-flow/internal/brokertest"
)

// publishForeign publishes to queue the way a publisher that knows nothing
// of AceMQ does: no x-acemq- header at all, and a timestamp property only
// when stamp is not zero. On RabbitMQ it is a plain amqp091-go client; the
// loopback speaks no AMQP, so there it is the bare transport.
func publishForeign(t *testing.T, h *brokertest.Harness, queue, id string, body []byte, stamp time.Time) {
	t.Helper()
	ctx := brokertest.Ctx(t)
	if h.Rabbit {
		require.NoError(t, h.Plain().PublishWithContext(ctx, "", queue, false, false, amqp.Publishing{
			MessageId: id, ContentType: broker.ContentTypeJSON, Timestamp: stamp, Body: body,
		}))
		return
	}
	require.NoError(t, h.Admin.Transport().Publish(ctx, transport.Publishing{RoutingKey: queue, Mandatory: true,
		Message: transport.Message{MessageID: id, ContentType: broker.ContentTypeJSON, Timestamp: stamp, Body: body}}))
}

// firstSeenHeader is the x-acemq-first-seen a delivery carries, in epoch ms.
func firstSeenHeader(t *testing.T, d *transport.Delivery) int64 {
	t.Helper()
	v, ok := d.Headers[broker.HeaderFirstSeen]
	require.True(t, ok, "message %s carries no %s: %v", d.MessageID, broker.HeaderFirstSeen, d.Headers)
	return mustInt(t, v)
}

// The tests below pin docs/wire.md, "Reading and writing these headers": a
// message that arrives without x-acemq-first-seen is first seen at its
// timestamp property, or when it was first received, and every copy the
// consumer moves (retry, in-progress put-back, dead-letter, park) writes
// that value, so that the next delivery sees the same one.

func TestForeignFirstSeenKeptByRetryAndDeadLetter(t *testing.T) {
	brokertest.Each(t, func(t *testing.T, h *brokertest.Harness) {
		ctx := brokertest.Ctx(t)
		conn := h.Open(broker.Config{})
		q := h.Queue("foreign-retry")
		handler, got := brokertest.Recorder(func(*broker.Message) broker.Ack {
			return broker.Retry(errors.New("not yet"))
		})
		_, err := conn.Consume(ctx, q, handler, broker.WithRetry(broker.Constant(2, 0)))
		require.NoError(t, err)
		publishForeign(t, h, q, "foreign-1", []byte(`{}`), time.Time{})

		first := brokertest.Next(t, got, 5*time.Second).Msg
		second := brokertest.Next(t, got, 5*time.Second).Msg
		require.Equal(t, 2, second.Attempt)
		want := first.FirstSeen.UnixMilli()
		require.Equal(t, want, firstSeenHeader(t, second.Raw()), "the retry copy carries the first delivery's first-seen")
		require.Equal(t, want, second.FirstSeen.UnixMilli())
		dead := h.Get(q+broker.DeadLetterSuffix, 5*time.Second)
		require.Equal(t, want, firstSeenHeader(t, dead), "the dead letter carries it too")
	})
}

func TestForeignFirstSeenFromTimestampProperty(t *testing.T) {
	brokertest.Each(t, func(t *testing.T, h *brokertest.Harness) {
		ctx := brokertest.Ctx(t)
		conn := h.Open(broker.Config{})
		q := h.Queue("foreign-stamped")
		handler, got := brokertest.Recorder(func(*broker.Message) broker.Ack {
			return broker.Reject(errors.New("never"))
		})
		_, err := conn.Consume(ctx, q, handler)
		require.NoError(t, err)
		stamp := time.Now().Add(-time.Hour).Truncate(time.Second)
		publishForeign(t, h, q, "foreign-2", []byte(`{}`), stamp)

		require.True(t, stamp.Equal(brokertest.Next(t, got, 5*time.Second).Msg.FirstSeen))
		dead := h.Get(q+broker.DeadLetterSuffix, 5*time.Second)
		require.Equal(t, stamp.UnixMilli(), firstSeenHeader(t, dead), "first seen at the timestamp property")
	})
}

func TestForeignFirstSeenKeptByPutBack(t *testing.T) {
	brokertest.Each(t, func(t *testing.T, h *brokertest.Harness) {
		ctx := brokertest.Ctx(t)
		conn := h.Open(broker.Config{})
		q := h.Queue("foreign-putback")
		calls := 0
		handler, got := brokertest.Recorder(func(*broker.Message) broker.Ack {
			calls++
			if calls == 1 {
				return broker.InProgress(10 * time.Millisecond)
			}
			return broker.Accept()
		})
		_, err := conn.Consume(ctx, q, handler, broker.WithRetry(broker.NoRetry()))
		require.NoError(t, err)
		publishForeign(t, h, q, "foreign-3", []byte(`{}`), time.Time{})

		first := brokertest.Next(t, got, 5*time.Second).Msg
		second := brokertest.Next(t, got, 5*time.Second).Msg
		require.Equal(t, 1, second.Attempt)
		require.Equal(t, first.FirstSeen.UnixMilli(), firstSeenHeader(t, second.Raw()))
	})
}

func TestForeignFirstSeenWrittenOnPark(t *testing.T) {
	brokertest.Each(t, func(t *testing.T, h *brokertest.Harness) {
		ctx := brokertest.Ctx(t)
		conn := h.Open(broker.Config{})
		q := h.Queue("foreign-park")
		handler, got := brokertest.Recorder(func(*broker.Message) broker.Ack { return broker.Accept() })
		_, err := conn.Consume(ctx, q, handler)
		require.NoError(t, err)
		before := time.Now().UnixMilli()
		publishForeign(t, h, q, "foreign-4", []byte(`{not json`), time.Time{})

		parked := h.Get(q+broker.ParkedSuffix, 5*time.Second)
		ms := firstSeenHeader(t, parked)
		require.GreaterOrEqual(t, ms, before, "first seen when first received")
		require.LessOrEqual(t, ms, time.Now().UnixMilli())
		brokertest.Nothing(t, got, 100*time.Millisecond)
	})
}

// TestForeignMessageGivenUpOnAge: a MaxAge policy gives up a message from a
// foreign publisher (no first-seen header, no timestamp) that keeps
// failing, because its retries carry the first-seen of its first delivery
// rather than starting the clock again.
func TestForeignMessageGivenUpOnAge(t *testing.T) {
	brokertest.Each(t, func(t *testing.T, h *brokertest.Harness) {
		ctx := brokertest.Ctx(t)
		conn := h.Open(broker.Config{})
		q := h.Queue("foreign-age")
		handler, got := brokertest.Recorder(func(*broker.Message) broker.Ack {
			return broker.Retry(errors.New("still down"))
		})
		// Each retry rides the ladder's one-second rung, so the second
		// delivery is already older than the policy allows.
		policy := broker.Constant(1000, time.Second).WithMaxAge(500 * time.Millisecond)
		_, err := conn.Consume(ctx, q, handler, broker.WithRetry(policy))
		require.NoError(t, err)
		publishForeign(t, h, q, "foreign-old", []byte(`{}`), time.Time{})

		first := brokertest.Next(t, got, 5*time.Second).Msg
		dead := h.Get(q+broker.DeadLetterSuffix, 10*time.Second)
		require.Equal(t, "foreign-old", dead.MessageID)
		require.Contains(t, dead.Headers[broker.HeaderError], "max age")
		require.Equal(t, first.FirstSeen.UnixMilli(), firstSeenHeader(t, dead))
	})
}
