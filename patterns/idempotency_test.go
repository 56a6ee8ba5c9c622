package patterns_test

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
	"go.opentelemetry.io/otel/attribute"
	sdkmetric "go.opentelemetry.io/otel/sdk/metric"
	"go.opentelemetry.io/otel/sdk/metric/metricdata"

	"github.com/acemq/acemq-flow/broker"
	"github.com/acemq/acemq-flow/patterns"
)

// idemFake is a store answering what it is told and recording calls.
type idemFake struct {
	claim     patterns.Claim
	err       error
	forgot    []string
	confirmed []string
}

func (f *idemFake) FirstTime(context.Context, string) (bool, error) {
	return f.claim == patterns.ClaimClaimed, f.err
}
func (f *idemFake) Forget(_ context.Context, k string) error {
	f.forgot = append(f.forgot, k)
	return nil
}

type idemFakeClaimer struct{ *idemFake }

func (f idemFakeClaimer) Claim(context.Context, string) (patterns.Claim, error) {
	return f.claim, f.err
}
func (f idemFakeClaimer) Confirm(_ context.Context, k string) error {
	f.confirmed = append(f.confirmed, k)
	return nil
}

func TestIdempotentDecisions(t *testing.T) {
	t.Parallel()
	boom := errors.New("database down")
	for _, tc := range []struct {
		name          string
		claimer       bool
		claim         patterns.Claim
		err           error
		handler       broker.Ack
		wantOutcome   broker.Outcome
		wantLabel     string
		wantRan       bool
		wantForgot    bool
		wantConfirmed bool
	}{
		{"claimed and accepted is confirmed", true, patterns.ClaimClaimed, nil, broker.Accept(), broker.OutcomeAccept, "", true, false, true},
		{"claimed and retried is forgotten", true, patterns.ClaimClaimed, nil, broker.Retry(boom), broker.OutcomeRetry, "", true, true, false},
		{"claimed and rejected is forgotten", true, patterns.ClaimClaimed, nil, broker.Reject(boom), broker.OutcomeReject, "", true, true, false},
		{"duplicate is accepted unrun", true, patterns.ClaimDuplicate, nil, broker.Accept(), broker.OutcomeAccept, patterns.IdempotencyOutcomeDuplicate, false, false, false},
		{"in progress is put back", true, patterns.ClaimInProgress, nil, broker.Accept(), broker.OutcomeInProgress, broker.OutcomeLabelInProgress, false, false, false},
		{"a failed claim is a retry, never an accept", true, 0, boom, broker.Accept(), broker.OutcomeRetry, "", false, false, false},
		{"first-time store: first runs", false, patterns.ClaimClaimed, nil, broker.Accept(), broker.OutcomeAccept, "", true, false, false},
		{"first-time store: not first is a duplicate", false, patterns.ClaimInProgress, nil, broker.Accept(), broker.OutcomeAccept, patterns.IdempotencyOutcomeDuplicate, false, false, false},
		{"first-time store: failure is a retry", false, 0, boom, broker.Accept(), broker.OutcomeRetry, "", false, false, false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			fake := &idemFake{claim: tc.claim, err: tc.err}
			var store patterns.IdempotencyStore = fake
			if tc.claimer {
				store = idemFakeClaimer{fake}
			}
			mw, err := patterns.Idempotent(store, patterns.InProgressDelay(2*time.Second))
			require.NoError(t, err)
			ran := false
			ack := mw(func(context.Context, *broker.Message) broker.Ack { ran = true; return tc.handler })(
				context.Background(), &broker.Message{Envelope: broker.Envelope{ID: "m-1"}})
			require.Equal(t, tc.wantOutcome, ack.Outcome())
			require.Equal(t, tc.wantLabel, ack.Label())
			require.Equal(t, tc.wantRan, ran)
			require.Equal(t, tc.wantForgot, len(fake.forgot) == 1)
			require.Equal(t, tc.wantConfirmed, len(fake.confirmed) == 1)
			if tc.wantOutcome == broker.OutcomeInProgress {
				require.Equal(t, 2*time.Second, ack.Delay())
			}
			if tc.err != nil {
				require.ErrorIs(t, ack.Err(), boom)
			}
		})
	}
}

