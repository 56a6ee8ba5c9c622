package patterns_test

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/acemq/acemq-flow/broker"
	"github.com/acemq/acemq-flow/internal/brokertest"
	"github.com/acemq/acemq-flow/patterns"
)

type order struct {
	ID string `json:"id"`
}

// TestFollowEndAndTypedNil: patterns.End ends a run on purpose; a typed
// nil is given up with ErrNilResult rather than published as null.
func TestFollowEndAndTypedNil(t *testing.T) {
	brokertest.Each(t, func(t *testing.T, h *brokertest.Harness) {
		ctx := brokertest.Ctx(t)
		conn := h.Open(broker.Config{})
		ex := h.Exchange("end")
		first, second := h.Queue("first"), h.Queue("second")
		h.Bind(first, ex, "first")
		h.Bind(second, ex, "second")
		slipStage(t, conn, first, func(_ context.Context, m *broker.Message) (any, error) {
			var kind string
			require.NoError(t, m.Decode(&kind))
			if kind == "end" {
				return patterns.End, nil
			}
			var none *order
			return none, nil
		})
		arrived := h.Sink(conn, second)
		slip := patterns.NewRoutingSlip().Step("first", ex, "first").Step("second", ex, "second")

		_, err := slip.Start(ctx, conn, "end")
		require.NoError(t, err)
		require.Eventually(t, func() bool { return h.Depth(first) == 0 }, 5*time.Second, 20*time.Millisecond)

		_, err = slip.Start(ctx, conn, "typed-nil")
		require.NoError(t, err)
		d := h.Get(first+broker.DeadLetterSuffix, 10*time.Second)
		require.Contains(t, d.Headers[broker.HeaderError], "step returned a typed nil (*patterns_test.order)")
		require.EqualValues(t, 1, d.Headers[broker.HeaderAttempt], "given up, not retried")
		brokertest.Nothing(t, arrived, 300*time.Millisecond)
	})
}

// TestFollowTellsStepFromHop: the settle hook can tell a step's own failure
// (*StepError) from the hop's publish failing after the step's work was
// done (*HopError).
func TestFollowTellsStepFromHop(t *testing.T) {
	brokertest.Each(t, func(t *testing.T, h *brokertest.Harness) {
		ctx := brokertest.Ctx(t)
		conn := h.Open(broker.Config{})
		ex := h.Exchange("hop")
		q := h.Queue("first")
		h.Bind(q, ex, "first")
		step, err := patterns.FollowSlip(conn, func(_ context.Context, m *broker.Message) (any, error) {
			if m.Type == "broken" {
				return nil, errors.New("service down")
			}
			return "on", nil
		})
		require.NoError(t, err)
		settled := make(chan broker.Settlement, 8)
		_, err = conn.Consume(ctx, q, step, broker.WithRetry(broker.NoRetry()),
			broker.OnSettle(func(_ context.Context, s broker.Settlement) { settled <- s }))
		require.NoError(t, err)
		slip := patterns.NewRoutingSlip().Step("first", ex, "first").Step("second", ex, "nowhere")

		_, err = slip.Start(ctx, conn, "x", broker.Type("broken"))
		require.NoError(t, err)
		s := brokertest.Next(t, settled, 10*time.Second)
		var stepErr *patterns.StepError
		require.ErrorAs(t, s.Err, &stepErr)
		require.Equal(t, "first", stepErr.Step)
		require.EqualError(t, stepErr.Err, "service down")
		var hopErr *patterns.HopError
		require.False(t, errors.As(s.Err, &hopErr))

		_, err = slip.Start(ctx, conn, "x")
		require.NoError(t, err)
		s = brokertest.Next(t, settled, 10*time.Second)
		require.ErrorAs(t, s.Err, &hopErr)
		require.Equal(t, "first", hopErr.Step)
		require.ErrorIs(t, hopErr, broker.ErrUnroutable)
		require.Contains(t, hopErr.Error(), `hop from "first": publish to exchange "`)
		require.Contains(t, hopErr.To, `key "nowhere"`)
		require.False(t, errors.As(s.Err, &stepErr))
	})
}

