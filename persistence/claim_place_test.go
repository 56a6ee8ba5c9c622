package persistence_test

import (
	"context"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/acemq/acemq-flow/engine/journal"
	"github.com/acemq/acemq-flow/engine/journal/journaltest"
	"github.com/acemq/acemq-flow/patterns"
	"github.com/acemq/acemq-flow/persistence"
)

// placesThroughClaims is a journal's LimitStore whose places are taken
// with ClaimPlace and given back with ConfirmReleasing (each holder's key
// claimed and confirmed with it), as a worker's limited steps do: the
// limits' conformance suite then holds for those statements too.
type placesThroughClaims struct {
	*persistence.SQLJournal
	store *persistence.SQLIdempotencyStore
}

func (p placesThroughClaims) Acquire(ctx context.Context, s journal.Slot, parked []byte) (bool, error) {
	granted, _, err := p.store.ClaimPlace(ctx, p.SQLJournal, s, parked, s.Holder)
	return granted, err
}

func (p placesThroughClaims) Release(ctx context.Context, s journal.Slot) ([][]byte, error) {
	return p.store.ConfirmReleasing(ctx, s.Holder, p.SQLJournal, s)
}

func TestSQLClaimPlaceLimitConformance(t *testing.T) {
	t.Parallel()
	db := pool(t)
	journaltest.Limits(t, func(t *testing.T) journal.LimitStore {
		tb := tables(t, db)
		return placesThroughClaims{sqlJournal(t, db, tb, persistence.SQLJournalConfig{}), idemStore(t, db, tb, persistence.SQLIdempotencyStoreConfig{})}
	})
}

// TestSQLClaimPlace: the claim is made only with a place, answers as
// Claim does, and its confirm gives the place back to the key's waiter.
func TestSQLClaimPlace(t *testing.T) {
	t.Parallel()
	db := pool(t)
	tb := tables(t, db)
	ctx := ctxT(t)
	j := sqlJournal(t, db, tb, persistence.SQLJournalConfig{})
	s, other := idemStore(t, db, tb, persistence.SQLIdempotencyStoreConfig{}), idemStore(t, db, tb, persistence.SQLIdempotencyStoreConfig{})
	require.True(t, s.ClaimsPlaces(j))
	slot := func(holder string) journal.Slot {
		return journal.Slot{Flow: "f", Step: "s", Key: "acme", Holder: holder, RunID: "run-" + holder, Limit: 1}
	}

	granted, c, err := s.ClaimPlace(ctx, j, slot("a"), []byte("msg a"), "a")
	require.NoError(t, err)
	require.True(t, granted)
	require.Equal(t, patterns.ClaimClaimed, c)
	c, err = other.Claim(ctx, "a")
	require.NoError(t, err)
	require.Equal(t, patterns.ClaimInProgress, c, "the claim was made with the place")

	granted, c, err = s.ClaimPlace(ctx, j, slot("b"), []byte("msg b"), "b")
	require.NoError(t, err)
	require.False(t, granted, "key acme's one place is a's")
	require.Zero(t, c)
	c, err = other.Claim(ctx, "b")
	require.NoError(t, err)
	require.Equal(t, patterns.ClaimClaimed, c, "a waiter claims nothing")

	send, err := s.ConfirmReleasing(ctx, "a", j, slot("a"))
	require.NoError(t, err)
	require.Equal(t, [][]byte{[]byte("msg b")}, send, "a's place goes to b, whose message is sent")
	c, err = other.Claim(ctx, "a")
	require.NoError(t, err)
	require.Equal(t, patterns.ClaimDuplicate, c, "a's work is confirmed")

	granted, c, err = s.ClaimPlace(ctx, j, slot("b"), []byte("msg b"), "b")
	require.NoError(t, err)
	require.True(t, granted, "b comes with the place it was handed")
	require.Equal(t, patterns.ClaimInProgress, c, "b's key is claimed by the other store: looked up as Claim does")

	send, err = s.ConfirmReleasing(ctx, "b", j, slot("b"))
	require.NoError(t, err)
	require.Empty(t, send)
	granted, c, err = s.ClaimPlace(ctx, j, slot("c"), []byte("msg c"), "c")
	require.NoError(t, err)
	require.True(t, granted, "b gave its place back")
	require.Equal(t, patterns.ClaimClaimed, c)

	send, err = s.ConfirmReleasing(ctx, "z", j, slot("z"))
	require.NoError(t, err)
	require.Empty(t, send, "a holder without a place gives nothing back")
	c, err = other.Claim(ctx, "z")
	require.NoError(t, err)
	require.Equal(t, patterns.ClaimDuplicate, c, "and its key is confirmed all the same")
}

// TestSQLClaimPlaceRefuses: limits on another database, or not SQL, and
// a slot journal.CheckSlot refuses.
func TestSQLClaimPlaceRefuses(t *testing.T) {
	t.Parallel()
	db := pool(t)
	tb := tables(t, db)
	ctx := ctxT(t)
	s := idemStore(t, db, tb, persistence.SQLIdempotencyStoreConfig{})
	elsewhere := sqlJournal(t, pool(t), tb, persistence.SQLJournalConfig{})
	mem, err := journal.NewMemory(0)
	require.NoError(t, err)
	ok := journal.Slot{Flow: "f", Step: "s", Key: "k", Holder: "h", RunID: "r", Limit: 1}
	for name, limits := range map[string]journal.LimitStore{"another pool": elsewhere, "a memory journal": mem} {
		require.False(t, s.ClaimsPlaces(limits), name)
		_, _, err := s.ClaimPlace(ctx, limits, ok, nil, "h")
		require.ErrorIs(t, err, persistence.ErrOtherDatabase, name)
		_, err = s.ConfirmReleasing(ctx, "h", limits, ok)
		require.ErrorIs(t, err, persistence.ErrOtherDatabase, name)
	}
	j := sqlJournal(t, db, tb, persistence.SQLJournalConfig{})
	bad := ok
	bad.Limit = 0
	_, _, err = s.ClaimPlace(ctx, j, bad, nil, "h")
	require.ErrorIs(t, err, journal.ErrInvalidLimit)
	_, err = s.ConfirmReleasing(ctx, "h", j, bad)
	require.ErrorIs(t, err, journal.ErrInvalidLimit)
	c, err := s.Claim(ctx, "h")
	require.NoError(t, err)
	require.Equal(t, patterns.ClaimClaimed, c, "nothing was claimed or confirmed")
}
