package storetest

import (
	"context"
	"errors"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/acemq/acemq-flow/broker"
	"github.com/acemq/acemq-flow/patterns"
)

// IdempotencyConfig is what a test asks of the stores it opens.
type IdempotencyConfig struct {
	// Lease is how long a claim lasts before another delivery may take
	// it over.
	Lease time.Duration
	// Retention is how long a confirmed key is remembered.
	Retention time.Duration
}

// IdempotencyStores are the stores of one test, over one new, empty set
// of keys.
type IdempotencyStores struct {
	// Store is the first holder.
	Store patterns.ResultStore
	// Another returns one more holder over Store's keys, a holder of its
	// own (what another worker process has); nil when an instance is the
	// only holder of its keys (patterns.InMemoryIdempotencyStore), which
	// skips the rules between holders.
	Another func() patterns.ResultStore
	// OneWindow says the store has one duration for a claim's lease and a
	// confirmation's retention (InMemoryIdempotencyStore's window), taken
	// from the config's Lease. The suite asks for equal durations
	// everywhere except in the rule that a confirmation outlives the
	// lease, which it skips.
	OneWindow bool
	// Effects, when Store is a patterns.TxStore, write and read the work
	// of its transactions; a TxStore without them fails the suite.
	Effects *TxEffects
}

// TxEffects are the work of a test's CompleteInTx calls, in the store's
// own database.
type TxEffects struct {
	// Write records name as done in the transaction ctx carries, and fails
	// when ctx carries none.
	Write func(ctx context.Context, name string) error
	// Committed lists the names whose transactions committed, in any
	// order.
	Committed func(ctx context.Context) ([]string, error)
}

// IdempotencyOpen opens the stores of one test, configured with cfg, on
// keys of the test's own; what they hold is dropped when t ends.
type IdempotencyOpen func(t *testing.T, cfg IdempotencyConfig) IdempotencyStores

// Idempotency runs the idempotency store suite against the stores open
// returns. The rules are those of patterns.IdempotencyStore, Claimer,
// Confirmer, ResultStore and TxStore and of the seeds: of N concurrent
// claims of a key exactly one is CLAIMED; a live claim is IN_PROGRESS to
// everybody else; a confirmed key is a DUPLICATE for the retention, not
// the lease; a claim whose lease ran out is taken over; Forget gives up
// only the caller's own live claim, never another holder's and never a
// confirmation; Complete keeps a result until Confirm; keys are their
// exact bytes; and, for a TxStore, CompleteInTx commits the work with the
// key or neither, and nothing for a holder whose claim was taken over.
func Idempotency(t *testing.T, open IdempotencyOpen) {
	run(t, open, map[string]func(*testing.T, IdempotencyOpen){
		"one of many concurrent claims wins":                     idemConcurrentClaims,
		"a held key is in progress, a confirmed one a duplicate": idemNotFirst,
		"first time claims once":                                 idemFirstTime,
		"forget frees the holder's own claim":                    idemForgetOwn,
		"forget leaves another holder's claim":                   idemForgetOthers,
		"forget never undoes work done":                          idemForgetDone,
		"an expired claim is taken over":                         idemExpiredTakenOver,
		"the old holder's forget leaves the new claim":           idemOldHolderForgets,
		"a confirmation outlives the lease":                      idemConfirmationOutlivesLease,
		"a confirmation ends with the retention":                 idemRetention,
		"a result is kept until confirmed":                       idemResultKept,
		"a result is kept byte for byte":                         idemResultBytes,
		"an empty result is a result":                            idemEmptyResult,
		"keys are their exact bytes":                             idemKeyBytes,
		"work in a transaction commits with its key":             idemTxCommits,
		"failed work commits nothing":                            idemTxWorkFails,
		"a done key is nobody's to complete":                     idemTxDoneKey,
		"a claim taken over commits nothing":                     idemTxClaimLost,
		"work that returns no result keeps one":                  idemTxEmptyResult,
	})
}

// idem is one test's stores.
type idem struct {
	t   *testing.T
	ctx context.Context
	IdempotencyStores
}

