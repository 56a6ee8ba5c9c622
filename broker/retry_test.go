package broker

import (
	"errors"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
)

func TestRetryPolicyDelay(t *testing.T) {
	t.Parallel()
	cases := []struct {
		name    string
		p       RetryPolicy
		attempt int
		want    time.Duration
	}{
		{"default first", DefaultRetry(), 1, time.Second},
		{"default second", DefaultRetry(), 2, 2 * time.Second},
		{"default fourth", DefaultRetry(), 4, 8 * time.Second},
		{"default capped", DefaultRetry(), 20, 5 * time.Minute},
		{"huge attempt does not overflow", DefaultRetry(), 10000, 5 * time.Minute},
		{"constant", Constant(3, 2*time.Second), 3, 2 * time.Second},
		{"at once", Constant(3, 0), 2, 0},
		{"custom cap", Exponential(10, time.Second).WithMax(3 * time.Second), 5, 3 * time.Second},
	}
	for _, c := range cases {
		require.Equal(t, c.want, c.p.Delay(c.attempt), c.name)
	}
}

func TestRetryPolicyGiveUp(t *testing.T) {
	t.Parallel()
	now := time.Now()
	p := Exponential(3, time.Second).WithMaxAge(time.Hour)
	require.Empty(t, p.giveUp(1, now, now))
	require.Empty(t, p.giveUp(2, now, now))
	require.Contains(t, p.giveUp(3, now, now), "3 of 3 attempts")
	require.Contains(t, p.giveUp(1, now.Add(-2*time.Hour), now), "max age")
	require.Contains(t, NoRetry().giveUp(1, now, now), "1 of 1")

	require.Empty(t, p.spent(3, now, now), "the last attempt still runs")
	require.Contains(t, p.spent(4, now, now), "attempt 4 of 3")
	require.Contains(t, p.spent(1, now.Add(-2*time.Hour), now), "max age")
}

func TestRetryPolicyValidate(t *testing.T) {
	t.Parallel()
	require.NoError(t, DefaultRetry().Validate())
	require.NoError(t, NoRetry().Validate())
	for name, p := range map[string]RetryPolicy{
		"zero attempts":  {},
		"negative delay": {Attempts: 2, Initial: -time.Second},
		"shrinking":      {Attempts: 2, Initial: time.Second, Multiplier: 0.5},
		// The ladder's shortest rung is a second: 500ms would arrive after
		// one, so it is refused rather than silently stretched.
		"sub-second delay": Constant(3, 500*time.Millisecond),
		"sub-second cap":   Exponential(3, 0).WithMax(time.Millisecond),
	} {
		err := p.Validate()
		require.ErrorIs(t, err, ErrInvalidOption, name)
	}
	err := Constant(3, 500*time.Millisecond).Validate()
	require.ErrorContains(t, err, "delay 500ms: retries ride the scheduler ladder, whose shortest rung is 1s; use 0 (at once) or at least 1s")
	require.NoError(t, Constant(3, 0).Validate(), "0 retries at once")
	require.NoError(t, Constant(3, time.Second).Validate())
	require.True(t, errors.Is(WithRetry(RetryPolicy{}).applyConsume(&consumeConfig{}), ErrInvalidOption))
}

func TestRetryPolicyString(t *testing.T) {
	t.Parallel()
	require.Equal(t, "5 attempts, 1s doubling up to 5m0s", DefaultRetry().String())
	require.Equal(t, "3 attempts, 2s apart", Constant(3, 2*time.Second).String())
	require.Equal(t, "no retry", NoRetry().String())
	require.Equal(t, "4 attempts, 1s x3, at most 1h0m0s old", RetryPolicy{Attempts: 4, Initial: time.Second, Multiplier: 3, MaxAge: time.Hour}.String())
}
