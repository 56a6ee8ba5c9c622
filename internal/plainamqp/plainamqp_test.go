package plainamqp_test

import (
	"context"
	"strconv"
	"sync"
	"testing"

	amqp "github.com/rabbitmq/amqp091-go"
	"github.com/stretchr/testify/require"

	"github.com/acemq/acemq-flow/internal/plainamqp"
	"github.com/acemq/acemq-flow/internal/testenv"
)

// TestPublishThenConsume publishes through windows smaller than, equal to
// and larger than the number of messages, and consumes them all back: every
// message arrives once, persistent, with its index as message id.
func TestPublishThenConsume(t *testing.T) {
	url := testenv.RabbitURL(t)
	for _, tc := range []struct{ n, window int }{{1000, 64}, {100, 100}, {10, 256}} {
		t.Run(strconv.Itoa(tc.window), func(t *testing.T) {
			t.Parallel()
			ac, err := amqp.Dial(url)
			require.NoError(t, err)
			defer ac.Close()
			ch, err := ac.Channel()
			require.NoError(t, err)
			q := testenv.Name(t, "plainamqp")
			_, err = ch.QueueDeclare(q, true, false, false, false, amqp.Table{"x-queue-type": "quorum"})
			require.NoError(t, err)
			defer func() { _, _ = ch.QueueDelete(q, false, false, false) }()
			require.NoError(t, ch.Confirm(false))

			body := []byte("payload")
			require.NoError(t, plainamqp.Publish(context.Background(), ch, q, body, tc.n, tc.window))
			// Every publish was confirmed before Publish returned.
			got, err := ch.QueueDeclarePassive(q, true, false, false, false, amqp.Table{"x-queue-type": "quorum"})
			require.NoError(t, err)
			require.Equal(t, tc.n, got.Messages)

			// Consume's callback sees no delivery: read them first with a
			// channel of our own, to check what was sent.
			seen := map[string]int{}
			peek, err := ac.Channel()
			require.NoError(t, err)
			for range tc.n {
				d, ok, err := peek.Get(q, false)
				require.NoError(t, err)
				require.True(t, ok)
				require.Equal(t, amqp.Persistent, d.DeliveryMode)
				require.Equal(t, plainamqp.ContentType, d.ContentType)
				require.Equal(t, body, d.Body)
				seen[d.MessageId]++
			}
			require.NoError(t, peek.Close()) // unacknowledged: back to the queue
			for i := range tc.n {
				require.Equal(t, 1, seen[strconv.Itoa(i)], "message %d", i)
			}

			var mu sync.Mutex
			count, done := 0, make(chan struct{})
			c, err := plainamqp.Consume(ac, q, 10, func() {
				mu.Lock()
				defer mu.Unlock()
				if count++; count == tc.n {
					close(done)
				}
			})
			require.NoError(t, err)
			<-done
			c.Stop()
			mu.Lock()
			defer mu.Unlock()
			require.Equal(t, tc.n, count, "each message acknowledged once, none redelivered")
		})
	}
}

func TestPublishRefusesAnEmptyWindow(t *testing.T) {
	require.ErrorContains(t, plainamqp.Publish(context.Background(), nil, "q", nil, 1, 0), "window 0")
}