func openIdem(t *testing.T, open IdempotencyOpen, lease, retention time.Duration) *idem {
	t.Helper()
	s := open(t, IdempotencyConfig{Lease: lease, Retention: retention})
	require.NotNil(t, s.Store, "open returned no store")
	return &idem{t: t, ctx: ctxOf(t), IdempotencyStores: s}
}

// another is a further holder; the test is skipped when there is none.
func (s *idem) another() patterns.ResultStore {
	s.t.Helper()
	if s.Another == nil {
		s.t.Skip("IdempotencyStores.Another is nil: an instance is the only holder of its keys")
	}
	return s.Another()
}

// holders are Store and, when the store is shared, n-1 others.
func (s *idem) holders(n int) []patterns.ResultStore {
	hs := []patterns.ResultStore{s.Store}
	for s.Another != nil && len(hs) < n {
		hs = append(hs, s.Another())
	}
	return hs
}

func (s *idem) claim(h patterns.ResultStore, key string) patterns.Claim {
	s.t.Helper()
	c, err := h.Claim(s.ctx, key)
	require.NoError(s.t, err)
	return c
}

func (s *idem) result(h patterns.ResultStore, key string) ([]byte, bool) {
	s.t.Helper()
	r, ok, err := h.Result(s.ctx, key)
	require.NoError(s.t, err)
	return r, ok
}

// takenOver waits until h takes key over, its holder's lease run out.
func (s *idem) takenOver(h patterns.ResultStore, key string) {
	s.t.Helper()
	require.Eventually(s.t, func() bool {
		c, err := h.Claim(s.ctx, key)
		return err == nil && c == patterns.ClaimClaimed
	}, runOut, poll, "the claim on %q was never taken over", key)
}

func idemConcurrentClaims(t *testing.T, open IdempotencyOpen) {
	s := openIdem(t, open, long, long)
	spread, one := s.holders(4), []patterns.ResultStore{s.Store}
	for _, key := range []string{"order-1", "order-2", "order-3", "same-1", "same-2", "same-3"} {
		// The goroutines of one worker share their holder; several
		// workers each have their own.
		hs := spread
		if strings.HasPrefix(key, "same") {
			hs = one
		}
		claims := make([]patterns.Claim, 32)
		errs := make([]error, len(claims))
		var wg sync.WaitGroup
		for i := range claims {
			wg.Go(func() { claims[i], errs[i] = hs[i%len(hs)].Claim(s.ctx, key) })
		}
		wg.Wait()
		winner := -1
		for i, c := range claims {
			require.NoError(t, errs[i], "claim %d of %q", i, key)
			if c == patterns.ClaimClaimed {
				require.Equal(t, -1, winner, "%q claimed twice (%d and %d)", key, winner, i)
				winner = i
				continue
			}
			require.Equal(t, patterns.ClaimInProgress, c, "claim %d of %q", i, key)
		}
		require.NotEqual(t, -1, winner, "nobody claimed %q", key)
		require.NoError(t, hs[winner%len(hs)].Confirm(s.ctx, key))
		for _, h := range hs {
			require.Equal(t, patterns.ClaimDuplicate, s.claim(h, key), "confirmed, to every holder")
		}
	}
}

func idemNotFirst(t *testing.T, open IdempotencyOpen) {
	s := openIdem(t, open, long, long)
	for _, tc := range []struct {
		key    string
		settle func(ctx context.Context, key string) error
		want   patterns.Claim
		why    string
	}{
		{"held", nil, patterns.ClaimInProgress, "a second delivery waits while the first is handled"},
		{"confirmed", s.Store.Confirm, patterns.ClaimDuplicate, "the work was done"},
	} {
		require.Equal(t, patterns.ClaimClaimed, s.claim(s.Store, tc.key))
		if tc.settle != nil {
			require.NoError(t, tc.settle(s.ctx, tc.key))
		}
		require.Equal(t, tc.want, s.claim(s.Store, tc.key), "%s: %s", tc.key, tc.why)
		require.Equal(t, tc.want, s.claim(s.Store, tc.key), "%s: and stays so", tc.key)
		first, err := s.Store.FirstTime(s.ctx, tc.key)
		require.NoError(t, err)
		require.False(t, first, tc.key)
		if s.Another != nil {
			require.Equal(t, tc.want, s.claim(s.Another(), tc.key), "%s: to another holder too", tc.key)
		}
	}
}

