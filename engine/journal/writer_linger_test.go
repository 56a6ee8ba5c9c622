package journal_test

import (
	"context"
	"fmt"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/acemq/acemq-flow/engine/journal"
)

// slow is a journal whose every write takes a while, like a commit: it
// counts the batches and the events they carried.
type slow struct {
	*journal.Memory
	took time.Duration

	mu              sync.Mutex
	batches, events int
}

func (s *slow) Record(ctx context.Context, events []journal.Event) error {
	time.Sleep(s.took)
	s.mu.Lock()
	s.batches++
	s.events += len(events)
	s.mu.Unlock()
	return s.Memory.Record(ctx, events)
}

func newSlow(t *testing.T, took time.Duration) *slow {
	mem, err := journal.NewMemory(0)
	require.NoError(t, err)
	return &slow{Memory: mem, took: took}
}

// TestWriterLingersForConcurrentCallers: callers that each wait for their
// events (as a step does before its ack) share fewer, larger batches when
// the writer lingers for as long as a write takes than when it writes
// whatever is waiting at once.
func TestWriterLingersForConcurrentCallers(t *testing.T) {
	t.Parallel()
	mean := func(linger time.Duration) float64 {
		j := newSlow(t, 2*time.Millisecond)
		w, err := journal.NewWriter(j, journal.WriterConfig{MaxLinger: linger})
		require.NoError(t, err)
		ctx := context.Background()
		var wg sync.WaitGroup
		for c := range 16 {
			wg.Go(func() {
				for i := range 25 {
					require.NoError(t, w.RecordSync(ctx, journal.Event{RunID: fmt.Sprint(c, "-", i), Key: "k", Kind: journal.KindStep}))
				}
			})
		}
		wg.Wait()
		require.NoError(t, w.Close(ctx))
		j.mu.Lock()
		defer j.mu.Unlock()
		require.Equal(t, 16*25, j.events)
		return float64(j.events) / float64(j.batches)
	}
	at, never := mean(journal.DefaultMaxLinger), mean(-1)
	t.Logf("events per batch: %.1f lingering, %.1f not", at, never)
	require.Greater(t, at, 1.3*never)
}

// TestWriterDoesNotLingerForALoneCaller: one caller waiting for each of its
// events in turn is never held back, however long MaxLinger allows.
func TestWriterDoesNotLingerForALoneCaller(t *testing.T) {
	t.Parallel()
	j := newSlow(t, 50*time.Millisecond)
	w, err := journal.NewWriter(j, journal.WriterConfig{MaxLinger: time.Minute})
	require.NoError(t, err)
	ctx := context.Background()
	start := time.Now()
	for i := range 6 {
		require.NoError(t, w.RecordSync(ctx, journal.Event{RunID: fmt.Sprint(i), Key: "k", Kind: journal.KindStep}))
	}
	// Six writes take 300 ms; lingering for as long as a write would take
	// 600 ms.
	require.Less(t, time.Since(start), 500*time.Millisecond)
	require.NoError(t, w.Close(ctx))
}
