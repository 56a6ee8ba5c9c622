package broker_test

import (
	"context"
	"fmt"
	"math/rand/v2"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/acemq/acemq-flow/broker"
	"github.com/acemq/acemq-flow/internal/brokertest"
)

// TestOrderByKeepsPerKeyOrder: at concurrency 16, messages of one key are
// handled one at a time and in queue order, while different keys overlap.
func TestOrderByKeepsPerKeyOrder(t *testing.T) {
	t.Parallel()
	brokertest.Each(t, func(t *testing.T, h *brokertest.Harness) {
		ctx, cancel := context.WithTimeout(brokertest.Ctx(t), 20*time.Second)
		defer cancel()
		conn := h.Open(broker.Config{})
		q := h.Queue("ordered")
		const keys, perKey = 20, 50
		require.NoError(t, conn.Declare(ctx, broker.ConsumerTopology(q)))
		for i := range perKey {
			for k := range keys {
				require.NoError(t, conn.Publish(ctx, i, broker.To(q), broker.Header("key", fmt.Sprintf("k%02d", k)), broker.Mandatory()))
			}
		}
		var mu sync.Mutex
		seen := map[string][]int{}
		running := map[string]bool{}
		var concurrent, peak atomic.Int32
		all := make(chan struct{})
		handled := 0
		overlaps := 0 // messages of one key handled at the same time
		_, err := conn.Consume(ctx, q, func(ctx context.Context, m *broker.Message) broker.Ack {
			// No require here: FailNow from a handler goroutine would leave
			// mu locked; the test goroutine asserts on what is recorded.
			key, _ := m.Headers["key"].(string)
			var n int
			_ = m.Decode(&n)
			mu.Lock()
			if running[key] {
				overlaps++
			}
			running[key] = true
			mu.Unlock()
			if c := concurrent.Add(1); c > peak.Load() {
				peak.Store(c)
			}
			time.Sleep(time.Duration(rand.IntN(1500)) * time.Microsecond) // uneven work, to invite overtaking
			concurrent.Add(-1)
			mu.Lock()
			running[key] = false
			seen[key] = append(seen[key], n)
			handled++
			if handled == keys*perKey {
				close(all)
			}
			mu.Unlock()
			return broker.Accept()
		}, broker.Concurrency(16), broker.Prefetch(64), broker.WithRetry(broker.NoRetry()),
			broker.OrderBy(func(m *broker.Message) string { s, _ := m.Headers["key"].(string); return s }))
		require.NoError(t, err)
		select {
		case <-all:
		case <-ctx.Done():
			mu.Lock()
			t.Fatalf("%d of %d messages handled; %d parked, %d dead-lettered, %d still queued", handled, keys*perKey,
				h.Depth(q+broker.ParkedSuffix), h.Depth(q+broker.DeadLetterSuffix), h.Depth(q))
		}
		mu.Lock()
		defer mu.Unlock()
		require.Zero(t, overlaps, "messages of one key ran at the same time")
		for key, ns := range seen {
			for i, n := range ns {
				require.Equal(t, i, n, "key %s handled out of order: %v", key, ns)
			}
		}
		require.Greater(t, peak.Load(), int32(1), "different keys ran concurrently")
		t.Logf("peak concurrency %d", peak.Load())
	})
}

func TestOrderByRefusesNilKey(t *testing.T) {
	t.Parallel()
	ctx := brokertest.Ctx(t)
	conn, err := broker.Open(ctx, "memory://")
	require.NoError(t, err)
	defer conn.Close(ctx)
	_, err = conn.Consume(ctx, "q", func(context.Context, *broker.Message) broker.Ack { return broker.Accept() }, broker.OrderBy(nil))
	require.ErrorIs(t, err, broker.ErrInvalidOption)
}