func idemFirstTime(t *testing.T, open IdempotencyOpen) {
	s := openIdem(t, open, long, long)
	first := func(key string) bool {
		t.Helper()
		ok, err := s.Store.FirstTime(s.ctx, key)
		require.NoError(t, err)
		return ok
	}
	require.True(t, first("k"))
	require.False(t, first("k"))
	if s.Another != nil {
		ok, err := s.Another().FirstTime(s.ctx, "k")
		require.NoError(t, err)
		require.False(t, ok, "nor to another holder")
	}
	require.Equal(t, patterns.ClaimInProgress, s.claim(s.Store, "k"), "first time took a claim")
	require.NoError(t, s.Store.Forget(s.ctx, "k"))
	require.True(t, first("k"), "a forgotten claim is first time again")
	require.NoError(t, s.Store.Confirm(s.ctx, "k"))
	require.False(t, first("k"))
	require.Equal(t, patterns.ClaimDuplicate, s.claim(s.Store, "k"))
}

func idemForgetOwn(t *testing.T, open IdempotencyOpen) {
	s := openIdem(t, open, long, long)
	require.NoError(t, s.Store.Forget(s.ctx, "never-seen"), "forgetting an unknown key is not an error")
	require.Equal(t, patterns.ClaimClaimed, s.claim(s.Store, "never-seen"))

	require.Equal(t, patterns.ClaimClaimed, s.claim(s.Store, "k"))
	require.NoError(t, s.Store.Forget(s.ctx, "k"))
	require.Equal(t, patterns.ClaimClaimed, s.claim(s.Store, "k"), "its retry can run")
	if s.Another != nil {
		require.NoError(t, s.Store.Forget(s.ctx, "k"))
		require.Equal(t, patterns.ClaimClaimed, s.claim(s.Another(), "k"), "on any holder")
	}
}

func idemForgetOthers(t *testing.T, open IdempotencyOpen) {
	s := openIdem(t, open, long, long)
	other := s.another()
	require.Equal(t, patterns.ClaimClaimed, s.claim(s.Store, "k"))
	require.NoError(t, other.Forget(s.ctx, "k"))
	require.Equal(t, patterns.ClaimInProgress, s.claim(other, "k"), "another holder's forget leaves the claim alone")
	require.Equal(t, patterns.ClaimInProgress, s.claim(s.Store, "k"), "its holder still holds it")
	require.NoError(t, s.Store.Forget(s.ctx, "k"))
	require.Equal(t, patterns.ClaimClaimed, s.claim(other, "k"), "its holder's forget frees it")
}

func idemForgetDone(t *testing.T, open IdempotencyOpen) {
	s := openIdem(t, open, long, long)
	require.Equal(t, patterns.ClaimClaimed, s.claim(s.Store, "confirmed"))
	require.NoError(t, s.Store.Confirm(s.ctx, "confirmed"))
	require.NoError(t, s.Store.Forget(s.ctx, "confirmed"))
	require.Equal(t, patterns.ClaimDuplicate, s.claim(s.Store, "confirmed"), "a confirmation is never forgotten")

	require.Equal(t, patterns.ClaimClaimed, s.claim(s.Store, "completed"))
	require.NoError(t, s.Store.Complete(s.ctx, "completed", []byte("hop")))
	require.NoError(t, s.Store.Forget(s.ctx, "completed"))
	require.Equal(t, patterns.ClaimDuplicate, s.claim(s.Store, "completed"), "nor a completion")
	r, ok := s.result(s.Store, "completed")
	require.True(t, ok, "nor its result")
	require.Equal(t, []byte("hop"), r)
	if s.Another != nil {
		other := s.Another()
		require.NoError(t, other.Forget(s.ctx, "confirmed"))
		require.NoError(t, other.Forget(s.ctx, "completed"))
		require.Equal(t, patterns.ClaimDuplicate, s.claim(other, "confirmed"), "by any holder")
		require.Equal(t, patterns.ClaimDuplicate, s.claim(other, "completed"))
	}
}

