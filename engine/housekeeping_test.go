package engine_test

import (
	"context"
	"sync/atomic"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/acemq/acemq-flow/broker"
	"github.com/acemq/acemq-flow/dsl"
	"github.com/acemq/acemq-flow/engine"
	"github.com/acemq/acemq-flow/engine/journal"
)

// purgingJournal is a memory journal that keeps runs for an hour and
// counts the purges asked of it.
type purgingJournal struct {
	*journal.Memory
	purges    atomic.Int32
	olderThan atomic.Int64
}

func (p *purgingJournal) Retention() time.Duration { return time.Hour }

func (p *purgingJournal) PurgeEnded(_ context.Context, olderThan time.Duration) (int64, error) {
	p.purges.Add(1)
	p.olderThan.Store(int64(olderThan))
	return 0, nil
}

// TestWorkerPurgesPastRetention: a worker asks a journal that keeps runs
// for a while to purge the older ones, every Housekeeping, and stops when
// it is closed.
func TestWorkerPurgesPastRetention(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	conn, err := broker.Open(ctx, "memory://")
	require.NoError(t, err)
	defer conn.Close(ctx)
	mem, err := journal.NewMemory(0)
	require.NoError(t, err)
	j := &purgingJournal{Memory: mem}
	eng, err := engine.New(engine.Config{Conn: conn, Journal: j, Housekeeping: 20 * time.Millisecond})
	require.NoError(t, err)
	defer eng.Close(ctx)
	require.NoError(t, eng.Register(dsl.Flow("kept", dsl.Step("a", same))))
	w, err := eng.StartWorker(ctx)
	require.NoError(t, err)
	require.Eventually(t, func() bool { return j.purges.Load() >= 2 }, 5*time.Second, 10*time.Millisecond)
	require.Equal(t, int64(time.Hour), j.olderThan.Load())
	require.NoError(t, w.Close(ctx))
	after := j.purges.Load()
	time.Sleep(100 * time.Millisecond) // five housekeeping periods: none may run after Close
	require.Equal(t, after, j.purges.Load(), "no purge after Close")
}
