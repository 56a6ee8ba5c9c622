package patterns_test

import (
	"context"
	"errors"
	"sync/atomic"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/acemq/acemq-flow/broker"
	"github.com/acemq/acemq-flow/internal/brokertest"
	"github.com/acemq/acemq-flow/patterns"
)

// slipStage consumes queue with FollowSlip running step and returns the
// messages step saw.
func slipStage(t *testing.T, conn *broker.Conn, queue string, step patterns.StepFunc, opts ...patterns.FollowOption) <-chan *broker.Message {
	t.Helper()
	seen := make(chan *broker.Message, 64)
	h, err := patterns.FollowSlip(conn, func(ctx context.Context, m *broker.Message) (any, error) {
		seen <- m
		return step(ctx, m)
	}, opts...)
	require.NoError(t, err)
	_, err = conn.Consume(brokertest.Ctx(t), queue, h, broker.WithRetry(broker.Constant(10, 0)))
	require.NoError(t, err)
	return seen
}

func TestSlipFollowedToTheEnd(t *testing.T) {
	brokertest.Each(t, func(t *testing.T, h *brokertest.Harness) {
		ctx := brokertest.Ctx(t)
		conn := h.Open(broker.Config{})
		ex := h.Exchange("slip")
		qs := map[string]string{"validate": h.Queue("validate"), "charge": h.Queue("charge"), "ship": h.Queue("ship")}
		for step, q := range qs {
			h.Bind(q, ex, "order."+step)
		}
		appendStep := func(name string) patterns.StepFunc {
			return func(_ context.Context, m *broker.Message) (any, error) {
				var trail []string
				if err := m.Decode(&trail); err != nil {
					return nil, err
				}
				return append(trail, name), nil
			}
		}
		validate := slipStage(t, conn, qs["validate"], appendStep("validate"))
		charge := slipStage(t, conn, qs["charge"], appendStep("charge"))
		ship := slipStage(t, conn, qs["ship"], appendStep("ship"))

		slip := patterns.NewRoutingSlip().
			Step("validate", ex, "order.validate").
			Step("charge", ex, "order.charge").
			Step("ship", ex, "order.ship")
		before := time.Now().Add(-time.Second)
		runID, err := slip.Start(ctx, conn, []string{}, broker.Header("tenant", "acme"), broker.CorrelationID("order-42"))
		require.NoError(t, err)
		require.NotEmpty(t, runID)

		first := brokertest.Next(t, validate, 10*time.Second)
		second := brokertest.Next(t, charge, 10*time.Second)
		last := brokertest.Next(t, ship, 10*time.Second)

		var trail []string
		require.NoError(t, last.Decode(&trail))
		require.Equal(t, []string{"validate", "charge"}, trail, "each step's payload is sent on")
		for i, m := range []*broker.Message{first, second, last} {
			require.Equal(t, runID, m.RunID, "the run id is carried (message %d)", i)
			require.Equal(t, "order-42", m.CorrelationID, "the correlation is carried (message %d)", i)
			require.Equal(t, 1, m.Attempt)
			require.True(t, first.FirstSeen.Equal(m.FirstSeen), "first seen is carried (message %d)", i)
			require.Equal(t, "acme", m.Headers["tenant"], "application headers are carried (message %d)", i)
			require.Nil(t, m.Route, "a slip stays a slip")
		}
		require.Equal(t, first.ID, second.CausationID, "each hop records what it came from")
		require.Equal(t, second.ID, last.CausationID)
		require.NotEqual(t, first.ID, second.ID, "a hop is a new message")

		got, err := patterns.SlipFrom(last)
		require.NoError(t, err)
		require.Equal(t, "RoutingSlip[done: validate -> charge | next: ship]", got.String())
		for _, d := range got.Done() {
			require.True(t, d.At.After(before), "done step %s is stamped", d.Name)
			require.Equal(t, ex, d.Exchange)
		}
		require.Eventually(t, func() bool { return h.Depth(qs["ship"]) == 0 }, 5*time.Second, 20*time.Millisecond)
		for _, q := range qs {
			require.Zero(t, h.Depth(q+broker.DeadLetterSuffix))
		}
	})
}

