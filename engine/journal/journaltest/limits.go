package journaltest

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/acemq/acemq-flow/engine/journal"
)

// OpenLimits returns an empty LimitStore for one test; Limits runs its
// tests in parallel, each on a store of its own.
type OpenLimits func(t *testing.T) journal.LimitStore

// Limits runs the limit suite against the LimitStores open returns:
// places up to the limit, waiters parked once and let in in the order
// they came, a redelivery keeping its place, keys apart, handed-out
// messages handed out again until their holder comes, unparking a
// cancelled run, rate turns, many holders at once, and refusals. Every
// LimitStore passes it, so that a limited step behaves the same whichever
// store keeps its limits.
func Limits(t *testing.T, open OpenLimits) {
	tests := map[string]func(*testing.T, journal.LimitStore){
		"places up to the limit":         placesUpToTheLimit,
		"waiters let in in order":        waitersInOrder,
		"a redelivery keeps its place":   redeliveryKeepsItsPlace,
		"keys apart":                     keysApart,
		"a waiter let in by a new limit": waiterComesAgain,
		"handed out again":               handedOutAgain,
		"unpark":                         unpark,
		"rate turns":                     rateTurns,
		"refusals":                       limitRefusals,
		"many holders at once":           func(t *testing.T, s journal.LimitStore) { ManyHolders(t, s, s) },
		"many turns at once":             func(t *testing.T, s journal.LimitStore) { ManyTurns(t, s, s) },
	}
	for name, test := range tests {
		t.Run(name, func(t *testing.T) {
			t.Parallel()
			test(t, open(t))
		})
	}
}

func slot(key, holder string, limit int) journal.Slot {
	return journal.Slot{Flow: "f", Step: "s", Key: key, Holder: holder, RunID: "run-" + holder, Limit: limit}
}

func acquire(t *testing.T, s journal.LimitStore, sl journal.Slot) bool {
	t.Helper()
	ok, err := s.Acquire(context.Background(), sl, []byte("msg "+sl.Holder))
	require.NoError(t, err)
	return ok
}

func release(t *testing.T, s journal.LimitStore, sl journal.Slot) []string {
	t.Helper()
	send, err := s.Release(context.Background(), sl)
	require.NoError(t, err)
	return texts(send)
}

func texts(b [][]byte) []string {
	var out []string
	for _, m := range b {
		out = append(out, string(m))
	}
	return out
}

func placesUpToTheLimit(t *testing.T, s journal.LimitStore) {
	require.True(t, acquire(t, s, slot("k", "a", 2)))
	require.True(t, acquire(t, s, slot("k", "b", 2)))
	require.False(t, acquire(t, s, slot("k", "c", 2)), "a third holder of a key limited to 2 waits")
	require.Equal(t, []string{"msg c"}, release(t, s, slot("k", "a", 2)), "a's place goes to c")
	require.False(t, acquire(t, s, slot("k", "d", 2)), "c has a's place: d waits")
	require.Empty(t, release(t, s, slot("k", "a", 2)), "a released twice frees one place")
}

func waitersInOrder(t *testing.T, s journal.LimitStore) {
	require.True(t, acquire(t, s, slot("k", "a", 1)))
	for _, h := range []string{"w1", "w2", "w3"} {
		require.False(t, acquire(t, s, slot("k", h, 1)))
	}
	require.False(t, acquire(t, s, slot("k", "w1", 1)), "a waiter that comes again keeps its turn")
	holder := "a"
	for _, next := range []string{"w1", "w2", "w3"} {
		require.Equal(t, []string{"msg " + next}, release(t, s, slot("k", holder, 1)), "after %s", holder)
		require.True(t, acquire(t, s, slot("k", next, 1)), "%s was handed the place", next)
		holder = next
	}
	require.Empty(t, release(t, s, slot("k", holder, 1)))
	require.True(t, acquire(t, s, slot("k", "z", 1)), "nobody holds the key any more")
}

func redeliveryKeepsItsPlace(t *testing.T, s journal.LimitStore) {
	require.True(t, acquire(t, s, slot("k", "a", 1)))
	require.True(t, acquire(t, s, slot("k", "a", 1)), "a redelivery of a holder keeps its place")
	require.False(t, acquire(t, s, slot("k", "b", 1)), "and still holds the only one")
	require.Equal(t, []string{"msg b"}, release(t, s, slot("k", "a", 1)))
	require.True(t, acquire(t, s, slot("k", "b", 1)))
	require.True(t, acquire(t, s, slot("k", "b", 1)), "b came back twice")
	require.Empty(t, release(t, s, slot("k", "b", 1)))
}

