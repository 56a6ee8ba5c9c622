package broker_test

import (
	"context"
	"errors"
	"sync/atomic"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/acemq/acemq-flow/broker"
	"github.com/acemq/acemq-flow/internal/brokertest"
)

// TestBeforeSettleDecidesTheSettlement: the Ack the BeforeSettle function
// returns is what the consumer carries out, and the settle hook hears it,
// whatever the handler said: an accept turned into a retry comes back as
// attempt 2, and a panic retries too.
func TestBeforeSettleDecidesTheSettlement(t *testing.T) {
	brokertest.Each(t, func(t *testing.T, h *brokertest.Harness) {
		ctx := brokertest.Ctx(t)
		conn := h.Open(broker.Config{})
		q := h.Queue("before")
		settled := make(chan broker.Settlement, 16)
		var notAccepts atomic.Int32
		before := func(_ context.Context, m *broker.Message, ack broker.Ack) broker.Ack {
			if ack.Outcome() != broker.OutcomeAccept {
				notAccepts.Add(1)
			}
			switch {
			case m.Type == "redo" && m.Attempt == 1:
				return broker.Retry(errors.New("not written yet"))
			case m.Type == "panic" && m.Attempt == 1:
				panic("journal gone")
			}
			return ack
		}
		_, err := conn.Consume(ctx, q, broker.Func(func(context.Context, *broker.Message) error { return nil }),
			broker.WithRetry(broker.Constant(3, 0)), broker.BeforeSettle(before),
			broker.OnSettle(func(_ context.Context, s broker.Settlement) { settled <- s }))
		require.NoError(t, err)
		// Settlements done off the handler's slot may be heard in either
		// order: take both of a message's, by attempt.
		both := func() (first, second broker.Settlement) {
			for range 2 {
				s := brokertest.Next(t, settled, 10*time.Second)
				if s.Message.Attempt == 1 {
					first = s
				} else {
					second = s
				}
			}
			return first, second
		}

		require.NoError(t, conn.Publish(ctx, "x", broker.To(q), broker.Type("redo")))
		first, second := both()
		require.Equal(t, broker.OutcomeLabelRetried, first.Outcome)
		require.EqualError(t, first.Err, "not written yet")
		require.Equal(t, broker.OutcomeLabelAccepted, second.Outcome)
		require.Equal(t, 2, second.Message.Attempt)

		require.NoError(t, conn.Publish(ctx, "x", broker.To(q), broker.Type("panic")))
		first, second = both()
		require.Equal(t, broker.OutcomeLabelRetried, first.Outcome)
		var p *broker.PanicError
		require.ErrorAs(t, first.Err, &p)
		require.Equal(t, "journal gone", p.Value)
		require.Equal(t, broker.OutcomeLabelAccepted, second.Outcome)
		require.Zero(t, notAccepts.Load(), "it is handed the handler's ack")
		h.WaitDepth(q, 0, 5*time.Second)
	})
}

// TestBeforeSettleFreesTheHandlerSlot: at concurrency 1, the handler takes
// the second message while the first still waits in BeforeSettle (which
// waits for exactly that), and Cancel waits for the one still waiting:
// both are acknowledged, none comes back.
func TestBeforeSettleFreesTheHandlerSlot(t *testing.T) {
	brokertest.Each(t, func(t *testing.T, h *brokertest.Harness) {
		ctx := brokertest.Ctx(t)
		conn := h.Open(broker.Config{})
		q := h.Queue("before-slot")
		second := make(chan struct{})
		reached := make(chan struct{}, 1)
		release := make(chan struct{})
		var waited atomic.Int32
		before := func(_ context.Context, m *broker.Message, ack broker.Ack) broker.Ack {
			if m.ID == "first" {
				// Only a handler slot freed before this returns lets the
				// second message be handled.
				<-second
				reached <- struct{}{}
				<-release
				waited.Add(1)
			}
			return ack
		}
		c, err := conn.Consume(ctx, q, func(_ context.Context, m *broker.Message) broker.Ack {
			if m.ID == "second" {
				close(second)
			}
			return broker.Accept()
		}, broker.Concurrency(1), broker.Prefetch(5), broker.BeforeSettle(before))
		require.NoError(t, err)
		require.NoError(t, conn.Publish(ctx, "1", broker.To(q), broker.MessageID("first")))
		require.NoError(t, conn.Publish(ctx, "2", broker.To(q), broker.MessageID("second")))
		brokertest.Next(t, reached, 10*time.Second)

		cancelled := make(chan error, 1)
		go func() { cancelled <- c.Cancel(ctx) }()
		brokertest.Nothing(t, cancelled, 300*time.Millisecond)
		close(release)
		require.NoError(t, brokertest.Next(t, cancelled, 10*time.Second))
		require.EqualValues(t, 1, waited.Load())
		select {
		case <-c.Done():
		default:
			t.Fatal("Done is not closed after Cancel returned")
		}
		require.Zero(t, h.Depth(q), "both were acknowledged, none put back")
	})
}

// TestBeforeSettleKeepsOrderByOrder: with OrderBy, a key's next message
// is handled only once the one before it has been through BeforeSettle.
func TestBeforeSettleKeepsOrderByOrder(t *testing.T) {
	brokertest.Each(t, func(t *testing.T, h *brokertest.Harness) {
		ctx := brokertest.Ctx(t)
		conn := h.Open(broker.Config{})
		q := h.Queue("before-ordered")
		events := make(chan string, 8)
		_, err := conn.Consume(ctx, q, func(_ context.Context, m *broker.Message) broker.Ack {
			events <- "handle " + m.ID
			return broker.Accept()
		}, broker.Concurrency(4), broker.Prefetch(10),
			broker.OrderBy(func(*broker.Message) string { return "one key" }),
			broker.BeforeSettle(func(_ context.Context, m *broker.Message, ack broker.Ack) broker.Ack {
				time.Sleep(50 * time.Millisecond) // a slow journal
				events <- "settle " + m.ID
				return ack
			}))
		require.NoError(t, err)
		for _, id := range []string{"a", "b", "c"} {
			require.NoError(t, conn.Publish(ctx, id, broker.To(q), broker.MessageID(id)))
		}
		var got []string
		for range 6 {
			got = append(got, brokertest.Next(t, events, 10*time.Second))
		}
		require.Equal(t, []string{"handle a", "settle a", "handle b", "settle b", "handle c", "settle c"}, got)
	})
}

func TestBeforeSettleRefusesNil(t *testing.T) {
	t.Parallel()
	conn, err := broker.Open(context.Background(), "memory://")
	require.NoError(t, err)
	defer conn.Close(context.Background())
	_, err = conn.Consume(context.Background(), "q", broker.Func(func(context.Context, *broker.Message) error { return nil }), broker.BeforeSettle(nil))
	require.ErrorIs(t, err, broker.ErrInvalidOption)
}
