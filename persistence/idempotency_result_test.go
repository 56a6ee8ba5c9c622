package persistence_test

import (
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/acemq/acemq-flow/patterns"
	"github.com/acemq/acemq-flow/persistence"
)

// TestResultStores: both shipped stores keep a completed key's result
// until Confirm, answer a completed key as a duplicate, and keep nothing
// for a key confirmed without one.
func TestResultStores(t *testing.T) {
	t.Parallel()
	mem, err := patterns.NewInMemoryIdempotencyStore(0)
	require.NoError(t, err)
	for name, open := range map[string]func(t *testing.T) patterns.ResultStore{
		"memory": func(*testing.T) patterns.ResultStore { return mem },
		"sql": func(t *testing.T) patterns.ResultStore {
			db := pool(t)
			return idemStore(t, db, tables(t, db), persistence.SQLIdempotencyStoreConfig{})
		},
	} {
		t.Run(name, func(t *testing.T) {
			t.Parallel()
			s := open(t)
			ctx := ctxT(t)
			c, err := s.Claim(ctx, "hop-1")
			require.NoError(t, err)
			require.Equal(t, patterns.ClaimClaimed, c)
			_, ok, err := s.Result(ctx, "hop-1")
			require.NoError(t, err)
			require.False(t, ok, "a claim keeps nothing")

			require.NoError(t, s.Complete(ctx, "hop-1", []byte{0, 1, 0xff}))
			c, err = s.Claim(ctx, "hop-1")
			require.NoError(t, err)
			require.Equal(t, patterns.ClaimDuplicate, c, "completed work is done")
			got, ok, err := s.Result(ctx, "hop-1")
			require.NoError(t, err)
			require.True(t, ok)
			require.Equal(t, []byte{0, 1, 0xff}, got)

			require.NoError(t, s.Confirm(ctx, "hop-1"))
			_, ok, err = s.Result(ctx, "hop-1")
			require.NoError(t, err)
			require.False(t, ok, "confirming lets the result go")
			c, err = s.Claim(ctx, "hop-1")
			require.NoError(t, err)
			require.Equal(t, patterns.ClaimDuplicate, c)

			_, ok, err = s.Result(ctx, "never-seen")
			require.NoError(t, err)
			require.False(t, ok)
		})
	}
}
