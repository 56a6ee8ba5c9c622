package patterns_test

import (
	"context"
	"math/rand/v2"
	"slices"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/acemq/acemq-flow/broker"
	"github.com/acemq/acemq-flow/internal/brokertest"
	"github.com/acemq/acemq-flow/patterns"
)

// TestSchedulerMixedDelays: 200 messages with delays from 0.5 s to 25 s,
// scheduled shuffled: none early, every one delivered, lateness reported.
func TestSchedulerMixedDelays(t *testing.T) {
	brokertest.OnRabbit(t, func(t *testing.T, h *brokertest.Harness) {
		ctx := brokertest.Ctx(t)
		q := h.Queue("scheduled")
		conn := h.Open(broker.Config{})
		s := patterns.NewScheduler(conn)
		require.NoError(t, s.Start(ctx))

		const n = 200
		delays := make([]time.Duration, n)
		for i := range delays {
			delays[i] = 500*time.Millisecond + time.Duration(i)*(24500*time.Millisecond)/(n-1)
		}
		rand.Shuffle(n, func(i, j int) { delays[i], delays[j] = delays[j], delays[i] })

		type arrival struct {
			due int64
			at  time.Time
		}
		got := make(chan arrival, n)
		_, err := conn.Consume(ctx, q, func(_ context.Context, m *broker.Message) broker.Ack {
			at := time.Now()
			var due int64
			if err := m.Decode(&due); err != nil {
				return broker.Reject(err)
			}
			got <- arrival{due: due, at: at}
			return broker.Accept()
		}, broker.Concurrency(8), broker.WithRetry(broker.NoRetry()))
		require.NoError(t, err)

		var wg sync.WaitGroup
		errs := make(chan error, n)
		for _, d := range delays {
			wg.Go(func() {
				due := time.Now().Add(d)
				errs <- s.At(ctx, due, due.UnixMilli(), broker.To(q))
			})
		}
		wg.Wait()
		close(errs)
		for err := range errs {
			require.NoError(t, err)
		}

		late := make([]time.Duration, 0, n)
		for range n {
			a := brokertest.Next(t, got, 40*time.Second)
			lateness := a.at.Sub(time.UnixMilli(a.due))
			require.GreaterOrEqual(t, lateness, time.Duration(0), "never early")
			late = append(late, lateness)
		}
		slices.Sort(late)
		p50, p99 := late[n/2], late[n*99/100-1]
		// The ladder counts a delivery once its confirm is back, which can
		// be just after the handler saw the message.
		require.Eventually(t, func() bool { return s.Stats().Delivered >= n }, 5*time.Second, 10*time.Millisecond)
		st := s.Stats()
		t.Logf("lateness over %d messages: p50 %s, p99 %s, max %s; %d hops for %d delivered",
			n, p50.Round(time.Millisecond), p99.Round(time.Millisecond), late[n-1].Round(time.Millisecond), st.Hops, st.Delivered)
		require.EqualValues(t, n, st.Scheduled)
		require.Zero(t, st.Malformed)
		require.Less(t, p99, 2*time.Second, "at most about a second late (target p99 < 1.2 s on an idle broker)")
	})
}

func TestSchedulerDeliversTheMessageOnly(t *testing.T) {
	brokertest.Each(t, func(t *testing.T, h *brokertest.Harness) {
		ctx := brokertest.Ctx(t)
		q := h.Queue("delivered")
		conn := h.Open(broker.Config{})
		s := patterns.NewScheduler(conn)
		require.NoError(t, s.Start(ctx))
		got := h.Sink(conn, q)

		start := time.Now()
		require.NoError(t, s.In(ctx, 300*time.Millisecond, map[string]string{"invoice": "i-1"},
			broker.To(q), broker.Type("invoice.due"), broker.Header("tenant", "acme")))
		require.NoError(t, s.In(ctx, -time.Second, []byte{0xca, 0xfe}, broker.To(q)))
		raw := brokertest.Next(t, got, 10*time.Second).Msg
		require.Equal(t, []byte{0xca, 0xfe}, raw.Body, "already due: delivered at once, as the bytes scheduled")
		require.Equal(t, broker.ContentTypeBytes, raw.ContentType)
		m := brokertest.Next(t, got, 10*time.Second).Msg
		require.GreaterOrEqual(t, time.Since(start), 300*time.Millisecond, "never early")
		require.Equal(t, broker.ContentTypeJSON, m.ContentType, "the content type is restored")
		require.Equal(t, "invoice.due", m.Type)
		require.Equal(t, broker.Table{"tenant": "acme"}, m.Headers, "nothing of the scheduler's headers is delivered")
		require.JSONEq(t, `{"invoice":"i-1"}`, string(m.Body))
		require.EqualValues(t, 2, s.Stats().Scheduled)
	})
}

// TestSchedulerUnboundTargetWaits: a due message whose target nothing is
// bound to goes round the one-second rung until something is.
func TestSchedulerUnboundTargetWaits(t *testing.T) {
	brokertest.Each(t, func(t *testing.T, h *brokertest.Harness) {
		ctx := brokertest.Ctx(t)
		q := h.Queue("later-bound")
		conn := h.Open(broker.Config{})
		s := patterns.NewScheduler(conn)
		require.NoError(t, s.Start(ctx))
		require.NoError(t, s.At(ctx, time.Now(), "hello", broker.To(q)))
		require.Eventually(t, func() bool { return s.Stats().Hops >= 1 }, 5*time.Second, 20*time.Millisecond,
			"the undeliverable message hops into the 1s rung")
		got := h.Sink(conn, q)
		var body string
		require.NoError(t, brokertest.Next(t, got, 10*time.Second).Msg.Decode(&body))
		require.Equal(t, "hello", body)
	})
}

func TestSchedulerDeclareWithoutConsumer(t *testing.T) {
	brokertest.Each(t, func(t *testing.T, h *brokertest.Harness) {
		ctx := brokertest.Ctx(t)
		conn := h.Open(broker.Config{})
		s := patterns.NewScheduler(conn)
		require.NoError(t, s.Declare(ctx))
		require.NoError(t, s.In(ctx, 2*time.Hour, "later", broker.To("nowhere")))
		require.Equal(t, 1, h.Depth(conn.Ladder()+".1h"), "two hours wait in the 1h rung")
		require.Equal(t, 0, h.Depth(conn.Ladder()+broker.DueSuffix))
		require.ErrorIs(t, s.At(ctx, time.Time{}, "x", broker.To("q")), broker.ErrInvalidOption)
		require.ErrorIs(t, patterns.NewScheduler(nil).In(ctx, time.Second, "x"), broker.ErrInvalidOption)
	})
}
