package broker_test

import (
	"context"
	"errors"
	"fmt"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
	"go.opentelemetry.io/otel/attribute"
	sdkmetric "go.opentelemetry.io/otel/sdk/metric"
	"go.opentelemetry.io/otel/sdk/metric/metricdata"

	"github.com/acemq/acemq-flow/broker"
	"github.com/acemq/acemq-flow/broker/rabbitmq"
	"github.com/acemq/acemq-flow/broker/transport"
	"github.com/acemq/acemq-flow/internal/brokertest"
	"github.com/acemq/acemq-flow/internal/testenv"
)

// Eight consumers (and the ladder's control consumer) share one connection
// while the broker closes it, again and again, with a code other than 320:
// a declaration of an exchange of an unknown type is a connection error
// (503), and each one after the first runs the moment a new connection is
// up, while the consumers resubscribe on it. A close of the connection is
// the connection's failure, not the subscriptions': every consumer keeps
// consuming, and the ladder still delivers a retry.
func TestConsumersSurviveConnectionErrorsWhileResubscribing(t *testing.T) {
	brokertest.OnRabbit(t, func(t *testing.T, h *brokertest.Harness) {
		ctx := brokertest.Ctx(t)
		conn := h.Open(broker.Config{RabbitMQ: rabbitmq.Config{ReconnectMin: 10 * time.Millisecond, ReconnectMax: 100 * time.Millisecond}})
		const n = 8
		handled := make(chan string, 64)
		consumers := make([]*broker.Consumer, n)
		queues := make([]string, n)
		for i := range n {
			queues[i] = h.Queue(fmt.Sprintf("survivor-%d", i))
			var err error
			consumers[i], err = conn.Consume(ctx, queues[i], broker.Func(func(_ context.Context, m *broker.Message) error {
				if m.ID == "retried" && m.Attempt == 1 {
					return errors.New("once more, through the ladder")
				}
				handled <- m.ID
				return nil
			}), broker.WithRetry(broker.Constant(3, time.Second)))
			require.NoError(t, err)
		}

		bad := broker.Topology{Exchanges: []broker.Exchange{{Name: testenv.Name(t, "bad"), Kind: "no-such-type"}}}
		for round := range 8 {
			err := conn.Declare(ctx, bad)
			require.True(t, transport.IsCode(err, 503), "round %d: want the connection closed with 503, got %v", round, err)
		}

		want := map[string]bool{"retried": true}
		require.NoError(t, h.Admin.Publish(ctx, "x", broker.To(queues[0]), broker.MessageID("retried")))
		for i, q := range queues {
			id := fmt.Sprintf("after-%d", i)
			want[id] = true
			require.NoError(t, h.Admin.Publish(ctx, "x", broker.To(q), broker.MessageID(id)))
		}
		got := map[string]bool{}
		for len(got) < len(want) {
			select {
			case id := <-handled:
				got[id] = true
			case <-time.After(20 * time.Second):
				for i, k := range consumers {
					t.Logf("consumer %d of %s: ended: %v", i, k.Queue(), k.Err())
				}
				require.Equal(t, want, got, "every consumer handles what is published after the closes")
			}
		}
		for _, k := range consumers {
			select {
			case <-k.Done():
				t.Fatalf("consumer of %s ended: %v", k.Queue(), k.Err())
			default:
			}
			require.NoError(t, k.Err())
		}
	})
}

// A consumer that does end on its own (its queue was deleted, so the
// broker refuses to resubscribe it) says so where its owner looks: Done is
// closed and Err says why, acemq.consumer.ended{queue} counts it, and the
// connection's Health names it until its owner cancels it. The ladder's
// control consumer, which nobody else owns, is reported the same way.
func TestEndedConsumerIsReported(t *testing.T) {
	brokertest.Each(t, func(t *testing.T, h *brokertest.Harness) {
		ctx := brokertest.Ctx(t)
		reader := sdkmetric.NewManualReader()
		conn := h.Open(broker.Config{MeterProvider: sdkmetric.NewMeterProvider(sdkmetric.WithReader(reader))})
		q := h.Queue("ending")
		k, err := conn.Consume(ctx, q, broker.Func(func(context.Context, *broker.Message) error { return nil }))
		require.NoError(t, err)
		require.NoError(t, conn.Health())

		_, err = h.Admin.Transport().DeleteQueue(ctx, q)
		require.NoError(t, err)
		select {
		case <-k.Done():
		case <-time.After(10 * time.Second):
			t.Fatal("the consumer of a deleted queue did not end")
		}
		require.ErrorContains(t, k.Err(), q)
		var ended *broker.ConsumerEndedError
		require.ErrorAs(t, conn.Health(), &ended)
		require.Equal(t, q, ended.Queue)
		require.Equal(t, k.Err(), ended.Err)
		var rm metricdata.ResourceMetrics
		require.NoError(t, reader.Collect(ctx, &rm))
		require.Equal(t, int64(1), sumOf(rm, "acemq.consumer.ended", attribute.String("queue", q)))

		require.NoError(t, k.Cancel(ctx))
		require.NoError(t, conn.Health(), "its owner cancelled it")

		// The ladder's control consumer runs for every consumer that
		// retries; without it no retry and no scheduled message moves.
		due := conn.Ladder() + broker.DueSuffix
		_, err = h.Admin.Transport().DeleteQueue(ctx, due)
		require.NoError(t, err)
		require.Eventually(t, func() bool { return errors.As(conn.Health(), &ended) && ended.Queue == due },
			10*time.Second, 10*time.Millisecond, "the ladder's control consumer is reported: %v", conn.Health())
	})
}
