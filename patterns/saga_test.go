package patterns_test

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/acemq/acemq-flow/patterns"
)

// sagaLog records what a saga's steps and compensations did.
type sagaLog struct{ calls []string }

func (l *sagaLog) step(name string, fail error) patterns.SagaFunc[*sagaLog] {
	return func(_ context.Context, v *sagaLog) error {
		v.calls = append(v.calls, name)
		return fail
	}
}

func TestSagaResults(t *testing.T) {
	t.Parallel()
	declined := errors.New("card declined")
	noCourier := errors.New("no courier")
	stuck := errors.New("refund service down")
	cases := []struct {
		name string
		// build adds the steps to s, using l to record.
		build                func(s *patterns.Saga[*sagaLog], l *sagaLog)
		complete             bool
		compensated          bool
		failedAt             string
		failure              error
		completed            []string
		unresolved           []string
		calls                []string
		hasUnresolved        bool
		failureIsInvalidSaga bool
	}{
		{
			name: "complete",
			build: func(s *patterns.Saga[*sagaLog], l *sagaLog) {
				s.Step("pay", l.step("pay", nil)).CompensateWith(l.step("refund", nil)).
					Step("reserve", l.step("reserve", nil)).CompensateWith(l.step("release", nil)).
					Step("book", l.step("book", nil))
			},
			complete: true, completed: []string{"pay", "reserve", "book"},
			calls: []string{"pay", "reserve", "book"},
		},
		{
			name: "last step fails: the earlier ones are undone in reverse",
			build: func(s *patterns.Saga[*sagaLog], l *sagaLog) {
				s.Step("pay", l.step("pay", nil)).CompensateWith(l.step("refund", nil)).
					Step("reserve", l.step("reserve", nil)).CompensateWith(l.step("release", nil)).
					Step("book", l.step("book", noCourier))
			},
			compensated: true, failedAt: "book", failure: noCourier, completed: []string{"pay", "reserve"},
			calls: []string{"pay", "reserve", "book", "release", "refund"},
		},
		{
			name: "first step fails: nothing to undo",
			build: func(s *patterns.Saga[*sagaLog], l *sagaLog) {
				s.Step("pay", l.step("pay", declined)).CompensateWith(l.step("refund", nil)).
					Step("reserve", l.step("reserve", nil))
			},
			compensated: true, failedAt: "pay", failure: declined, completed: []string{},
			calls: []string{"pay"},
		},
		{
			name: "a step without compensation is skipped",
			build: func(s *patterns.Saga[*sagaLog], l *sagaLog) {
				s.Step("pay", l.step("pay", nil)).CompensateWith(l.step("refund", nil)).
					Step("lookup", l.step("lookup", nil)).
					Step("book", l.step("book", noCourier))
			},
			compensated: true, failedAt: "book", failure: noCourier, completed: []string{"pay", "lookup"},
			calls: []string{"pay", "lookup", "book", "refund"},
		},
		{
			name: "a failing compensation is collected and the rest still run",
			build: func(s *patterns.Saga[*sagaLog], l *sagaLog) {
				s.Step("pay", l.step("pay", nil)).CompensateWith(l.step("refund", stuck)).
					Step("reserve", l.step("reserve", nil)).CompensateWith(l.step("release", nil)).
					Step("book", l.step("book", noCourier))
			},
			failedAt: "book", failure: noCourier, completed: []string{"pay", "reserve"},
			unresolved: []string{"pay"}, hasUnresolved: true,
			calls: []string{"pay", "reserve", "book", "release", "refund"},
		},
		{
			name: "an invalid saga runs nothing",
			build: func(s *patterns.Saga[*sagaLog], l *sagaLog) {
				s.CompensateWith(l.step("refund", nil)).Step("pay", l.step("pay", nil))
			},
			failureIsInvalidSaga: true,
		},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			t.Parallel()
			l := &sagaLog{}
			s := patterns.NewSaga[*sagaLog]("place-order")
			c.build(s, l)
			r := s.Run(t.Context(), l)
			require.Equal(t, c.complete, r.Complete())
			require.Equal(t, c.compensated, r.Compensated())
			require.Equal(t, c.failedAt, r.FailedAt())
			require.Equal(t, c.hasUnresolved, r.HasUnresolved())
			require.Equal(t, c.calls, l.calls)
			if c.failureIsInvalidSaga {
				require.ErrorIs(t, r.Failure(), patterns.ErrInvalidSaga)
				return
			}
			require.Equal(t, c.failure, r.Failure())
			require.Equal(t, c.completed, r.Completed())
			var unresolved []string
			for _, u := range r.Unresolved() {
				unresolved = append(unresolved, u.Step)
				require.ErrorIs(t, u.Err, stuck)
			}
			require.Equal(t, c.unresolved, unresolved)
			if c.complete {
				require.NoError(t, r.Err())
			} else {
				var se *patterns.SagaError
				require.ErrorAs(t, r.Err(), &se)
				require.Equal(t, c.failedAt, se.Step)
				require.ErrorIs(t, r.Err(), c.failure)
			}
			t.Log(r)
		})
	}
}