func TestSlipNilEndsTheRun(t *testing.T) {
	brokertest.Each(t, func(t *testing.T, h *brokertest.Harness) {
		ctx := brokertest.Ctx(t)
		conn := h.Open(broker.Config{})
		ex := h.Exchange("slip")
		first, second := h.Queue("first"), h.Queue("second")
		h.Bind(first, ex, "first")
		h.Bind(second, ex, "second")
		firstSeen := slipStage(t, conn, first, func(context.Context, *broker.Message) (any, error) { return nil, nil })
		secondSeen := slipStage(t, conn, second, func(context.Context, *broker.Message) (any, error) { return "more", nil })
		_, err := patterns.NewRoutingSlip().Step("first", ex, "first").Step("second", ex, "second").Start(ctx, conn, "digital")
		require.NoError(t, err)
		brokertest.Next(t, firstSeen, 10*time.Second)
		require.Eventually(t, func() bool { return h.Depth(first) == 0 }, 5*time.Second, 20*time.Millisecond,
			"the input is accepted")
		brokertest.Nothing(t, secondSeen, 300*time.Millisecond)
		require.Zero(t, h.Depth(first+broker.DeadLetterSuffix))
	})
}

// TestSlipUnparsableIsFatal: a slip that will not parse is given up at
// once, without running the step and without a retry.
func TestSlipUnparsableIsFatal(t *testing.T) {
	brokertest.Each(t, func(t *testing.T, h *brokertest.Harness) {
		ctx := brokertest.Ctx(t)
		conn := h.Open(broker.Config{})
		q := h.Queue("unparsable")
		var ran atomic.Int32
		slipStage(t, conn, q, func(context.Context, *broker.Message) (any, error) { ran.Add(1); return "x", nil })
		require.NoError(t, conn.Publish(ctx, "x", broker.To(q), broker.MessageID("bad-slip"),
			broker.Header(broker.HeaderRoutingSlip, `{"itinerary": [`)))
		d := h.Get(q+broker.DeadLetterSuffix, 10*time.Second)
		require.Equal(t, "bad-slip", d.MessageID)
		require.Contains(t, d.Headers[broker.HeaderError], "invalid routing slip")
		require.EqualValues(t, 1, d.Headers[broker.HeaderAttempt], "not retried")
		require.Zero(t, ran.Load(), "the step does not run")
	})
}

// TestSlipHopToUnboundRetries: a hop nothing is bound to receive is a
// failed publish and a retry of the step, not a dropped message; once the
// next stop is bound the run goes on, on attempt 1.
func TestSlipHopToUnboundRetries(t *testing.T) {
	brokertest.Each(t, func(t *testing.T, h *brokertest.Harness) {
		ctx := brokertest.Ctx(t)
		conn := h.Open(broker.Config{})
		ex := h.Exchange("slip")
		first, second := h.Queue("first"), h.Queue("later")
		h.Bind(first, ex, "first")
		attempts := make(chan *broker.Message, 16)
		step, err := patterns.FollowSlip(conn, func(_ context.Context, m *broker.Message) (any, error) { attempts <- m; return "on", nil })
		require.NoError(t, err)
		// A second apart, so that the retries are not spent before the
		// next stop is bound.
		_, err = conn.Consume(ctx, first, step, broker.WithRetry(broker.Constant(10, time.Second)))
		require.NoError(t, err)
		_, err = patterns.NewRoutingSlip().Step("first", ex, "first").Step("second", ex, "second").Start(ctx, conn, "go")
		require.NoError(t, err)
		require.Equal(t, 1, brokertest.Next(t, attempts, 10*time.Second).Attempt)
		require.Equal(t, 2, brokertest.Next(t, attempts, 10*time.Second).Attempt, "the unroutable hop retried the step")

		h.Bind(second, ex, "second")
		arrived := h.Sink(conn, second)
		m := brokertest.Next(t, arrived, 10*time.Second).Msg
		require.Equal(t, 1, m.Attempt, "the retry budget does not leak into the next step")
		require.Zero(t, h.Depth(first+broker.DeadLetterSuffix))
	})
}

