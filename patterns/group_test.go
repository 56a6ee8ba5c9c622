package patterns_test

import (
	"context"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/acemq/acemq-flow/broker"
	"github.com/acemq/acemq-flow/internal/brokertest"
	"github.com/acemq/acemq-flow/patterns"
)

// TestConsumerGroupMembersWorkAtOnce: four members with prefetch 1 each
// hold a message at the same time, which one consumer with prefetch 1
// could not.
func TestConsumerGroupMembersWorkAtOnce(t *testing.T) {
	brokertest.Each(t, func(t *testing.T, h *brokertest.Harness) {
		ctx := brokertest.Ctx(t)
		conn := h.Open(broker.Config{})
		q := h.Queue("group")
		const size = 4
		var mu sync.Mutex
		inFlight, handled := 0, 0
		allIn := make(chan struct{})
		release := make(chan struct{})
		done := make(chan struct{})
		g, err := patterns.NewConsumerGroup(ctx, conn, q, size, func(context.Context, *broker.Message) broker.Ack {
			mu.Lock()
			inFlight++
			if inFlight == size {
				close(allIn)
			}
			mu.Unlock()
			<-release
			mu.Lock()
			handled++
			if handled == 2*size {
				close(done)
			}
			mu.Unlock()
			return broker.Accept()
		}, broker.Prefetch(1))
		require.NoError(t, err)
		require.Equal(t, size, g.Size())
		require.Equal(t, q, g.Queue())
		require.Equal(t, size, h.Consumers(q))
		for i := range 2 * size {
			require.NoError(t, conn.Publish(ctx, i, broker.To(q)))
		}
		brokertest.Next(t, allIn, 10*time.Second)
		close(release)
		brokertest.Next(t, done, 10*time.Second)
		require.NoError(t, g.Close(ctx))
		require.NoError(t, g.Close(ctx), "idempotent")
		// A quorum queue counts a cancelled consumer until its channel
		// closes, which the transport delays for a second after the last
		// ack (rabbitmq.Config.SettleGrace).
		require.Eventually(t, func() bool { return h.Consumers(q) == 0 }, 5*time.Second, 20*time.Millisecond,
			"every member stopped")
		require.Zero(t, h.Depth(q), "every message handled and acknowledged")
	})
}

// TestConsumerGroupStopsTheStartedOnFailure: with Exclusive, the second
// member cannot start; the first is stopped before the error is returned.
// The queue is classic: RabbitMQ 3.10 does not refuse a second exclusive
// consumer on a quorum queue.
func TestConsumerGroupStopsTheStartedOnFailure(t *testing.T) {
	brokertest.Each(t, func(t *testing.T, h *brokertest.Harness) {
		ctx := brokertest.Ctx(t)
		conn := h.Open(broker.Config{})
		q := h.Queue("group-fail")
		require.NoError(t, conn.Declare(ctx, broker.Topology{Queues: []broker.Queue{{Name: q, Durable: true, Args: broker.Table{"x-queue-type": "classic"}}}}))
		_, err := patterns.NewConsumerGroup(ctx, conn, q, 3, streamAccept, broker.Existing(), broker.Exclusive())
		require.Error(t, err)
		require.ErrorContains(t, err, "member 2 of 3 did not start")
		require.Eventually(t, func() bool { return h.Consumers(q) == 0 }, 5*time.Second, 20*time.Millisecond,
			"the member that started was stopped")
	})
}

// TestConsumerGroupCloseStopsEveryMember: every member's handler outlives
// the deadline; Close still stops all of them within one deadline (the
// connection's CloseTimeout, the context having none), not one per member,
// and returns every refusal afterwards.
func TestConsumerGroupCloseStopsEveryMember(t *testing.T) {
	brokertest.Each(t, func(t *testing.T, h *brokertest.Harness) {
		ctx := brokertest.Ctx(t)
		const size, deadline = 3, 500 * time.Millisecond
		conn := h.Open(broker.Config{CloseTimeout: deadline})
		q := h.Queue("group-close")
		stuck := make(chan struct{}, size)
		release := make(chan struct{})
		g, err := patterns.NewConsumerGroup(ctx, conn, q, size, func(ctx context.Context, _ *broker.Message) broker.Ack {
			stuck <- struct{}{}
			<-release
			return broker.Accept()
		}, broker.Prefetch(1))
		require.NoError(t, err)
		for range size {
			require.NoError(t, conn.Publish(ctx, "slow", broker.To(q)))
		}
		for range size {
			brokertest.Next(t, stuck, 10*time.Second)
		}

		start := time.Now()
		err = g.Close(context.Background())
		elapsed := time.Since(start)
		require.Error(t, err, "the members with a handler still running refuse")
		require.Equal(t, size, strings.Count(err.Error(), "handlers still running at the deadline"), err.Error())
		require.GreaterOrEqual(t, elapsed, deadline*9/10)
		require.Less(t, elapsed, 2*deadline, "one deadline for the whole group, not one per member")

		require.NoError(t, conn.Publish(ctx, "after", broker.To(q)))
		close(release)
		require.NoError(t, g.Wait(ctx))
		require.Equal(t, 1, h.Depth(q), "no member took a delivery after Close")
	})
}

func TestConsumerGroupRefusals(t *testing.T) {
	t.Parallel()
	ctx := brokertest.Ctx(t)
	conn, err := broker.Open(ctx, "memory://")
	require.NoError(t, err)
	defer conn.Close(context.Background())
	_, err = patterns.NewConsumerGroup(ctx, conn, "q", 0, streamAccept)
	require.ErrorIs(t, err, broker.ErrInvalidOption)
	_, err = patterns.NewConsumerGroup(ctx, conn, "q", 2, nil)
	require.ErrorIs(t, err, broker.ErrInvalidOption)
}