func TestIdempotentKeyPanicAndOptions(t *testing.T) {
	t.Parallel()
	fake := &idemFake{claim: patterns.ClaimClaimed}
	mw, err := patterns.Idempotent(idemFakeClaimer{fake}, patterns.IdempotencyKey(func(m *broker.Message) string {
		return m.Headers["order_id"].(string)
	}))
	require.NoError(t, err)
	h := mw(func(context.Context, *broker.Message) broker.Ack { panic("bug") })
	require.Panics(t, func() {
		h(context.Background(), &broker.Message{Headers: broker.Table{"order_id": "o-9"}})
	}, "the panic carries on to the consumer, which retries")
	require.Equal(t, []string{"o-9"}, fake.forgot, "but the key is forgotten first")

	ack := mw(func(context.Context, *broker.Message) broker.Ack { return broker.Accept() })(
		context.Background(), &broker.Message{Headers: broker.Table{"order_id": ""}})
	require.Equal(t, broker.OutcomeReject, ack.Outcome())
	require.ErrorIs(t, ack.Err(), patterns.ErrNoIdempotencyKey)

	for _, bad := range []patterns.IdempotencyOption{
		patterns.IdempotencyKey(nil), patterns.InProgressDelay(0), patterns.IdempotencyLogger(nil), nil,
	} {
		_, err := patterns.Idempotent(fake, bad)
		require.ErrorIs(t, err, broker.ErrInvalidOption)
	}
	_, err = patterns.Idempotent(nil)
	require.ErrorIs(t, err, broker.ErrInvalidOption)
}

func TestIdempotentOnLoopbackPutsBackWithAttemptUnchanged(t *testing.T) {
	t.Parallel()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	reader := sdkmetric.NewManualReader()
	conn, err := broker.Config{MeterProvider: sdkmetric.NewMeterProvider(sdkmetric.WithReader(reader))}.Open(ctx, "memory://")
	require.NoError(t, err)
	defer conn.Close(ctx)
	store, err := patterns.NewInMemoryIdempotencyStore(time.Minute)
	require.NoError(t, err)
	// Another worker holds the key.
	c, err := store.Claim(ctx, "m-held")
	require.NoError(t, err)
	require.Equal(t, patterns.ClaimClaimed, c)

	guard, err := patterns.Idempotent(store, patterns.InProgressDelay(50*time.Millisecond))
	require.NoError(t, err)
	labels := make(chan string, 100)
	observe := func(next broker.Handler) broker.Handler {
		return func(ctx context.Context, m *broker.Message) broker.Ack {
			ack := next(ctx, m)
			labels <- ack.Label()
			return ack
		}
	}
	ran := make(chan int, 1)
	_, err = conn.Consume(ctx, "orders", func(_ context.Context, m *broker.Message) broker.Ack {
		ran <- m.Attempt
		return broker.Accept()
	}, broker.Use(observe, guard), broker.WithRetry(broker.Constant(2, 0)))
	require.NoError(t, err)
	require.NoError(t, conn.Publish(ctx, "x", broker.To("orders"), broker.MessageID("m-held")))
	require.Equal(t, broker.OutcomeLabelInProgress, <-labels)
	require.Equal(t, broker.OutcomeLabelInProgress, <-labels, "put back and found in progress again")
	require.NoError(t, store.Forget(ctx, "m-held")) // the other worker gave up
	select {
	case attempt := <-ran:
		require.Equal(t, 1, attempt, "put-backs spend no attempt")
	case <-time.After(10 * time.Second):
		t.Fatal("never taken over")
	}
	require.Equal(t, "", <-labels, "the taken-over run was accepted")
	require.NoError(t, conn.Publish(ctx, "x", broker.To("orders"), broker.MessageID("m-held")))
	require.Equal(t, patterns.IdempotencyOutcomeDuplicate, <-labels)

	// The outcomes reach acemq.consume.total once the delivery is settled.
	total := func(outcome string) int64 {
		var rm metricdata.ResourceMetrics
		require.NoError(t, reader.Collect(ctx, &rm))
		return pipelineSum(rm, "acemq.consume.total", attribute.String("queue", "orders"), attribute.String("outcome", outcome))
	}
	require.Eventually(t, func() bool { return total(patterns.IdempotencyOutcomeDuplicate) == 1 }, 5*time.Second, 5*time.Millisecond)
	require.GreaterOrEqual(t, total(broker.OutcomeLabelInProgress), int64(2))
	require.Equal(t, int64(1), total(broker.OutcomeLabelAccepted))
}
