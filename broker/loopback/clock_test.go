package loopback_test

import (
	"context"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/acemq/acemq-flow/broker/loopback"
	"github.com/acemq/acemq-flow/broker/transport"
	"github.com/acemq/acemq-flow/internal/fakeclock"
)

// TestTTLOnTheClock: a broker made with a clock expires messages when that
// clock reaches their TTL, and not before, stamping x-death with its time.
func TestTTLOnTheClock(t *testing.T) {
	t.Parallel()
	start := time.Date(2026, 3, 2, 8, 0, 0, 0, time.UTC)
	clock := fakeclock.New(start)
	b := loopback.NewWithClock(clock)
	t.Cleanup(b.Close)
	tr := connect(t, b)
	declareQueue(t, tr, transport.Queue{Name: "dead", Durable: true})
	declareQueue(t, tr, transport.Queue{Name: "waiting", Durable: true, Args: transport.Table{
		"x-message-ttl": int64(time.Hour.Milliseconds()), "x-dead-letter-exchange": "", "x-dead-letter-routing-key": "dead",
	}})
	publish(t, tr, "waiting", transport.Message{MessageID: "m-1", Body: []byte("x")})

	due, ok := clock.Next()
	require.True(t, ok, "the expiry is a timer on the clock")
	require.Equal(t, start.Add(time.Hour+time.Millisecond), due, "armed for just after the TTL")
	clock.Set(start.Add(time.Hour - time.Second))
	depth := func(q string) int {
		st, err := tr.Inspect(t.Context(), q)
		require.NoError(t, err)
		return st.Messages
	}
	require.Equal(t, 1, depth("waiting"), "moving the clock fires nothing by itself")

	require.True(t, clock.Fire(due))
	require.Equal(t, 0, depth("waiting"))
	d, err := tr.Get(t.Context(), "dead")
	require.NoError(t, err)
	require.NotNil(t, d)
	require.NoError(t, d.Ack())
	deaths, _ := d.Headers["x-death"].([]any)
	require.Len(t, deaths, 1)
	stamped, ok := deaths[0].(transport.Table)["time"].(time.Time)
	require.True(t, ok)
	require.True(t, stamped.Equal(due.Truncate(time.Second)), "stamped with the clock's time: %s", stamped)
	_, ok = clock.Next()
	require.False(t, ok, "nothing left to expire")
}

// TestStats: Stats counts the deliveries made and those not yet settled,
// over every connection; a closing connection's go back.
func TestStats(t *testing.T) {
	t.Parallel()
	b := loopback.New()
	t.Cleanup(b.Close)
	tr := connect(t, b)
	declareQueue(t, tr, transport.Queue{Name: "q", Durable: true})
	for range 3 {
		publish(t, tr, "q", transport.Message{Body: []byte("x")})
	}
	require.Equal(t, loopback.Stats{}, b.Stats(), "ready messages are not in flight")

	got, err := tr.Get(t.Context(), "q")
	require.NoError(t, err)
	other := b.Connect()
	sub, err := other.Consume(t.Context(), "q", transport.ConsumeOptions{Prefetch: 1})
	require.NoError(t, err)
	d := receive(t, sub)
	require.Equal(t, loopback.Stats{Unsettled: 2, Delivered: 2}, b.Stats())

	require.NoError(t, got.Ack())
	require.Equal(t, loopback.Stats{Unsettled: 1, Delivered: 2}, b.Stats())
	require.NoError(t, d.Nack(true))
	d = receive(t, sub)
	require.Equal(t, loopback.Stats{Unsettled: 1, Delivered: 3}, b.Stats(), "a requeued message is delivered again")
	require.NoError(t, other.Close(context.Background()))
	require.Equal(t, 0, b.Stats().Unsettled, "what a closing connection held went back")
	require.ErrorIs(t, d.Ack(), transport.ErrClosed)
	require.Equal(t, 0, b.Stats().Unsettled)
}