func TestSagaResultIsImmutable(t *testing.T) {
	t.Parallel()
	fail := errors.New("x")
	r := patterns.NewSaga[int]("s").
		Step("a", func(context.Context, int) error { return nil }).CompensateWith(func(context.Context, int) error { return fail }).
		Step("b", func(context.Context, int) error { return fail }).
		Run(t.Context(), 0)
	r.Completed()[0] = "changed"
	r.Unresolved()[0].Step = "changed"
	require.Equal(t, []string{"a"}, r.Completed())
	require.Equal(t, "a", r.Unresolved()[0].Step)
}

// TestSagaCompensatesAfterCancellation: the caller's cancellation does
// not cut compensations short; the compensation timeout bounds them.
func TestSagaCompensatesAfterCancellation(t *testing.T) {
	t.Parallel()
	ctx, cancel := context.WithCancel(t.Context())
	var compCtxErr error
	var deadline time.Time
	r := patterns.NewSaga[int]("s").CompensationTimeout(time.Minute).
		Step("pay", func(context.Context, int) error { return nil }).
		CompensateWith(func(ctx context.Context, _ int) error {
			compCtxErr = ctx.Err()
			deadline, _ = ctx.Deadline()
			return nil
		}).
		Step("wait", func(ctx context.Context, _ int) error { cancel(); <-ctx.Done(); return ctx.Err() }).
		Step("never", func(context.Context, int) error { panic("must not run") }).
		Run(ctx, 0)
	require.True(t, r.Compensated())
	require.Equal(t, "wait", r.FailedAt())
	require.ErrorIs(t, r.Failure(), context.Canceled)
	require.NoError(t, compCtxErr, "the compensation ran on a live context")
	require.WithinDuration(t, time.Now().Add(time.Minute), deadline, 5*time.Second, "bounded by the compensation timeout")

	// A context already done before a step starts fails that step.
	r = patterns.NewSaga[int]("s").Step("a", func(context.Context, int) error { return nil }).Run(ctx, 0)
	require.Equal(t, "a", r.FailedAt())
	require.ErrorIs(t, r.Failure(), context.Canceled)
}

func TestSagaCompensationTimeout(t *testing.T) {
	t.Parallel()
	r := patterns.NewSaga[int]("s").CompensationTimeout(20*time.Millisecond).
		Step("pay", func(context.Context, int) error { return nil }).
		CompensateWith(func(ctx context.Context, _ int) error { <-ctx.Done(); return ctx.Err() }).
		Step("fail", func(context.Context, int) error { return errors.New("x") }).
		Run(t.Context(), 0)
	require.True(t, r.HasUnresolved())
	require.ErrorIs(t, r.Unresolved()[0].Err, context.DeadlineExceeded)
	require.ErrorIs(t, patterns.NewSaga[int]("s").CompensationTimeout(0).Run(t.Context(), 0).Failure(), patterns.ErrInvalidSaga)
}

// TestSagaPanicPropagates: a panic is not an ordinary failure: nothing is
// compensated and it reaches the caller.
func TestSagaPanicPropagates(t *testing.T) {
	t.Parallel()
	compensated := false
	s := patterns.NewSaga[int]("s").
		Step("pay", func(context.Context, int) error { return nil }).
		CompensateWith(func(context.Context, int) error { compensated = true; return nil }).
		Step("boom", func(context.Context, int) error { panic("bug") })
	require.PanicsWithValue(t, "bug", func() { s.Run(t.Context(), 0) })
	require.False(t, compensated)
}