// waiterComesAgain: a waiter that comes again once a place is free (its
// key's limit raised) takes it, and is not handed another later.
func waiterComesAgain(t *testing.T, s journal.LimitStore) {
	ctx := context.Background()
	require.True(t, acquire(t, s, slot("k", "a", 1)))
	require.False(t, acquire(t, s, slot("k", "b", 1)))
	require.True(t, acquire(t, s, slot("k", "b", 2)), "the limit raised to 2: b takes the free place")
	require.False(t, acquire(t, s, slot("k", "c", 2)), "both places taken")
	require.Equal(t, []string{"msg c"}, release(t, s, slot("k", "a", 2)), "a's place goes to c, not to b again")
	again, err := s.Granted(ctx, 0)
	require.NoError(t, err)
	require.Equal(t, []string{"msg c"}, texts(again), "only c's message is on its way")
	require.True(t, acquire(t, s, slot("k", "c", 2)))
	require.Empty(t, release(t, s, slot("k", "b", 2)))
	require.Empty(t, release(t, s, slot("k", "c", 2)))
}

func keysApart(t *testing.T, s journal.LimitStore) {
	require.True(t, acquire(t, s, slot("x", "a", 1)))
	require.False(t, acquire(t, s, slot("x", "b", 1)))
	require.True(t, acquire(t, s, slot("y", "c", 1)), "another key is not held behind x")
	require.True(t, acquire(t, s, slot("", "d", 1)), "the empty key is a key")
	other := journal.Slot{Flow: "f", Step: "other", Key: "x", Holder: "e", RunID: "run-e", Limit: 1}
	require.True(t, acquire(t, s, other), "the same key of another step is apart")
	require.Empty(t, release(t, s, slot("y", "c", 1)))
	require.Equal(t, []string{"msg b"}, release(t, s, slot("x", "a", 1)))
}

func handedOutAgain(t *testing.T, s journal.LimitStore) {
	ctx := context.Background()
	require.True(t, acquire(t, s, slot("k", "a", 1)))
	require.False(t, acquire(t, s, slot("k", "b", 1)))
	require.Equal(t, []string{"msg b"}, release(t, s, slot("k", "a", 1)))
	again, err := s.Granted(ctx, 0)
	require.NoError(t, err)
	require.Equal(t, []string{"msg b"}, texts(again), "b was handed its place and has not come: its message again")
	fresh, err := s.Granted(ctx, time.Hour)
	require.NoError(t, err)
	require.Empty(t, fresh, "nothing handed out more than an hour ago")
	require.True(t, acquire(t, s, slot("k", "b", 1)))
	after, err := s.Granted(ctx, 0)
	require.NoError(t, err)
	require.Empty(t, after, "b came: nothing to hand out again")
	require.False(t, acquire(t, s, slot("k", "c", 1)))
	require.Equal(t, []string{"msg c"}, release(t, s, slot("k", "b", 1)))
	require.True(t, acquire(t, s, slot("k", "c", 1)))
	require.Empty(t, release(t, s, slot("k", "c", 1)))
}

func unpark(t *testing.T, s journal.LimitStore) {
	ctx := context.Background()
	unparked := func(runID string, fail bool) []string {
		t.Helper()
		var sent []string
		err := s.Unpark(ctx, runID, func(b []byte) error {
			if fail {
				return errors.New("the broker is away")
			}
			sent = append(sent, string(b))
			return nil
		})
		if fail {
			require.Error(t, err)
		} else {
			require.NoError(t, err)
		}
		return sent
	}
	require.True(t, acquire(t, s, slot("k", "a", 1)))
	require.False(t, acquire(t, s, slot("k", "b", 1)))
	require.False(t, acquire(t, s, slot("k", "c", 1)))
	require.False(t, acquire(t, s, slot("k", "d", 1)))
	unparked("run-c", true)
	require.Equal(t, []string{"msg b"}, unparked("run-b", false), "the cancelled run's waiter is sent")
	require.Empty(t, unparked("run-b", false), "once")
	require.Equal(t, []string{"msg c"}, release(t, s, slot("k", "a", 1)), "b waits no more, and c, whose send failed, still does: a's place goes to c")
	require.Empty(t, unparked("run-c", false), "c has its place: it is not a waiter to unpark")
	require.Equal(t, []string{"msg d"}, release(t, s, slot("k", "c", 1)))
	require.Empty(t, release(t, s, slot("k", "d", 1)))
}

func rateTurns(t *testing.T, s journal.LimitStore) {
	ctx := context.Background()
	t0 := time.Date(2026, 12, 1, 10, 0, 0, 0, time.UTC)
	ms := func(n int) time.Time { return t0.Add(time.Duration(n) * time.Millisecond) }
	turn := func(key, holder string, now time.Time) time.Time {
		t.Helper()
		at, err := s.Reserve(ctx, journal.Rate{Flow: "f", Step: "s", Key: key, Holder: holder, Interval: 100 * time.Millisecond}, now)
		require.NoError(t, err)
		return at.UTC()
	}
	require.Equal(t, t0, turn("k", "h1", t0), "the first start goes now")
	require.Equal(t, ms(100), turn("k", "h2", t0))
	require.Equal(t, ms(200), turn("k", "h3", t0))
	require.Equal(t, t0, turn("other", "h4", t0), "another key has turns of its own")
	require.Equal(t, ms(100), turn("k", "h2", ms(50)), "asked again early, h2 keeps its turn")
	require.Equal(t, ms(100), turn("k", "h2", ms(100)), "and at its turn is let go")
	require.Equal(t, ms(300), turn("k", "h2", ms(150)), "let go, h2 asking again is a new start")
	require.Equal(t, ms(1000), turn("k", "h5", ms(1000)), "after a quiet spell the next start goes at once")
	require.Equal(t, ms(1100), turn("k", "h6", ms(1000)))
}