func TestSlipStepErrors(t *testing.T) {
	brokertest.Each(t, func(t *testing.T, h *brokertest.Harness) {
		ctx := brokertest.Ctx(t)
		conn := h.Open(broker.Config{})
		ex := h.Exchange("slip")
		q := h.Queue("failing")
		h.Bind(q, ex, "failing")
		seen := slipStage(t, conn, q, func(_ context.Context, m *broker.Message) (any, error) {
			if m.Attempt == 1 {
				return nil, errors.New("flaky")
			}
			return nil, broker.Fatal(errors.New("card declined"))
		})
		runID, err := patterns.NewRoutingSlip().Step("failing", ex, "failing").Start(ctx, conn, "x")
		require.NoError(t, err)
		require.Equal(t, 1, brokertest.Next(t, seen, 10*time.Second).Attempt)
		require.Equal(t, 2, brokertest.Next(t, seen, 10*time.Second).Attempt, "an error retries")
		d := h.Get(q+broker.DeadLetterSuffix, 10*time.Second)
		require.Contains(t, d.Headers[broker.HeaderError], "card declined", "a fatal error gives up")
		require.Equal(t, runID, d.Headers[broker.HeaderRunID], "the run id survives the dead-letter")
		require.Contains(t, d.Headers, broker.HeaderRoutingSlip, "the slip says how far the run got")
	})
}

func TestFollowSlipRefusesBadArguments(t *testing.T) {
	t.Parallel()
	conn, err := broker.Open(t.Context(), "memory://")
	require.NoError(t, err)
	defer conn.Close(context.Background())
	step := func(context.Context, *broker.Message) (any, error) { return nil, nil }
	for name, f := range map[string]func() error{
		"nil conn":       func() error { _, err := patterns.FollowSlip(nil, step); return err },
		"nil step":       func() error { _, err := patterns.FollowSlip(conn, nil); return err },
		"nil pipeline":   func() error { _, err := patterns.FollowSlip(conn, step, patterns.OnPipeline(nil)); return err },
		"unknown form":   func() error { _, err := patterns.FollowSlip(conn, step, patterns.Write(patterns.Form(9))); return err },
		"route, no pipe": func() error { _, err := patterns.FollowSlip(conn, step, patterns.Write(patterns.Route)); return err },
	} {
		require.ErrorIs(t, f(), broker.ErrInvalidOption, name)
	}
}

// TestSlipHopDropsBrokerHeaders: a message that was dead-lettered on its way
// (x-death, original-expiration, x-delivery-count) hops on without them,
// as the contract's hop rules say, while its application headers travel.
func TestSlipHopDropsBrokerHeaders(t *testing.T) {
	brokertest.Each(t, func(t *testing.T, h *brokertest.Harness) {
		ctx := brokertest.Ctx(t)
		conn := h.Open(broker.Config{})
		ex := h.Exchange("slip-headers")
		first, second := h.Queue("first"), h.Queue("second")
		h.Bind(first, ex, "first")
		h.Bind(second, ex, "second")
		pass := func(_ context.Context, m *broker.Message) (any, error) { return "on", nil }
		slipStage(t, conn, first, pass)
		seen := slipStage(t, conn, second, pass)

		slip := patterns.NewRoutingSlip().Step("first", ex, "first").Step("second", ex, "second")
		_, err := slip.Start(ctx, conn, "go", broker.Header("tenant", "acme"),
			broker.Header("x-death", []any{broker.Table{"count": int64(1), "reason": "expired", "queue": "elsewhere"}}),
			broker.Header("original-expiration", "1000"), broker.Header("x-delivery-count", int64(3)))
		require.NoError(t, err)
		select {
		case m := <-seen:
			require.Equal(t, "acme", m.Headers["tenant"], "application headers travel with the hop")
			for _, gone := range []string{"x-death", "original-expiration", "x-delivery-count"} {
				require.NotContains(t, m.Headers, gone)
			}
		case <-ctx.Done():
			t.Fatal("the second step never saw the hop")
		}
	})
}
