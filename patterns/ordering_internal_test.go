package patterns

import (
	"context"
	"sync"
	"testing"

	"github.com/stretchr/testify/require"
)

// TestOrderingForgetsIdleKeys: per-key state lives only while a message
// with the key is running or waiting.
func TestOrderingForgetsIdleKeys(t *testing.T) {
	t.Parallel()
	l := &orderingLocks{keys: map[string]*orderingSlot{}}
	var wg sync.WaitGroup
	for i := range 100 {
		wg.Go(func() {
			key := string(rune('a' + i%5))
			slot, err := l.acquire(context.Background(), key)
			require.NoError(t, err)
			l.release(key, slot)
		})
	}
	wg.Wait()
	require.Empty(t, l.keys)

	held, err := l.acquire(context.Background(), "k")
	require.NoError(t, err)
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	_, err = l.acquire(ctx, "k")
	require.ErrorIs(t, err, context.Canceled, "a waiter gives up with its context")
	require.Equal(t, 1, l.keys["k"].refs)
	l.release("k", held)
	require.Empty(t, l.keys)
}
