package broker_test

import (
	"context"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/acemq/acemq-flow/broker"
	"github.com/acemq/acemq-flow/internal/brokertest"
)

// TestLadderCountsLateness: on a clock that does not move, messages
// scheduled for times already past are delivered exactly that late; the
// ladder counts each in its bucket, keeps the last one's lateness, and
// the quantiles between two readings are of the deliveries in between.
func TestLadderCountsLateness(t *testing.T) {
	t.Parallel()
	start := time.Date(2026, 3, 2, 8, 0, 0, 0, time.UTC)
	c := newClocked(t, start)
	ctx := brokertest.Ctx(t)
	handler, got := brokertest.Recorder(func(*broker.Message) broker.Ack { return broker.Accept() })
	_, err := c.conn.Consume(ctx, "late", handler)
	require.NoError(t, err)
	require.NoError(t, c.conn.RunLadder(ctx))
	schedule := func(late time.Duration) {
		t.Helper()
		out, err := c.conn.Prepare(ctx, map[string]string{"late": late.String()}, broker.To("late"))
		require.NoError(t, err)
		require.NoError(t, c.conn.Schedule(ctx, start.Add(-late), out))
		brokertest.Next(t, got, 5*time.Second)
		require.Eventually(t, func() bool { return c.conn.InFlight() == 0 }, 5*time.Second, time.Millisecond)
	}

	before := c.conn.LadderStats()
	_, ok := before.LatenessQuantile(before, 0.99)
	require.False(t, ok, "nothing delivered yet")
	for range 98 {
		schedule(20 * time.Millisecond)
	}
	schedule(3 * time.Second)
	schedule(40 * time.Millisecond)
	s := c.conn.LadderStats()
	require.Equal(t, int64(100), s.Delivered)
	require.Equal(t, 40*time.Millisecond, s.LastLateness)
	bounds := broker.LatenessBounds()
	require.Len(t, s.Late, len(bounds)+1)
	require.Equal(t, int64(99), s.Late[1], "20 ms and 40 ms are in the bucket up to 50 ms")
	require.Equal(t, int64(1), s.Late[7], "3 s is in the bucket up to 5 s")
	p50, ok := s.LatenessQuantile(before, 0.5)
	require.True(t, ok)
	require.Equal(t, 50*time.Millisecond, p50)
	p99, _ := s.LatenessQuantile(before, 0.99)
	require.Equal(t, 50*time.Millisecond, p99, "99 of 100 were at most 50 ms late")
	p100, _ := s.LatenessQuantile(before, 1)
	require.Equal(t, 5*time.Second, p100)

	schedule(2 * time.Minute)
	after := c.conn.LadderStats()
	p99, ok = after.LatenessQuantile(s, 0.99)
	require.True(t, ok)
	require.Equal(t, 5*time.Minute, p99, "only what was delivered since the reading before counts")
}

// TestLatenessQuantile: the quantile is the upper bound of the bucket it
// falls in; beyond the last bound, that bound.
func TestLatenessQuantile(t *testing.T) {
	t.Parallel()
	bounds := broker.LatenessBounds()
	last := len(bounds)
	for _, tc := range []struct {
		name   string
		counts map[int]int64
		q      float64
		want   time.Duration
		ok     bool
	}{
		{"none delivered", nil, 0.99, 0, false},
		{"q out of range", map[int]int64{0: 1}, 0, 0, false},
		{"q above one", map[int]int64{0: 1}, 1.5, 0, false},
		{"one bucket", map[int]int64{2: 7}, 0.99, bounds[2], true},
		{"the tail decides p99", map[int]int64{0: 98, 5: 2}, 0.99, bounds[5], true},
		{"exactly 99 of 100 below", map[int]int64{0: 99, 5: 1}, 0.99, bounds[0], true},
		{"beyond the last bound", map[int]int64{0: 1, last: 1}, 1, bounds[last-1], true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			var s broker.LadderStats
			for i, n := range tc.counts {
				s.Late[i] = n
			}
			got, ok := s.LatenessQuantile(broker.LadderStats{}, tc.q)
			require.Equal(t, tc.ok, ok)
			require.Equal(t, tc.want, got)
		})
	}
}

// TestConsumerInFlight: a consumer counts the deliveries its handlers
// hold, apart from the other consumers of its connection.
func TestConsumerInFlight(t *testing.T) {
	brokertest.Each(t, func(t *testing.T, h *brokertest.Harness) {
		ctx := brokertest.Ctx(t)
		conn := h.Open(broker.Config{})
		busy, idle := h.Queue("busy"), h.Queue("idle")
		release := make(chan struct{})
		started := make(chan struct{}, 3)
		k, err := conn.Consume(ctx, busy, func(context.Context, *broker.Message) broker.Ack {
			started <- struct{}{}
			<-release
			return broker.Accept()
		}, broker.Concurrency(3), broker.WithRetry(broker.NoRetry()))
		require.NoError(t, err)
		other, err := conn.Consume(ctx, idle, func(context.Context, *broker.Message) broker.Ack { return broker.Accept() },
			broker.WithRetry(broker.NoRetry()))
		require.NoError(t, err)
		for range 3 {
			out, err := conn.Prepare(ctx, map[string]int{"n": 1}, broker.To(busy))
			require.NoError(t, err)
			require.NoError(t, conn.Send(ctx, out))
		}
		for range 3 {
			<-started
		}
		require.Equal(t, 3, k.InFlight())
		require.Zero(t, other.InFlight())
		close(release)
		require.Eventually(t, func() bool { return k.InFlight() == 0 }, 5*time.Second, time.Millisecond)
	})
}