func limitRefusals(t *testing.T, s journal.LimitStore) {
	ctx := context.Background()
	for name, sl := range map[string]journal.Slot{
		"no flow":      {Step: "s", Holder: "h", RunID: "r", Limit: 1},
		"no step":      {Flow: "f", Holder: "h", RunID: "r", Limit: 1},
		"no holder":    {Flow: "f", Step: "s", RunID: "r", Limit: 1},
		"a zero limit": {Flow: "f", Step: "s", Holder: "h", RunID: "r"},
		"a NUL key":    {Flow: "f", Step: "s", Key: "a\x00b", Holder: "h", RunID: "r", Limit: 1},
	} {
		_, err := s.Acquire(ctx, sl, nil)
		require.ErrorIs(t, err, journal.ErrInvalidLimit, name)
		_, err = s.Release(ctx, sl)
		require.ErrorIs(t, err, journal.ErrInvalidLimit, name)
	}
	_, err := s.Reserve(ctx, journal.Rate{Flow: "f", Step: "s", Holder: "h"}, time.Now())
	require.ErrorIs(t, err, journal.ErrInvalidLimit, "a zero interval")
}

// ManyHolders has 60 holders of 4 keys limited to 3 places each take
// turns through the stores a and b (two workers' journals on one
// database, or one store twice) at once: a parked holder waits for its
// message to be handed out by some release, as a worker does. It fails
// if more than 3 holders of a key are ever in at once, or if a holder
// never gets in.
func ManyHolders(t *testing.T, a, b journal.LimitStore) {
	const keys, perKey, limit = 4, 15, 3
	ctx := context.Background()
	var mu sync.Mutex
	inside, most := map[string]int{}, map[string]int{}
	wake := map[string]chan struct{}{}
	for k := range keys {
		for i := range perKey {
			wake[fmt.Sprintf("k%d-h%d", k, i)] = make(chan struct{}, 4)
		}
	}
	deliver := func(send [][]byte) {
		for _, m := range send {
			wake[string(m)] <- struct{}{}
		}
	}
	var done atomic.Int32
	var wg sync.WaitGroup
	for k := range keys {
		for i := range perKey {
			key, holder := fmt.Sprintf("k%d", k), fmt.Sprintf("k%d-h%d", k, i)
			store := a
			if i%2 == 1 {
				store = b
			}
			wg.Add(1)
			go func() {
				defer wg.Done()
				sl := journal.Slot{Flow: "f", Step: "s", Key: key, Holder: holder, RunID: "run-" + holder, Limit: limit}
				for {
					ok, err := store.Acquire(ctx, sl, []byte(holder))
					if err != nil {
						t.Error(err)
						return
					}
					if ok {
						break
					}
					select {
					case <-wake[holder]:
					case <-time.After(20 * time.Second):
						t.Errorf("%s was never let in", holder)
						return
					}
				}
				mu.Lock()
				inside[key]++
				most[key] = max(most[key], inside[key])
				mu.Unlock()
				time.Sleep(time.Millisecond)
				mu.Lock()
				inside[key]--
				mu.Unlock()
				send, err := store.Release(ctx, sl)
				if err != nil {
					t.Error(err)
					return
				}
				deliver(send)
				done.Add(1)
			}()
		}
	}
	wg.Wait()
	require.EqualValues(t, keys*perKey, done.Load(), "every holder got in and out")
	for k, n := range most {
		require.LessOrEqual(t, n, limit, "key %s", k)
	}
	left, err := a.Granted(ctx, 0)
	require.NoError(t, err)
	require.Empty(t, left, "every handed-out place was taken up")
}

// ManyTurns has 40 holders reserve turns of one key through the stores
// a and b at once: the turns are 40 distinct times, one interval apart.
func ManyTurns(t *testing.T, a, b journal.LimitStore) {
	const n, interval = 40, 10 * time.Millisecond
	ctx := context.Background()
	now := time.Date(2026, 12, 1, 10, 0, 0, 0, time.UTC)
	ats := make([]time.Time, n)
	var wg sync.WaitGroup
	for i := range n {
		store := a
		if i%2 == 1 {
			store = b
		}
		wg.Add(1)
		go func() {
			defer wg.Done()
			at, err := store.Reserve(ctx, journal.Rate{Flow: "f", Step: "s", Key: "k", Holder: fmt.Sprint("h", i), Interval: interval}, now)
			if err != nil {
				t.Error(err)
			}
			ats[i] = at.UTC()
		}()
	}
	wg.Wait()
	slices.SortFunc(ats, func(x, y time.Time) int { return x.Compare(y) })
	for i, at := range ats {
		require.Equal(t, now.Add(time.Duration(i)*interval), at, "turn %d", i)
	}
}
