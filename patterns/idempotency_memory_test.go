package patterns

import (
	"context"
	"fmt"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
)

// TestInMemoryIdempotencyStoreSweepsAsItGoes: the store's rules are the
// conformance suite's (TestInMemoryIdempotencyStoreConformance); its own
// are that it sweeps as it goes and how its window is given.
func TestInMemoryIdempotencyStoreSweepsAsItGoes(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	s, err := NewInMemoryIdempotencyStore(time.Minute)
	require.NoError(t, err)
	now := time.Unix(1_700_000_000, 0)
	s.now = func() time.Time { return now }

	// A steady stream never grows the store beyond one window of keys.
	for i := range 10_000 {
		now = now.Add(time.Second)
		c, err := s.Claim(ctx, fmt.Sprintf("k-%d", i))
		require.NoError(t, err)
		require.Equal(t, ClaimClaimed, c)
	}
	require.LessOrEqual(t, s.Len(), 61)
	require.LessOrEqual(t, len(s.expiries), 200)

	_, err = NewInMemoryIdempotencyStore(-time.Second)
	require.Error(t, err)
	d, err := NewInMemoryIdempotencyStore(0)
	require.NoError(t, err)
	require.Equal(t, DefaultIdempotencyWindow, d.window)
}
