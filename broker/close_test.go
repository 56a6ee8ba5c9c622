package broker_test

import (
	"context"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/acemq/acemq-flow/broker"
	"github.com/acemq/acemq-flow/internal/brokertest"
)

// TestCloseSettlesInFlightHandlers: Close waits for running handlers, settles
// what they decided, and hands everything not yet started back to the queue.
func TestCloseSettlesInFlightHandlers(t *testing.T) {
	brokertest.Each(t, func(t *testing.T, h *brokertest.Harness) {
		ctx := brokertest.Ctx(t)
		conn, err := broker.Config{Ladder: h.Ladder, Logger: h.Admin.Logger()}.Open(ctx, h.URL)
		require.NoError(t, err)
		q := h.Queue("close")
		const total, workers = 12, 4
		gate := make(chan struct{})
		started := make(chan string, total)
		var mu sync.Mutex
		handled := map[string]int{}
		_, err = conn.Consume(ctx, q, func(ctx context.Context, m *broker.Message) broker.Ack {
			started <- m.ID
			<-gate
			mu.Lock()
			handled[m.ID]++
			mu.Unlock()
			return broker.Accept()
		}, broker.Concurrency(workers), broker.Prefetch(total), broker.WithRetry(broker.NoRetry()))
		require.NoError(t, err)
		for i := range total {
			require.NoError(t, conn.Publish(ctx, i, broker.To(q)))
		}
		for range workers {
			select {
			case <-started:
			case <-time.After(5 * time.Second):
				t.Fatal("handlers did not start")
			}
		}
		closed := make(chan error, 1)
		go func() { closed <- conn.Close(context.Background()) }()
		select {
		case err := <-closed:
			t.Fatalf("Close returned with handlers still running: %v", err)
		case <-time.After(200 * time.Millisecond):
		}
		close(gate)
		select {
		case err := <-closed:
			require.NoError(t, err)
		case <-time.After(10 * time.Second):
			t.Fatal("Close did not return after the handlers finished")
		}
		mu.Lock()
		defer mu.Unlock()
		require.Len(t, handled, workers, "only the in-flight handlers ran; nothing new started after Close")
		for id, n := range handled {
			require.Equal(t, 1, n, "message %s settled once", id)
		}
		require.Eventually(t, func() bool { return h.Depth(q) == total-workers }, 5*time.Second, 20*time.Millisecond,
			"every message not handled is back on the queue")
		require.NoError(t, conn.Close(ctx), "Close is idempotent")
	})
}

// TestCloseDeadlineNeverAcksUnhandled: a handler that outlives the deadline
// is not acknowledged; the broker keeps its message.
func TestCloseDeadlineNeverAcksUnhandled(t *testing.T) {
	brokertest.Each(t, func(t *testing.T, h *brokertest.Harness) {
		ctx := brokertest.Ctx(t)
		conn, err := broker.Config{Ladder: h.Ladder, Logger: h.Admin.Logger()}.Open(ctx, h.URL)
		require.NoError(t, err)
		q := h.Queue("deadline")
		started := make(chan struct{}, 1)
		release := make(chan struct{})
		finished := make(chan struct{})
		_, err = conn.Consume(ctx, q, func(ctx context.Context, m *broker.Message) broker.Ack {
			started <- struct{}{}
			<-release // ignores ctx on purpose
			close(finished)
			return broker.Accept()
		}, broker.WithRetry(broker.NoRetry()))
		require.NoError(t, err)
		require.NoError(t, conn.Publish(ctx, "slow", broker.To(q)))
		<-started
		closeCtx, cancel := context.WithTimeout(ctx, 300*time.Millisecond)
		defer cancel()
		err = conn.Close(closeCtx)
		require.ErrorIs(t, err, context.DeadlineExceeded)
		require.ErrorContains(t, err, "handlers still running")
		close(release)
		<-finished
		require.Eventually(t, func() bool { return h.Depth(q) == 1 }, 5*time.Second, 20*time.Millisecond,
			"the message the handler did not finish in time is still on the queue")
	})
}

func TestConsumerCancel(t *testing.T) {
	brokertest.Each(t, func(t *testing.T, h *brokertest.Harness) {
		ctx := brokertest.Ctx(t)
		conn := h.Open(broker.Config{})
		q := h.Queue("cancel")
		handler, got := brokertest.Recorder(func(*broker.Message) broker.Ack { return broker.Accept() })
		k, err := conn.Consume(ctx, q, handler, broker.WithRetry(broker.NoRetry()))
		require.NoError(t, err)
		require.NoError(t, conn.Publish(ctx, 1, broker.To(q)))
		brokertest.Next(t, got, 5*time.Second)
		require.NoError(t, k.Cancel(ctx))
		require.NoError(t, k.Cancel(ctx), "Cancel is idempotent")
		<-k.Done()
		require.NoError(t, conn.Publish(ctx, 2, broker.To(q)))
		brokertest.Nothing(t, got, 200*time.Millisecond)
		require.Eventually(t, func() bool { return h.Depth(q) == 1 }, 5*time.Second, 20*time.Millisecond)
	})
}
