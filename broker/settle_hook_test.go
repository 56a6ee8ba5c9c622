package broker_test

import (
	"context"
	"errors"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/acemq/acemq-flow/broker"
	"github.com/acemq/acemq-flow/broker/transport"
	"github.com/acemq/acemq-flow/internal/brokertest"
)

// TestOnSettleHearsTheFinalOutcome: the settle hook hears what the consumer
// did with each delivery, decided after the handler returned: a retry
// whose policy is spent is a dead letter, not a retry; an unreadable body is
// parked without the handler running; a relabelled accept keeps its label.
func TestOnSettleHearsTheFinalOutcome(t *testing.T) {
	brokertest.Each(t, func(t *testing.T, h *brokertest.Harness) {
		ctx := brokertest.Ctx(t)
		conn := h.Open(broker.Config{})
		q := h.Queue("settle")
		settled := make(chan broker.Settlement, 16)
		handler := func(_ context.Context, m *broker.Message) broker.Ack {
			switch m.Type {
			case "flaky":
				return broker.Retry(errors.New("flaky"))
			case "fatal":
				return broker.Reject(errors.New("card declined"))
			case "busy":
				return broker.InProgress(2 * time.Second)
			case "dup":
				return broker.Accept().As("duplicate")
			}
			return broker.Accept()
		}
		_, err := conn.Consume(ctx, q, handler, broker.WithRetry(broker.Constant(2, 0)),
			broker.OnSettle(func(_ context.Context, s broker.Settlement) { settled <- s }))
		require.NoError(t, err)

		next := func() broker.Settlement { return brokertest.Next(t, settled, 10*time.Second) }

		require.NoError(t, conn.Publish(ctx, "ok", broker.To(q), broker.Type("ok"), broker.MessageID("m-ok")))
		s := next()
		require.Equal(t, broker.OutcomeLabelAccepted, s.Outcome)
		require.Equal(t, "m-ok", s.MessageID)
		require.Equal(t, q, s.Queue)
		require.True(t, s.HandlerRan)
		require.NoError(t, s.Err)
		require.NotNil(t, s.Message)
		require.False(t, s.Started.IsZero())

		require.NoError(t, conn.Publish(ctx, "x", broker.To(q), broker.Type("flaky"), broker.MessageID("m-flaky")))
		s = next()
		require.Equal(t, broker.OutcomeLabelRetried, s.Outcome)
		require.Equal(t, 2, s.NextAttempt)
		require.Equal(t, time.Duration(0), s.Delay)
		require.EqualError(t, s.Err, "flaky")
		s = next()
		require.Equal(t, broker.OutcomeLabelDeadLettered, s.Outcome, "the second failure spends the policy")
		require.Equal(t, 2, s.Message.Attempt)
		require.Contains(t, s.Reason, "2 of 2 attempts used")
		require.Equal(t, s.Reason, h.Get(q+broker.DeadLetterSuffix, 5*time.Second).Headers[broker.HeaderError])

		require.NoError(t, conn.Publish(ctx, "x", broker.To(q), broker.Type("fatal")))
		s = next()
		require.Equal(t, broker.OutcomeLabelDeadLettered, s.Outcome)
		require.Equal(t, "card declined", s.Reason)

		require.NoError(t, conn.Publish(ctx, "x", broker.To(q), broker.Type("busy")))
		s = next()
		require.Equal(t, broker.OutcomeLabelInProgress, s.Outcome)
		require.Equal(t, 2*time.Second, s.Delay)
		require.Equal(t, 1, s.NextAttempt, "a put-back keeps its attempt")

		require.NoError(t, conn.Publish(ctx, "x", broker.To(q), broker.Type("dup")))
		s = next()
		require.Equal(t, broker.OutcomeLabelAccepted, s.Outcome)
		require.Equal(t, "duplicate", s.Label)

		require.NoError(t, h.Admin.Transport().Publish(ctx, transport.Publishing{RoutingKey: q, Message: transport.Message{
			MessageID: "m-garbage", ContentType: "application/x-unknown", Body: []byte("?"),
		}}))
		// The busy message comes back after 2 s; skip past it to the garbage.
		for s = next(); s.MessageID != "m-garbage"; s = next() {
		}
		require.Equal(t, broker.OutcomeLabelParked, s.Outcome)
		require.False(t, s.HandlerRan)
		require.Nil(t, s.Message)
		require.ErrorContains(t, s.Err, "unknown content type")
	})
}

func TestOnSettleRefusesNil(t *testing.T) {
	t.Parallel()
	conn, err := broker.Open(context.Background(), "memory://")
	require.NoError(t, err)
	defer conn.Close(context.Background())
	_, err = conn.Consume(context.Background(), "q", broker.Func(func(context.Context, *broker.Message) error { return nil }), broker.OnSettle(nil))
	require.ErrorIs(t, err, broker.ErrInvalidOption)
}

// TestAckNoteReachesBothHooks: what a handler attaches to its ack (With)
// reaches the BeforeSettle function, in the ack it gets, and the settle
// hook, in the Settlement, untouched: as does what the BeforeSettle
// function attaches to the ack it returns; nothing is attached to a
// delivery the handler never saw.
func TestAckNoteReachesBothHooks(t *testing.T) {
	brokertest.Each(t, func(t *testing.T, h *brokertest.Harness) {
		ctx := brokertest.Ctx(t)
		conn := h.Open(broker.Config{})
		q := h.Queue("note")
		type seen struct{ before, after any }
		notes := make(chan seen, 4)
		var mu sync.Mutex
		var before any
		_, err := conn.Consume(ctx, q, func(_ context.Context, m *broker.Message) broker.Ack {
			if m.Type == "retry" {
				return broker.Retry(errors.New("again")).With("handler's " + m.ID)
			}
			return broker.Accept().With("handler's " + m.ID)
		}, broker.WithRetry(broker.NoRetry()),
			broker.BeforeSettle(func(_ context.Context, m *broker.Message, ack broker.Ack) broker.Ack {
				mu.Lock()
				before = ack.Note()
				mu.Unlock()
				if m.Type == "retry" {
					return ack
				}
				return ack.With("before-settle's " + m.ID)
			}),
			broker.OnSettle(func(_ context.Context, s broker.Settlement) {
				mu.Lock()
				defer mu.Unlock()
				notes <- seen{before, s.Note}
				before = nil
			}))
		require.NoError(t, err)
		require.NoError(t, conn.Publish(ctx, "x", broker.To(q), broker.MessageID("m-1")))
		require.Equal(t, seen{"handler's m-1", "before-settle's m-1"}, brokertest.Next(t, notes, 10*time.Second))
		require.NoError(t, conn.Publish(ctx, "x", broker.To(q), broker.MessageID("m-2"), broker.Type("retry")))
		require.Equal(t, seen{"handler's m-2", "handler's m-2"}, brokertest.Next(t, notes, 10*time.Second), "a dead letter carries the note too")
		require.NoError(t, h.Admin.Transport().Publish(ctx, transport.Publishing{RoutingKey: q, Message: transport.Message{
			MessageID: "m-3", ContentType: "application/x-unknown", Body: []byte("?"),
		}}))
		require.Equal(t, seen{nil, nil}, brokertest.Next(t, notes, 10*time.Second), "parked unread: nothing attached")
	})
}