func idemExpiredTakenOver(t *testing.T, open IdempotencyOpen) {
	s := openIdem(t, open, short, short)
	require.Equal(t, patterns.ClaimClaimed, s.claim(s.Store, "k"))
	require.Equal(t, patterns.ClaimInProgress, s.claim(s.Store, "k"))
	s.takenOver(s.Store, "k")
	require.Equal(t, patterns.ClaimInProgress, s.claim(s.Store, "k"), "the new claim is live")
}

func idemOldHolderForgets(t *testing.T, open IdempotencyOpen) {
	s := openIdem(t, open, short, short)
	// A crashed holder's claim goes to another holder, and the old
	// holder's forget cannot undo the new claim.
	crashed, other := s.Store, s.another()
	require.Equal(t, patterns.ClaimClaimed, s.claim(crashed, "j"))
	require.Equal(t, patterns.ClaimInProgress, s.claim(other, "j"))
	s.takenOver(other, "j")
	require.NoError(t, crashed.Forget(s.ctx, "j"))
	require.Equal(t, patterns.ClaimInProgress, s.claim(crashed, "j"), "the old holder's forget left the new claim")
	require.NoError(t, other.Confirm(s.ctx, "j"))
	require.Equal(t, patterns.ClaimDuplicate, s.claim(crashed, "j"))
}

func idemConfirmationOutlivesLease(t *testing.T, open IdempotencyOpen) {
	s := openIdem(t, open, short, long)
	if s.OneWindow {
		t.Skip("IdempotencyStores.OneWindow: the lease is the retention")
	}
	require.Equal(t, patterns.ClaimClaimed, s.claim(s.Store, "lease"))
	for _, k := range []string{"confirmed", "completed"} {
		require.Equal(t, patterns.ClaimClaimed, s.claim(s.Store, k))
	}
	require.NoError(t, s.Store.Confirm(s.ctx, "confirmed"))
	require.NoError(t, s.Store.Complete(s.ctx, "completed", []byte("hop")))
	// A claim made before them is the clock: once it is taken over, a
	// lease has passed since they were done.
	s.takenOver(s.Store, "lease")
	require.Equal(t, patterns.ClaimDuplicate, s.claim(s.Store, "confirmed"), "held for the retention, not the lease")
	require.Equal(t, patterns.ClaimDuplicate, s.claim(s.Store, "completed"))
	r, ok := s.result(s.Store, "completed")
	require.True(t, ok)
	require.Equal(t, []byte("hop"), r)
}

func idemRetention(t *testing.T, open IdempotencyOpen) {
	s := openIdem(t, open, short, short)
	for _, k := range []string{"confirmed", "completed"} {
		require.Equal(t, patterns.ClaimClaimed, s.claim(s.Store, k))
	}
	require.NoError(t, s.Store.Confirm(s.ctx, "confirmed"))
	require.NoError(t, s.Store.Complete(s.ctx, "completed", []byte("hop")))
	require.Equal(t, patterns.ClaimDuplicate, s.claim(s.Store, "confirmed"))
	_, ok := s.result(s.Store, "completed")
	require.True(t, ok)
	// A duplicate arriving after the retention is handled again, and a
	// completed key's result goes with it.
	require.Eventually(t, func() bool {
		_, ok, err := s.Store.Result(s.ctx, "completed")
		return err == nil && !ok
	}, runOut, poll, "the result outlived the retention")
	s.takenOver(s.Store, "confirmed")
	s.takenOver(s.Store, "completed")
	_, ok = s.result(s.Store, "completed")
	require.False(t, ok, "a new claim keeps nothing of the old one")
}

func idemResultKept(t *testing.T, open IdempotencyOpen) {
	s := openIdem(t, open, long, long)
	_, ok := s.result(s.Store, "never-seen")
	require.False(t, ok)
	require.Equal(t, patterns.ClaimClaimed, s.claim(s.Store, "hop-1"))
	_, ok = s.result(s.Store, "hop-1")
	require.False(t, ok, "a claim keeps nothing")

	require.NoError(t, s.Store.Complete(s.ctx, "hop-1", []byte("next message")))
	require.Equal(t, patterns.ClaimDuplicate, s.claim(s.Store, "hop-1"), "completed work is done")
	r, ok := s.result(s.Store, "hop-1")
	require.True(t, ok)
	require.Equal(t, []byte("next message"), r)
	if s.Another != nil {
		r, ok = s.result(s.Another(), "hop-1")
		require.True(t, ok, "a redelivery to another holder finds it")
		require.Equal(t, []byte("next message"), r)
	}

	require.NoError(t, s.Store.Confirm(s.ctx, "hop-1"))
	_, ok = s.result(s.Store, "hop-1")
	require.False(t, ok, "confirming lets the result go")
	require.Equal(t, patterns.ClaimDuplicate, s.claim(s.Store, "hop-1"), "and keeps the key done")

	require.Equal(t, patterns.ClaimClaimed, s.claim(s.Store, "confirmed"))
	require.NoError(t, s.Store.Confirm(s.ctx, "confirmed"))
	_, ok = s.result(s.Store, "confirmed")
	require.False(t, ok, "a key confirmed without a result keeps none")
}

