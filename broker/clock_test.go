package broker_test

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/acemq/acemq-flow/broker"
	"github.com/acemq/acemq-flow/broker/loopback"
	"github.com/acemq/acemq-flow/internal/brokertest"
	"github.com/acemq/acemq-flow/internal/fakeclock"
	"github.com/acemq/acemq-flow/internal/testenv"
)

// TestClockRefusedWhereItCannotWork: a clock of the caller's is refused
// with RabbitMQ (before anything is dialled) and with a broker shared by
// name; a bare memory:// takes it.
func TestClockRefusedWhereItCannotWork(t *testing.T) {
	t.Parallel()
	ctx := brokertest.Ctx(t)
	clock := fakeclock.New(time.Now())
	cfg := broker.Config{Clock: clock, Logger: testenv.Logger(t)}
	_, err := cfg.Open(ctx, "amqp://guest:guest@127.0.0.1:1/")
	require.ErrorIs(t, err, broker.ErrInvalidOption)
	require.ErrorContains(t, err, "a Clock with RabbitMQ")
	_, err = cfg.Open(ctx, "memory://shared-by-name")
	require.ErrorIs(t, err, broker.ErrInvalidOption)
	require.ErrorContains(t, err, "a broker shared by name keeps the clock it was created with")

	conn, err := cfg.Open(ctx, "memory://")
	require.NoError(t, err)
	t.Cleanup(func() { require.NoError(t, conn.Close(context.Background())) })
	require.Same(t, clock, conn.Clock())
	plain, err := broker.Config{}.Open(ctx, "memory://")
	require.NoError(t, err)
	t.Cleanup(func() { require.NoError(t, plain.Close(context.Background())) })
	require.Equal(t, broker.SystemClock{}, plain.Clock())
}

// clocked is a connection on a loopback broker of its own whose clock the
// test moves.
type clocked struct {
	t     *testing.T
	clock *fakeclock.Clock
	b     *loopback.Broker
	conn  *broker.Conn
}

func newClocked(t *testing.T, start time.Time) *clocked {
	c := &clocked{t: t, clock: fakeclock.New(start)}
	c.b = loopback.NewWithClock(c.clock)
	t.Cleanup(c.b.Close)
	conn, err := broker.Config{Clock: c.clock, Logger: testenv.Logger(t)}.Wrap(c.b.Connect())
	require.NoError(t, err)
	t.Cleanup(func() { require.NoError(t, conn.Close(context.Background())) })
	c.conn = conn
	return c
}

// fire moves the clock to each timer due by limit in turn and fires it,
// waiting for what it set off each time: the delivery it caused settled
// and out of its consumer's hands (the delivery is unsettled from when
// the timer's call returns, and in the consumer's hands until then). It
// says how many it fired.
func (c *clocked) fire(limit time.Time) int {
	c.t.Helper()
	n := 0
	for c.clock.Fire(limit) {
		n++
		require.Eventually(c.t, func() bool { return c.b.Stats().Unsettled == 0 && c.conn.InFlight() == 0 },
			5*time.Second, time.Millisecond)
	}
	return n
}

// TestLadderOnTheClock: a message scheduled two hours ahead hops down the
// ladder as the clock moves, and is delivered when the clock reaches its
// due time, stamped with the clock's time when it was published.
func TestLadderOnTheClock(t *testing.T) {
	t.Parallel()
	start := time.Date(2026, 3, 2, 8, 0, 0, 0, time.UTC)
	c := newClocked(t, start)
	ctx := brokertest.Ctx(t)
	handler, got := brokertest.Recorder(func(*broker.Message) broker.Ack { return broker.Accept() })
	_, err := c.conn.Consume(ctx, "later", handler)
	require.NoError(t, err)
	require.NoError(t, c.conn.RunLadder(ctx))
	due := start.Add(2 * time.Hour)
	out, err := c.conn.Prepare(ctx, map[string]string{"n": "1"}, broker.To("later"))
	require.NoError(t, err)
	require.NoError(t, c.conn.Schedule(ctx, due, out))
	require.Equal(t, broker.LadderStats{Scheduled: 1}, c.conn.LadderStats())

	hops := c.fire(due.Add(-time.Second))
	require.Empty(t, got, "not yet due")
	require.Equal(t, int64(hops), c.conn.LadderStats().Hops, "each rung it left took it to the next")
	require.Greater(t, hops, 5, "an hour, then ten minutes at a time, then down the rungs")
	c.fire(due.Add(time.Second))
	seen := brokertest.Next(t, got, 5*time.Second)
	require.False(t, c.clock.Now().Before(due), "never early")
	require.Less(t, c.clock.Now().Sub(due), broker.ShortestRung)
	require.True(t, start.Equal(seen.Msg.Timestamp), "published at the clock's time: %s", seen.Msg.Timestamp)
	require.True(t, start.Equal(seen.Msg.FirstSeen))
	require.Equal(t, int64(1), c.conn.LadderStats().Delivered)
	_, armed := c.clock.Next()
	require.False(t, armed, "nothing left on the ladder")
}