// TestFollowResendsKeptHop: under Idempotent, a step whose hop could not be
// published is not run again: its retry sends the kept message, with the
// message id it had, once the next stop exists.
func TestFollowResendsKeptHop(t *testing.T) {
	brokertest.Each(t, func(t *testing.T, h *brokertest.Harness) {
		ctx := brokertest.Ctx(t)
		conn := h.Open(broker.Config{})
		ex := h.Exchange("kept")
		first, second := h.Queue("first"), h.Queue("second")
		h.Bind(first, ex, "first")
		store, err := patterns.NewInMemoryIdempotencyStore(0)
		require.NoError(t, err)
		guard, err := patterns.Idempotent(store)
		require.NoError(t, err)
		var runs atomic.Int32
		attempts := make(chan int, 16)
		step, err := patterns.FollowSlip(conn, func(_ context.Context, m *broker.Message) (any, error) {
			runs.Add(1)
			return fmt.Sprintf("charged %d", runs.Load()), nil
		})
		require.NoError(t, err)
		_, err = conn.Consume(ctx, first, func(ctx context.Context, m *broker.Message) broker.Ack {
			attempts <- m.Attempt
			return step(ctx, m)
		}, broker.Use(guard), broker.WithRetry(broker.Constant(20, time.Second)))
		require.NoError(t, err)

		_, err = patterns.NewRoutingSlip().Step("first", ex, "first").Step("second", ex, "second").Start(ctx, conn, "go")
		require.NoError(t, err)
		require.Equal(t, 1, brokertest.Next(t, attempts, 10*time.Second))
		require.Equal(t, 2, brokertest.Next(t, attempts, 10*time.Second), "the unroutable hop retried")
		h.Bind(second, ex, "second")
		arrived := h.Sink(conn, second)
		got := brokertest.Next(t, arrived, 10*time.Second)
		var payload string
		require.NoError(t, got.Msg.Decode(&payload))
		require.Equal(t, "charged 1", payload)
		require.EqualValues(t, 1, runs.Load(), "the step ran once; its retries only sent the hop")
		require.Zero(t, h.Depth(first+broker.DeadLetterSuffix))
		// The hop arrives before the retry that sent it confirms its key
		// (the confirm follows the publish's confirmation): wait for it.
		require.Eventually(t, func() bool {
			_, kept, err := store.Result(ctx, got.Msg.CausationID)
			return err == nil && !kept
		}, 10*time.Second, 5*time.Millisecond, "once sent, the kept hop is let go")
	})
}

// TestSlipPassedOnAsItArrived: a slip written by another library, its steps
// in a shorter form than ours, is passed on with those steps byte for
// byte; only the step just done is written afresh, with its time.
func TestSlipPassedOnAsItArrived(t *testing.T) {
	brokertest.Each(t, func(t *testing.T, h *brokertest.Harness) {
		ctx := brokertest.Ctx(t)
		conn := h.Open(broker.Config{})
		first, second := h.Queue("first"), h.Queue("second")
		h.Declare(second)
		var steps []string
		steps = append(steps, fmt.Sprintf(`{"routing_key":%q}`, first), fmt.Sprintf(`{"routing_key":%q}`, second))
		for i := range 500 {
			steps = append(steps, fmt.Sprintf(`{"routing_key":"later-%d"}`, i))
		}
		slip := `{"itinerary":[` + strings.Join(steps, ",") + `],"done":[{"routing_key":"before","at":1}]}`
		slipStage(t, conn, first, func(context.Context, *broker.Message) (any, error) { return "on", nil })
		arrived := h.Sink(conn, second)
		require.NoError(t, conn.Publish(ctx, "go", broker.To(first), broker.Header(broker.HeaderRoutingSlip, slip)))
		m := brokertest.Next(t, arrived, 10*time.Second).Msg
		out, ok := m.Headers[broker.HeaderRoutingSlip].(string)
		require.True(t, ok)
		var w struct {
			Itinerary []json.RawMessage `json:"itinerary"`
			Done      []json.RawMessage `json:"done"`
		}
		require.NoError(t, json.Unmarshal([]byte(out), &w))
		require.Len(t, w.Itinerary, 501)
		for i, st := range w.Itinerary {
			require.Equal(t, steps[i+1], string(st), "itinerary step %d", i)
		}
		require.Len(t, w.Done, 2)
		require.Equal(t, `{"routing_key":"before","at":1}`, string(w.Done[0]))
		require.Contains(t, string(w.Done[1]), fmt.Sprintf(`"routing_key":%q`, first))
		require.Less(t, len(out), len(slip)+200, "the slip did not grow beyond the step just done")
	})
}
