package patterns_test

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/acemq/acemq-flow/broker"
	"github.com/acemq/acemq-flow/internal/brokertest"
	"github.com/acemq/acemq-flow/internal/oncetest"
	"github.com/acemq/acemq-flow/patterns"
)

// TestOnceSurvivesACrashAtEachPoint: the executor on the in-memory store,
// a worker dying at each point of its sequence, on both transports
// (persistence runs the same suite on the PostgreSQL store).
func TestOnceSurvivesACrashAtEachPoint(t *testing.T) {
	brokertest.Each(t, func(t *testing.T, h *brokertest.Harness) {
		const lease = 300 * time.Millisecond
		store, err := patterns.NewInMemoryIdempotencyStore(lease)
		require.NoError(t, err)
		oncetest.Run(t, h, oncetest.Config{
			Store: func(*testing.T) patterns.IdempotencyStore { return store },
			Lease: lease,
		})
	})
}

// TestOnceRefuses: a unit missing a part, and a unit in a transaction on a
// store that runs none, are refused before anything is claimed.
func TestOnceRefuses(t *testing.T) {
	t.Parallel()
	store, err := patterns.NewInMemoryIdempotencyStore(time.Minute)
	require.NoError(t, err)
	o, err := patterns.NewOnce(store, patterns.OnceConfig{})
	require.NoError(t, err)
	require.False(t, o.Transactional())
	ran := false
	ok := patterns.Unit[string]{
		Key:      "k",
		Do:       func(context.Context) (string, error) { ran = true; return "x", nil },
		Encode:   func(s string) ([]byte, error) { return []byte(s), nil },
		Decode:   func(b []byte) (string, error) { return string(b), nil },
		CarryOut: func(context.Context, string) error { return nil },
	}
	for name, u := range map[string]patterns.Unit[string]{
		"no key":      {Do: ok.Do, Encode: ok.Encode, Decode: ok.Decode, CarryOut: ok.CarryOut},
		"no do":       {Key: "k", Encode: ok.Encode, Decode: ok.Decode, CarryOut: ok.CarryOut},
		"no carryout": {Key: "k", Do: ok.Do, Encode: ok.Encode, Decode: ok.Decode},
		"in a transaction": {Key: "k", InTx: true, Do: ok.Do, Encode: ok.Encode, Decode: ok.Decode,
			CarryOut: ok.CarryOut},
	} {
		d := patterns.Run(context.Background(), o, u)
		require.ErrorIs(t, d.Err, patterns.ErrStore, name)
		require.Zero(t, d.Claim, name)
	}
	require.False(t, ran)
	c, err := store.Claim(context.Background(), "k")
	require.NoError(t, err)
	require.Equal(t, patterns.ClaimClaimed, c, "nothing was claimed")
	_, err = patterns.NewOnce(nil, patterns.OnceConfig{})
	require.ErrorIs(t, err, broker.ErrInvalidOption)
	_, err = patterns.NewOnce(store, patterns.OnceConfig{StoreTimeout: -time.Second})
	require.ErrorIs(t, err, broker.ErrInvalidOption)
}

// TestOnceWithAStoreThatKeepsNothing: a store with only FirstTime and
// Forget cannot keep a result, so a unit whose carrying out fails has its
// key let go, and the retry does the work again instead of losing what it
// produced.
func TestOnceWithAStoreThatKeepsNothing(t *testing.T) {
	t.Parallel()
	mem, err := patterns.NewInMemoryIdempotencyStore(time.Minute)
	require.NoError(t, err)
	o, err := patterns.NewOnce(firstTimeOnly{mem}, patterns.OnceConfig{})
	require.NoError(t, err)
	ctx := context.Background()
	works, fail := 0, true
	u := patterns.Unit[string]{
		Key:    "k",
		Do:     func(context.Context) (string, error) { works++; return "x", nil },
		Encode: func(s string) ([]byte, error) { return []byte(s), nil },
		Decode: func(b []byte) (string, error) { return string(b), nil },
		CarryOut: func(context.Context, string) error {
			if fail {
				return errors.New("the broker is away")
			}
			return nil
		},
	}
	d := patterns.Run(ctx, o, u)
	require.Error(t, d.Err)
	require.False(t, d.Kept, "nothing kept: the key was let go")
	fail = false
	d = patterns.Run(ctx, o, u)
	require.NoError(t, d.Err)
	require.Equal(t, patterns.ClaimClaimed, d.Claim)
	require.Equal(t, 2, works, "the work was done again")
}