// TestRetryOnTheClock: a retry an hour later waits for the clock, and a
// message older than its policy's max age on the clock is given up.
func TestRetryOnTheClock(t *testing.T) {
	t.Parallel()
	start := time.Date(2026, 3, 2, 8, 0, 0, 0, time.UTC)
	c := newClocked(t, start)
	ctx := brokertest.Ctx(t)
	handler, got := brokertest.Recorder(func(*broker.Message) broker.Ack { return broker.Retry(errors.New("not yet")) })
	settled := make(chan broker.Settlement, 8)
	_, err := c.conn.Consume(ctx, "retried", handler, broker.WithRetry(broker.Exponential(5, time.Hour).WithMax(time.Hour).WithMaxAge(90*time.Minute)),
		broker.OnSettle(func(_ context.Context, s broker.Settlement) { settled <- s }))
	require.NoError(t, err)
	require.NoError(t, c.conn.Publish(ctx, map[string]string{"n": "1"}, broker.To("retried")))
	require.Equal(t, 1, brokertest.Next(t, got, 5*time.Second).Msg.Attempt)
	s := brokertest.Next(t, settled, 5*time.Second)
	require.Equal(t, broker.OutcomeLabelRetried, s.Outcome)
	require.True(t, start.Equal(s.Started), "the clock's time: %s", s.Started)

	next, armed := c.clock.Next()
	require.True(t, armed)
	require.Equal(t, start.Add(time.Hour+time.Millisecond), next, "the retry waits in the hour rung")
	c.fire(next)
	seen := brokertest.Next(t, got, 5*time.Second)
	require.Equal(t, 2, seen.Msg.Attempt)
	require.True(t, start.Equal(seen.Msg.FirstSeen))
	s = brokertest.Next(t, settled, 5*time.Second)
	require.Equal(t, broker.OutcomeLabelRetried, s.Outcome)

	next, _ = c.clock.Next()
	c.fire(next)
	s = brokertest.Next(t, settled, 5*time.Second)
	require.Equal(t, broker.OutcomeLabelDeadLettered, s.Outcome, "two hours old on the clock: past its max age")
	require.Contains(t, s.Reason, "max age 1h30m0s exceeded")
}

// TestInFlight: a delivery is in flight from when its consumer takes it
// until its settle hook returns, after the broker has its ack.
func TestInFlight(t *testing.T) {
	t.Parallel()
	c := newClocked(t, time.Now())
	ctx := brokertest.Ctx(t)
	handling, hooked := make(chan struct{}), make(chan struct{})
	release := make(chan struct{})
	_, err := c.conn.Consume(ctx, "held", func(context.Context, *broker.Message) broker.Ack {
		handling <- struct{}{}
		<-release
		return broker.Accept()
	}, broker.OnSettle(func(context.Context, broker.Settlement) {
		hooked <- struct{}{}
		<-release
	}))
	require.NoError(t, err)
	require.Equal(t, 0, c.conn.InFlight())
	require.NoError(t, c.conn.Publish(ctx, "x", broker.To("held")))
	<-handling
	require.Equal(t, 1, c.conn.InFlight())
	require.Equal(t, 1, c.b.Stats().Unsettled)
	release <- struct{}{}
	<-hooked
	require.Equal(t, 0, c.b.Stats().Unsettled, "acknowledged")
	require.Equal(t, 1, c.conn.InFlight(), "its settle hook still runs")
	close(release)
	require.Eventually(t, func() bool { return c.conn.InFlight() == 0 }, 5*time.Second, time.Millisecond)
}