func idemResultBytes(t *testing.T, open IdempotencyOpen) {
	s := openIdem(t, open, long, long)
	want := []byte{0, 1, 0xff, 0xfe, 'x', 0}
	given := append([]byte(nil), want...)
	require.Equal(t, patterns.ClaimClaimed, s.claim(s.Store, "k"))
	require.NoError(t, s.Store.Complete(s.ctx, "k", given))
	given[0] = 'X'
	r, ok := s.result(s.Store, "k")
	require.True(t, ok)
	require.Equal(t, want, r, "what was given, not what the caller changed it to since")
	r[1] = 'Y'
	r, ok = s.result(s.Store, "k")
	require.True(t, ok)
	require.Equal(t, want, r, "what was kept, not what a reader changed it to")
}

func idemEmptyResult(t *testing.T, open IdempotencyOpen) {
	s := openIdem(t, open, long, long)
	for key, result := range map[string][]byte{"nil": nil, "empty": {}} {
		require.Equal(t, patterns.ClaimClaimed, s.claim(s.Store, key))
		require.NoError(t, s.Store.Complete(s.ctx, key, result))
		r, ok := s.result(s.Store, key)
		require.True(t, ok, "%s: completed with an empty result, which is kept", key)
		require.Empty(t, r)
		require.Equal(t, patterns.ClaimDuplicate, s.claim(s.Store, key))
	}
}

func idemKeyBytes(t *testing.T, open IdempotencyOpen) {
	s := openIdem(t, open, long, long)
	odd := string([]byte{0xff, 0x00, 'k'})
	for _, k := range []string{odd, "k", "K", "k ", "ké", "k\x00"} {
		require.Equal(t, patterns.ClaimClaimed, s.claim(s.Store, k), "%q is a key of its own", k)
	}
	require.Equal(t, patterns.ClaimInProgress, s.claim(s.Store, odd))
	require.NoError(t, s.Store.Confirm(s.ctx, odd))
	require.Equal(t, patterns.ClaimDuplicate, s.claim(s.Store, odd))
	require.Equal(t, patterns.ClaimInProgress, s.claim(s.Store, "k\x00"), "confirming one key confirms no other")
	if s.Another != nil {
		require.Equal(t, patterns.ClaimDuplicate, s.claim(s.Another(), odd), "the same bytes on another holder")
	}
}

// tx is the test's TxStore and its effects; the test is skipped when the
// store is not one.
func (s *idem) tx() (patterns.TxStore, *TxEffects) {
	s.t.Helper()
	txs, ok := s.Store.(patterns.TxStore)
	if !ok {
		s.t.Skip("the store is not a patterns.TxStore")
	}
	require.NotNil(s.t, s.Effects, "a TxStore needs IdempotencyStores.Effects")
	return txs, s.Effects
}

func (s *idem) committed(e *TxEffects) []string {
	s.t.Helper()
	names, err := e.Committed(s.ctx)
	require.NoError(s.t, err)
	return names
}

// work writes name and returns result.
func work(e *TxEffects, name string, result []byte) func(context.Context) ([]byte, error) {
	return func(ctx context.Context) ([]byte, error) {
		return result, e.Write(ctx, name)
	}
}