// firstTimeOnly hides every method of a store but IdempotencyStore's.
type firstTimeOnly struct {
	s *patterns.InMemoryIdempotencyStore
}

func (f firstTimeOnly) FirstTime(ctx context.Context, key string) (bool, error) {
	return f.s.FirstTime(ctx, key)
}

func (f firstTimeOnly) Forget(ctx context.Context, key string) error { return f.s.Forget(ctx, key) }

// TestOnceGoesOnFromAClaimMade: a unit whose caller claimed its key
// (Unit.Claimed) is not claimed again: claimed, its work is done;
// a duplicate, what was kept is carried out; in progress, nothing runs.
func TestOnceGoesOnFromAClaimMade(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	store, err := patterns.NewInMemoryIdempotencyStore(time.Minute)
	require.NoError(t, err)
	o, err := patterns.NewOnce(store, patterns.OnceConfig{})
	require.NoError(t, err)
	c, err := store.Claim(ctx, "k")
	require.NoError(t, err)
	require.Equal(t, patterns.ClaimClaimed, c)
	var works, carried int
	unit := func(claimed patterns.Claim) patterns.Unit[string] {
		return patterns.Unit[string]{
			Key: "k", Claimed: claimed,
			Do:       func(context.Context) (string, error) { works++; return "x", nil },
			Encode:   func(s string) ([]byte, error) { return []byte(s), nil },
			Decode:   func(b []byte) (string, error) { return string(b), nil },
			CarryOut: func(context.Context, string) error { carried++; return nil },
		}
	}
	d := patterns.Run(ctx, o, unit(patterns.ClaimInProgress))
	require.Equal(t, patterns.ClaimInProgress, d.Claim)
	require.Zero(t, works+carried, "somebody else holds it: nothing runs")

	d = patterns.Run(ctx, o, unit(patterns.ClaimClaimed))
	require.NoError(t, d.Err)
	require.Equal(t, patterns.ClaimClaimed, d.Claim)
	require.True(t, d.Kept)
	require.Equal(t, 1, works, "the store, asked, would have said in progress: it was not asked")

	d = patterns.Run(ctx, o, unit(patterns.ClaimDuplicate))
	require.NoError(t, d.Err)
	require.True(t, d.Resent, "what was kept is carried out again")
	require.Equal(t, "x", d.Result)
	require.Equal(t, 1, works)
	require.Equal(t, 2, carried)
}

// TestOnceBeginThenFinish: Begin does the work and leaves it Pending, the
// key still claimed (another delivery is told it is in progress) and
// nothing kept or sent; Finish, on another goroutine, keeps and carries it
// out, after which the key is a duplicate whose kept result a redelivery
// sends again. A unit done before comes back from Begin finished.
func TestOnceBeginThenFinish(t *testing.T) {
	t.Parallel()
	store, err := patterns.NewInMemoryIdempotencyStore(time.Minute)
	require.NoError(t, err)
	o, err := patterns.NewOnce(store, patterns.OnceConfig{})
	require.NoError(t, err)
	ctx := context.Background()
	var worked, sent int
	u := patterns.Unit[string]{
		Key:      "k",
		Do:       func(context.Context) (string, error) { worked++; return "x", nil },
		Encode:   func(s string) ([]byte, error) { return []byte(s), nil },
		Decode:   func(b []byte) (string, error) { return string(b), nil },
		CarryOut: func(context.Context, string) error { sent++; return nil },
	}
	d := patterns.Begin(ctx, o, u)
	require.True(t, d.Pending)
	require.False(t, d.Kept)
	require.Equal(t, "x", d.Result)
	require.Equal(t, 1, worked)
	require.Zero(t, sent, "nothing carried out before Finish")
	require.Equal(t, patterns.ClaimInProgress, patterns.Begin(ctx, o, u).Claim, "the key stays claimed")

	finished := make(chan patterns.Done[string])
	go func() { finished <- patterns.Finish(ctx, o, u, d) }()
	d = <-finished
	require.False(t, d.Pending)
	require.True(t, d.Kept)
	require.NoError(t, d.Err)
	require.Equal(t, 1, sent)

	again := patterns.Begin(ctx, o, u)
	require.False(t, again.Pending, "done before: carried out again in Begin")
	require.Equal(t, patterns.ClaimDuplicate, again.Claim)
	require.True(t, again.Resent)
	require.Equal(t, patterns.Finish(ctx, o, u, again), again, "Finish leaves what is not Pending as it is")
	require.Equal(t, 1, worked)
	require.Equal(t, 2, sent)
}
