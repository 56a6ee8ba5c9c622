package journal_test

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/acemq/acemq-flow/engine/journal"
	"github.com/acemq/acemq-flow/engine/journal/journaltest"
)

func TestMemoryConformance(t *testing.T) {
	journaltest.Run(t, func(t *testing.T) journal.Journal {
		j, err := journal.NewMemory(0)
		require.NoError(t, err)
		return j
	})
}

func TestMemoryJoinConformance(t *testing.T) {
	journaltest.Joins(t, func(t *testing.T) journal.JoinStore {
		j, err := journal.NewMemory(0)
		require.NoError(t, err)
		return j
	})
}

// TestMemoryForgetsOldestStoppedRuns: past its limit the memory journal
// forgets stopped runs before running ones, oldest first.
func TestMemoryForgetsOldestStoppedRuns(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	j, err := journal.NewMemory(10)
	require.NoError(t, err)
	base := time.Now()
	for i := range 11 {
		status := journal.Completed
		if i == 0 {
			status = journal.Running
		}
		require.NoError(t, j.Record(ctx, []journal.Event{{RunID: fmt.Sprint(i), Flow: "f", Key: "k", Kind: journal.KindStart,
			StartedAt: base.Add(time.Duration(i) * time.Second), EndedAt: base, Status: status}}))
	}
	_, err = j.Run(ctx, "0")
	require.NoError(t, err, "the oldest run is running, so it stays")
	_, err = j.Run(ctx, "1")
	require.ErrorIs(t, err, journal.ErrRunNotFound, "the oldest stopped run went")
	runs, err := j.Runs(ctx, journal.Query{})
	require.NoError(t, err)
	require.Len(t, runs, 9)
	_, err = journal.NewMemory(-1)
	require.Error(t, err)
}

// flaky fails its first writes, then records into a Memory.
type flaky struct {
	*journal.Memory
	failures atomic.Int32
	batches  atomic.Int32
}

func (f *flaky) Record(ctx context.Context, events []journal.Event) error {
	f.batches.Add(1)
	if f.failures.Add(-1) >= 0 {
		return errors.New("database restarting")
	}
	return f.Memory.Record(ctx, events)
}

// TestWriterNeverDrops: events the journal refuses are written once it
// answers again, in batches, and Flush waits for them.
func TestWriterNeverDrops(t *testing.T) {
	t.Parallel()
	mem, err := journal.NewMemory(0)
	require.NoError(t, err)
	j := &flaky{Memory: mem}
	j.failures.Store(3)
	w, err := journal.NewWriter(j, journal.WriterConfig{Queue: 50, MaxBatch: 20})
	require.NoError(t, err)
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	for i := range 200 {
		require.NoError(t, w.Record(ctx, journal.Event{RunID: fmt.Sprint(i), Flow: "f", Key: "start", Kind: journal.KindStart, Status: journal.Running}))
	}
	require.NoError(t, w.Flush(ctx))
	runs, err := mem.Runs(ctx, journal.Query{Limit: 1000})
	require.NoError(t, err)
	require.Len(t, runs, 200, "nothing was dropped")
	require.Less(t, j.batches.Load(), int32(200), "written in batches, not one by one")
	require.NoError(t, w.Close(ctx))
	require.ErrorIs(t, w.Record(ctx, journal.Event{}), journal.ErrWriterClosed)
}

// TestWriterCloseReportsWhatItCouldNotWrite: a journal that never answers
// again costs the events still queued at the close deadline, and Close
// says how many.
func TestWriterCloseReportsWhatItCouldNotWrite(t *testing.T) {
	t.Parallel()
	mem, err := journal.NewMemory(0)
	require.NoError(t, err)
	j := &flaky{Memory: mem}
	j.failures.Store(1 << 30)
	w, err := journal.NewWriter(j, journal.WriterConfig{})
	require.NoError(t, err)
	ctx := context.Background()
	require.NoError(t, w.Record(ctx, journal.Event{RunID: "a", Key: "k"}, journal.Event{RunID: "b", Key: "k"}))
	cctx, cancel := context.WithTimeout(ctx, 300*time.Millisecond)
	defer cancel()
	err = w.Close(cctx)
	require.ErrorContains(t, err, "2 events were not written before the close deadline")
}

// TestWriterSetsInvalidEventsAside: an event no journal can keep does not
// stall the writer: it is set aside and the rest of its batch is written.
func TestWriterSetsInvalidEventsAside(t *testing.T) {
	t.Parallel()
	mem, err := journal.NewMemory(0)
	require.NoError(t, err)
	w, err := journal.NewWriter(mem, journal.WriterConfig{})
	require.NoError(t, err)
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	require.NoError(t, w.Record(ctx,
		journal.Event{RunID: "ok-1", Key: "start", Kind: journal.KindStart, Status: journal.Running},
		journal.Event{RunID: "bad\x00", Key: "start"},
		journal.Event{RunID: "ok-2", Key: "start", Kind: journal.KindStart, Status: journal.Running}))
	require.NoError(t, w.Flush(ctx))
	for _, id := range []string{"ok-1", "ok-2"} {
		_, err := mem.Run(ctx, id)
		require.NoError(t, err, id)
	}
	require.NoError(t, w.Close(ctx))
}

// batches records the size of every batch it is handed.
type batches struct {
	*journal.Memory
	mu    sync.Mutex
	sizes []int
}

func (b *batches) Record(ctx context.Context, events []journal.Event) error {
	b.mu.Lock()
	b.sizes = append(b.sizes, len(events))
	b.mu.Unlock()
	return b.Memory.Record(ctx, events)
}

// TestWriterKeepsARecordTogether: the events of one Record are written in
// one batch, so a reader never sees some of them without the others.
func TestWriterKeepsARecordTogether(t *testing.T) {
	t.Parallel()
	mem, err := journal.NewMemory(0)
	require.NoError(t, err)
	j := &batches{Memory: mem}
	w, err := journal.NewWriter(j, journal.WriterConfig{MaxBatch: 4})
	require.NoError(t, err)
	ctx := context.Background()
	for i := range 50 {
		run := fmt.Sprint(i)
		require.NoError(t, w.Record(ctx,
			journal.Event{RunID: run, Key: "a", Kind: journal.KindStep},
			journal.Event{RunID: run, Key: "b", Kind: journal.KindSkip},
			journal.Event{RunID: run, Key: "c", Kind: journal.KindDelay}))
	}
	require.NoError(t, w.Close(ctx))
	j.mu.Lock()
	defer j.mu.Unlock()
	total := 0
	for _, n := range j.sizes {
		require.Zero(t, n%3, "a batch of %d splits a Record of 3", n)
		total += n
	}
	require.Equal(t, 150, total)
}

func TestMemoryLimitConformance(t *testing.T) {
	journaltest.Limits(t, func(t *testing.T) journal.LimitStore {
		j, err := journal.NewMemory(0)
		require.NoError(t, err)
		return j
	})
}

func TestMemoryVersionConformance(t *testing.T) {
	journaltest.Versions(t, func(t *testing.T) journaltest.VersionJournal {
		j, err := journal.NewMemory(0)
		require.NoError(t, err)
		return j
	})
}