func idemTxCommits(t *testing.T, open IdempotencyOpen) {
	s := openIdem(t, open, long, long)
	txs, e := s.tx()
	require.Equal(t, patterns.ClaimClaimed, s.claim(txs, "k"))
	require.NoError(t, txs.CompleteInTx(s.ctx, "k", work(e, "k's work", []byte("hop"))))
	require.Equal(t, []string{"k's work"}, s.committed(e))
	r, ok := s.result(txs, "k")
	require.True(t, ok, "the result is kept with the work")
	require.Equal(t, []byte("hop"), r)
	require.Equal(t, patterns.ClaimDuplicate, s.claim(txs, "k"))
	if s.Another != nil {
		require.Equal(t, patterns.ClaimDuplicate, s.claim(s.Another(), "k"))
	}
	require.ErrorIs(t, txs.CompleteInTx(s.ctx, "k", work(e, "again", nil)), patterns.ErrClaimLost, "a done key is nobody's to complete again")
	require.Equal(t, []string{"k's work"}, s.committed(e))
	require.ErrorIs(t, txs.CompleteInTx(s.ctx, "k", nil), broker.ErrInvalidOption, "no work")
}

func idemTxWorkFails(t *testing.T, open IdempotencyOpen) {
	s := openIdem(t, open, long, long)
	txs, e := s.tx()
	require.Equal(t, patterns.ClaimClaimed, s.claim(txs, "k"))
	boom := errors.New("boom")
	err := txs.CompleteInTx(s.ctx, "k", func(ctx context.Context) ([]byte, error) {
		require.NoError(t, e.Write(ctx, "rolled back"))
		return []byte("hop"), boom
	})
	require.ErrorIs(t, err, boom, "work's error, as it is")
	require.Empty(t, s.committed(e), "the failed work's write was rolled back")
	_, ok := s.result(txs, "k")
	require.False(t, ok, "nothing kept")
	if s.Another != nil {
		other := s.Another()
		require.Equal(t, patterns.ClaimInProgress, s.claim(other, "k"), "the claim stays its holder's")
		require.NoError(t, txs.Forget(s.ctx, "k"))
		require.Equal(t, patterns.ClaimClaimed, s.claim(other, "k"), "for its holder to let go")
	}
}

func idemTxDoneKey(t *testing.T, open IdempotencyOpen) {
	s := openIdem(t, open, long, long)
	txs, e := s.tx()
	require.Equal(t, patterns.ClaimClaimed, s.claim(txs, "k"))
	require.NoError(t, txs.Confirm(s.ctx, "k"))
	require.ErrorIs(t, txs.CompleteInTx(s.ctx, "k", work(e, "again", nil)), patterns.ErrClaimLost)
	require.ErrorIs(t, txs.CompleteInTx(s.ctx, "never-claimed", work(e, "unclaimed", nil)), patterns.ErrClaimLost)
	require.Empty(t, s.committed(e))
}

func idemTxClaimLost(t *testing.T, open IdempotencyOpen) {
	s := openIdem(t, open, short, short)
	txs, e := s.tx()
	slow := txs
	fast, ok := s.another().(patterns.TxStore)
	require.True(t, ok, "another holder of a TxStore is one")
	require.Equal(t, patterns.ClaimClaimed, s.claim(slow, "k"))
	s.takenOver(fast, "k")
	require.ErrorIs(t, slow.CompleteInTx(s.ctx, "k", work(e, "slow", []byte("slow's"))), patterns.ErrClaimLost)
	require.Empty(t, s.committed(e), "the holder that lost its claim applied nothing")
	require.NoError(t, fast.CompleteInTx(s.ctx, "k", work(e, "fast", []byte("fast's"))))
	require.Equal(t, []string{"fast"}, s.committed(e), "of two holders of one key, one applied its work")
	r, ok := s.result(slow, "k")
	require.True(t, ok)
	require.Equal(t, []byte("fast's"), r)
	require.Equal(t, patterns.ClaimDuplicate, s.claim(slow, "k"), "the key is done")
}

func idemTxEmptyResult(t *testing.T, open IdempotencyOpen) {
	s := openIdem(t, open, long, long)
	txs, e := s.tx()
	require.Equal(t, patterns.ClaimClaimed, s.claim(txs, "k"))
	require.NoError(t, txs.CompleteInTx(s.ctx, "k", work(e, "k", nil)))
	r, ok := s.result(txs, "k")
	require.True(t, ok, "an empty result is kept")
	require.Empty(t, r)
}
