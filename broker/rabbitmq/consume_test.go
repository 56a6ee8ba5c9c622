package rabbitmq_test

import (
	"fmt"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/acemq/acemq-flow/broker/rabbitmq"
	"github.com/acemq/acemq-flow/broker/transport"
)

func TestConsumeRefusesPrefetchZero(t *testing.T) {
	t.Parallel()
	tr := open(t, rabbitmq.Config{})
	q := queue(t, tr, "prefetch-zero")
	_, err := tr.Consume(ctx(t), q, transport.ConsumeOptions{Prefetch: 0})
	require.ErrorIs(t, err, rabbitmq.ErrInvalidPrefetch)
	_, err = tr.Consume(ctx(t), q, transport.ConsumeOptions{Prefetch: 70000})
	require.ErrorIs(t, err, rabbitmq.ErrInvalidPrefetch)
}

func TestConsumeMissingQueueIsNotFound(t *testing.T) {
	t.Parallel()
	tr := open(t, rabbitmq.Config{})
	_, err := tr.Consume(ctx(t), "acemq-test.never-declared", transport.ConsumeOptions{Prefetch: 1})
	require.True(t, transport.IsCode(err, transport.NotFound), "got %v", err)
}

// Deleting the queue under a consumer makes the broker cancel it (with no
// channel close); resubscribing finds no queue, so the subscription ends
// with Err set.
func TestServerCancelEndsSubscriptionWhenQueueIsGone(t *testing.T) {
	t.Parallel()
	tr := open(t, rabbitmq.Config{})
	q := queue(t, tr, "server-cancel")
	sub, err := tr.Consume(ctx(t), q, transport.ConsumeOptions{Prefetch: 5})
	require.NoError(t, err)
	publish(t, tr, "", q, "m1")
	held := receive(t, sub)

	_, err = tr.DeleteQueue(ctx(t), q)
	require.NoError(t, err)
	select {
	case d, ok := <-sub.Deliveries():
		require.False(t, ok, "delivery %v after the queue was deleted", d)
	case <-time.After(5 * time.Second):
		require.FailNow(t, "Deliveries still open after the queue was deleted")
	}
	require.True(t, transport.IsCode(sub.Err(), transport.NotFound), "Err = %v", sub.Err())
	// The queue and its message are gone; settling is harmless.
	require.NoError(t, held.Ack())
	require.NoError(t, sub.Cancel(ctx(t)))
}

// After Cancel, deliveries already received are still settled on their
// channel, which the broker shows by them leaving the queue for good.
func TestCancelThenSettleHeldDeliveries(t *testing.T) {
	t.Parallel()
	tr := open(t, rabbitmq.Config{})
	q := queue(t, tr, "cancel-held")
	sub, err := tr.Consume(ctx(t), q, transport.ConsumeOptions{Prefetch: 10})
	require.NoError(t, err)
	for i := range 5 {
		publish(t, tr, "", q, fmt.Sprint(i))
	}
	var held []*transport.Delivery
	for range 5 {
		held = append(held, receive(t, sub))
	}
	require.NoError(t, sub.Cancel(ctx(t)))
	_, open := <-sub.Deliveries()
	require.False(t, open)
	require.NoError(t, sub.Err())

	// Settled concurrently, each exactly once.
	var wg sync.WaitGroup
	for i, d := range held {
		wg.Go(func() {
			if i == 0 {
				require.NoError(t, d.Nack(true))
				return
			}
			require.NoError(t, d.Ack())
		})
	}
	wg.Wait()
	for _, d := range held {
		require.ErrorIs(t, d.Ack(), transport.ErrAlreadySettled)
	}
	requeued := getOne(t, tr, q)
	require.Equal(t, held[0].MessageID, requeued.MessageID)
	require.True(t, requeued.Redelivered)
	require.NoError(t, requeued.Ack())
	none, err := tr.Get(ctx(t), q)
	require.NoError(t, err)
	require.Nil(t, none)
}

// A replay pass holds many gotten messages unsettled, then settles them.
func TestGetHoldsManyUnsettled(t *testing.T) {
	t.Parallel()
	tr := open(t, rabbitmq.Config{})
	q := queue(t, tr, "get-many")
	for i := range 50 {
		publish(t, tr, "", q, fmt.Sprint(i))
	}
	var held []*transport.Delivery
	for {
		d, err := tr.Get(ctx(t), q)
		require.NoError(t, err)
		if d == nil {
			break
		}
		held = append(held, d)
	}
	require.Len(t, held, 50)
	for _, d := range held {
		require.NoError(t, d.Ack())
	}
	_, err := tr.Get(ctx(t), "acemq-test.never-declared")
	require.True(t, transport.IsCode(err, transport.NotFound), "got %v", err)
	publish(t, tr, "", q, "after-404")
	require.Equal(t, "after-404", getOne(t, tr, q).MessageID, "the get channel is replaced after an exception")
}

// getOne polls q until a message is there.
func getOne(t *testing.T, tr *rabbitmq.Transport, q string) *transport.Delivery {
	t.Helper()
	var d *transport.Delivery
	require.Eventually(t, func() bool {
		var err error
		d, err = tr.Get(ctx(t), q)
		require.NoError(t, err)
		return d != nil
	}, 5*time.Second, 10*time.Millisecond)
	return d
}
