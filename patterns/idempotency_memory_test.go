package patterns

import (
	"context"
	"fmt"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
)

func TestInMemoryIdempotencyStoreWindowAndSweep(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	s, err := NewInMemoryIdempotencyStore(time.Minute)
	require.NoError(t, err)
	now := time.Unix(1_700_000_000, 0)
	s.now = func() time.Time { return now }
	claim := func(k string) Claim {
		c, err := s.Claim(ctx, k)
		require.NoError(t, err)
		return c
	}

	require.Equal(t, ClaimClaimed, claim("a"))
	require.Equal(t, ClaimInProgress, claim("a"))
	require.NoError(t, s.Confirm(ctx, "a"))
	require.Equal(t, ClaimDuplicate, claim("a"))
	require.NoError(t, s.Forget(ctx, "a"))
	require.Equal(t, ClaimDuplicate, claim("a"), "a confirmation is never forgotten")

	require.Equal(t, ClaimClaimed, claim("b"))
	require.NoError(t, s.Forget(ctx, "b"))
	require.Equal(t, ClaimClaimed, claim("b"), "a forgotten claim can run again")

	now = now.Add(61 * time.Second)
	require.Equal(t, ClaimClaimed, claim("b"), "the window is also the claim's lease")
	require.Equal(t, ClaimClaimed, claim("a"), "and how long a confirmation is remembered")

	// A steady stream never grows the store beyond one window of keys.
	for i := range 10_000 {
		now = now.Add(time.Second)
		claim(fmt.Sprintf("k-%d", i))
	}
	require.LessOrEqual(t, s.Len(), 61)
	require.LessOrEqual(t, len(s.expiries), 200)

	_, err = NewInMemoryIdempotencyStore(-time.Second)
	require.Error(t, err)
	d, err := NewInMemoryIdempotencyStore(0)
	require.NoError(t, err)
	require.Equal(t, DefaultIdempotencyWindow, d.window)
}
