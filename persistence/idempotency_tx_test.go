package persistence_test

import (
	"context"
	"errors"
	"sync"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/stretchr/testify/require"

	"github.com/acemq/acemq-flow/patterns"
	"github.com/acemq/acemq-flow/persistence"
)

// TestSQLIdempotencyClaimInTx: ClaimInTx's claim is its transaction. A
// second claim while it is open is told in progress at once (it does not
// wait for the transaction); work that fails leaves the key free, as if
// never claimed; a committed one is a duplicate with its result kept; and
// a transaction left open past the lease is ended by PostgreSQL, which lets
// the key go.
func TestSQLIdempotencyClaimInTx(t *testing.T) {
	t.Parallel()
	db := pool(t)
	tb := tables(t, db)
	ctx := ctxT(t)
	s := idemStore(t, db, tb, persistence.SQLIdempotencyStoreConfig{ClaimTimeout: time.Second})
	other := idemStore(t, db, tb, persistence.SQLIdempotencyStoreConfig{ClaimTimeout: time.Second})

	// Work that fails: rolled back with its claim.
	boom := errors.New("boom")
	c, err := s.ClaimInTx(ctx, "fails", func(context.Context) ([]byte, error) { return nil, boom })
	require.Equal(t, patterns.ClaimClaimed, c)
	require.ErrorIs(t, err, boom)
	require.Equal(t, patterns.ClaimClaimed, claimOf(t, other, "fails"), "nothing was left claimed")

	// While one transaction holds the key, another claim is in progress.
	inside, release := make(chan struct{}), make(chan struct{})
	var releaseOnce sync.Once
	let := func() { releaseOnce.Do(func() { close(release) }) }
	t.Cleanup(let)
	done := make(chan error, 1)
	go func() {
		_, err := s.ClaimInTx(ctx, "k", func(ctx context.Context) ([]byte, error) {
			tx, ok := persistence.Tx(ctx)
			if !ok {
				return nil, errors.New("no transaction in ctx")
			}
			var one int
			if err := tx.QueryRow(ctx, `SELECT 1`).Scan(&one); err != nil {
				return nil, err
			}
			close(inside)
			<-release
			return []byte("result"), nil
		})
		done <- err
	}()
	<-inside
	began := time.Now()
	c, err = other.ClaimInTx(ctx, "k", func(context.Context) ([]byte, error) {
		return nil, errors.New("ran while the other held the key")
	})
	require.NoError(t, err)
	require.Equal(t, patterns.ClaimInProgress, c)
	require.Less(t, time.Since(began), 500*time.Millisecond, "told without waiting for the other transaction")
	require.Equal(t, patterns.ClaimInProgress, claimOf(t, other, "k"), "a claim made apart is in progress too")
	let()
	require.NoError(t, <-done)

	// Committed: a duplicate, its result kept.
	c, err = other.ClaimInTx(ctx, "k", func(context.Context) ([]byte, error) { return nil, errors.New("ran twice") })
	require.NoError(t, err)
	require.Equal(t, patterns.ClaimDuplicate, c)
	got, ok, err := other.Result(ctx, "k")
	require.NoError(t, err)
	require.True(t, ok)
	require.Equal(t, "result", string(got))

	// Done by another while this one worked (its look at the key's row
	// came before the other committed): nothing commits, the claim is lost.
	c, err = s.ClaimInTx(ctx, "raced", func(ctx context.Context) ([]byte, error) {
		_, err := db.Exec(ctx, `INSERT INTO `+pgx.Identifier{tb.Idempotency}.Sanitize()+
			` (key, state, holder, expires_at, result) VALUES ('raced', 'confirmed', 'other', now() + interval '1 hour', 'theirs')`)
		return []byte("mine"), err
	})
	require.Equal(t, patterns.ClaimClaimed, c)
	require.ErrorIs(t, err, patterns.ErrClaimLost)
	got, _, err = other.Result(ctx, "raced")
	require.NoError(t, err)
	require.Equal(t, "theirs", string(got), "the other's result stands")

	// A transaction that stops talking to the database for longer than
	// the lease is ended, and the key with it.
	stuck := make(chan struct{})
	stuckDone := make(chan error, 1)
	go func() {
		_, err := s.ClaimInTx(ctx, "stuck", func(context.Context) ([]byte, error) {
			close(stuck)
			time.Sleep(2500 * time.Millisecond)
			return []byte("late"), nil
		})
		stuckDone <- err
	}()
	<-stuck
	require.Equal(t, patterns.ClaimInProgress, claimOf(t, other, "stuck"))
	require.Eventually(t, func() bool {
		c, err := other.ClaimInTx(ctx, "stuck", func(context.Context) ([]byte, error) { return []byte("taken over"), nil })
		return err == nil && c == patterns.ClaimClaimed
	}, 5*time.Second, 100*time.Millisecond, "the stuck transaction's session was ended after the lease")
	require.Error(t, <-stuckDone, "the stuck worker's commit fails: its session is gone")
	got, _, err = other.Result(ctx, "stuck")
	require.NoError(t, err)
	require.Equal(t, "taken over", string(got))
}
