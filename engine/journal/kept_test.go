package journal_test

import (
	"context"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/acemq/acemq-flow/engine/journal"
)

// keeper records each RecordKept: the events and the keys it was given
// together.
type keeper struct {
	mu    sync.Mutex
	calls [][]journal.Kept
	when  []time.Time
	evs   []int
}

func (k *keeper) RecordKept(ctx context.Context, j journal.Journal, events []journal.Event, kept []journal.Kept) error {
	k.mu.Lock()
	k.calls = append(k.calls, append([]journal.Kept(nil), kept...))
	k.when = append(k.when, time.Now())
	k.evs = append(k.evs, len(events))
	k.mu.Unlock()
	return j.Record(ctx, events)
}

func (k *keeper) got() ([][]journal.Kept, []int) {
	k.mu.Lock()
	defer k.mu.Unlock()
	return append([][]journal.Kept(nil), k.calls...), append([]int(nil), k.evs...)
}

// TestWriterKeeps: Keep hands its key and its events to the Keeper in one
// call and returns once they are written; Confirm returns at once and its
// confirmation waits for the next batch with something else in it, or for
// 20 ms when nothing comes; a writer without a Keeper refuses both.
func TestWriterKeeps(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	mem, err := journal.NewMemory(0)
	require.NoError(t, err)
	k := &keeper{}
	w, err := journal.NewWriter(mem, journal.WriterConfig{Keeper: k})
	require.NoError(t, err)
	defer w.Close(ctx)

	ev := journal.Event{RunID: "r1", Flow: "f", Kind: journal.KindStep, Step: "a", Outcome: "completed",
		StartedAt: time.Now(), EndedAt: time.Now(), Status: journal.Running, RunStep: "b", Key: "step/0/0/1"}
	require.NoError(t, w.Keep(ctx, journal.Kept{Key: "r1/0/a", Result: []byte("hop")}, ev))
	calls, evs := k.got()
	require.Equal(t, [][]journal.Kept{{{Key: "r1/0/a", Result: []byte("hop")}}}, calls, "the key, with its events")
	require.Equal(t, []int{1}, evs)
	_, err = mem.Run(ctx, "r1")
	require.NoError(t, err, "the events are written when Keep returns")

	// A confirmation goes with the next Keep.
	require.NoError(t, w.Confirm(ctx, "r1/0/a"))
	require.NoError(t, w.Keep(ctx, journal.Kept{Key: "r1/1/b", Result: []byte("hop2")}))
	calls, _ = k.got()
	require.Len(t, calls, 2, "the confirmation was not written apart")
	require.ElementsMatch(t, []journal.Kept{{Key: "r1/0/a", Confirmed: true}, {Key: "r1/1/b", Result: []byte("hop2")}}, calls[1])

	// Alone, it is written within about 20 ms.
	asked := time.Now()
	require.NoError(t, w.Confirm(ctx, "r1/1/b"))
	require.Eventually(t, func() bool { c, _ := k.got(); return len(c) == 3 }, time.Second, time.Millisecond)
	k.mu.Lock()
	waited := k.when[2].Sub(asked)
	k.mu.Unlock()
	require.GreaterOrEqual(t, waited, 15*time.Millisecond, "it waited for company")
	calls, _ = k.got()
	require.Equal(t, []journal.Kept{{Key: "r1/1/b", Confirmed: true}}, calls[2])

	plain, err := journal.NewWriter(mem, journal.WriterConfig{})
	require.NoError(t, err)
	defer plain.Close(ctx)
	require.ErrorIs(t, plain.Keep(ctx, journal.Kept{Key: "k"}), journal.ErrNoKeeper)
	require.ErrorIs(t, plain.Confirm(ctx, "k"), journal.ErrNoKeeper)
	require.ErrorIs(t, w.Keep(ctx, journal.Kept{}), journal.ErrInvalidEvent, "an empty key")
}
