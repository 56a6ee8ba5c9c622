package persistence_test

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/stretchr/testify/require"

	"github.com/acemq/acemq-flow/engine/journal"
	"github.com/acemq/acemq-flow/engine/journal/journaltest"
	"github.com/acemq/acemq-flow/persistence"
)

func TestSQLJournalJoinConformance(t *testing.T) {
	t.Parallel()
	db := pool(t)
	journaltest.Joins(t, func(t *testing.T) journal.JoinStore {
		return sqlJournal(t, db, tables(t, db), persistence.SQLJournalConfig{})
	})
}

// TestSQLJournalSettlesOfTwoWorkers: two journals on one database, as two
// workers have, settle one join's branches side by side, each batching
// what it is asked at once: every branch is handed out once and one
// decision is the last.
func TestSQLJournalSettlesOfTwoWorkers(t *testing.T) {
	t.Parallel()
	db := pool(t)
	tb := tables(t, db)
	journaltest.ConcurrentSettles(t, sqlJournal(t, db, tb, persistence.SQLJournalConfig{}), sqlJournal(t, db, tb, persistence.SQLJournalConfig{}))
}

// TestSQLJournalJoinsGoWithTheirRun: PurgeEnded deletes a purged run's
// joins with their branches and items, and nothing of the runs it keeps.
func TestSQLJournalJoinsGoWithTheirRun(t *testing.T) {
	t.Parallel()
	db := pool(t)
	tb := tables(t, db)
	ctx := ctxT(t)
	j := sqlJournal(t, db, tb, persistence.SQLJournalConfig{PurgeBatch: 2})
	now := time.Now()
	run := func(id string, status journal.Status, endedAgo time.Duration) {
		require.NoError(t, j.Record(ctx, []journal.Event{
			{RunID: id, Flow: "orders", Key: "start", Kind: journal.KindStart, StartedAt: now.Add(-3 * time.Hour),
				EndedAt: now.Add(-3 * time.Hour), Status: journal.Running, Input: json.RawMessage(`{}`)},
			{RunID: id, Flow: "orders", Key: "last", Seq: 1, Kind: journal.KindStep, StartedAt: now.Add(-endedAgo),
				EndedAt: now.Add(-endedAgo), Status: status},
		}))
		// A ForEach with a long list (copied in), one with a short one, a
		// Parallel; some branches settled.
		for k, n := range []int{1500, 20, 0} {
			key := fmt.Sprint("fork/0/", k)
			var its [][]byte
			if n > 0 {
				its = make([][]byte, n)
				for i := range its {
					its[i] = fmt.Appendf(nil, "%s-%d", id, i)
				}
			} else {
				n = 3
			}
			_, opened, err := j.OpenJoin(ctx, journal.Join{RunID: id, Key: key, Total: n, Limit: 3, Parent: []byte(id)}, its)
			require.NoError(t, err)
			require.True(t, opened)
			for b := range 2 {
				_, err := j.Settle(ctx, id, key, b, journal.Settled{OK: true, Output: []byte("out")})
				require.NoError(t, err)
			}
		}
	}
	gone := []string{"old-0", "old-1", "old-2"}
	for _, id := range gone {
		run(id, journal.Completed, 2*time.Hour)
	}
	kept := []string{"recent", "running"}
	run("recent", journal.Failed, time.Minute)
	run("running", journal.Running, 2*time.Hour)

	n, err := j.PurgeEnded(ctx, time.Hour)
	require.NoError(t, err)
	require.Equal(t, int64(len(gone)), n)
	rowsOf := func(ids []string) map[string]int {
		out := map[string]int{}
		for _, table := range []string{tb.RunJoins, tb.RunBranches, tb.RunItems} {
			var c int
			require.NoError(t, db.QueryRow(ctx, `SELECT count(*) FROM `+pgx.Identifier{table}.Sanitize()+` WHERE run_id = ANY($1)`, ids).Scan(&c))
			out[table] = c
		}
		return out
	}
	require.Equal(t, map[string]int{tb.RunJoins: 0, tb.RunBranches: 0, tb.RunItems: 0}, rowsOf(gone), "the purged runs' joins went, whole")
	require.Equal(t, map[string]int{tb.RunJoins: 2 * 3, tb.RunBranches: 2 * 3 * 2, tb.RunItems: 2 * 1520}, rowsOf(kept),
		"the kept runs' joins stay, whole")
	for _, id := range gone {
		_, err := j.JoinStatus(ctx, id, "fork/0/0")
		require.ErrorIs(t, err, journal.ErrJoinNotFound)
		_, err = j.Settle(ctx, id, "fork/0/0", 2, journal.Settled{OK: true})
		require.ErrorIs(t, err, journal.ErrJoinNotFound, "a late settle of a purged run's branch writes nothing")
	}
	require.Equal(t, map[string]int{tb.RunJoins: 0, tb.RunBranches: 0, tb.RunItems: 0}, rowsOf(gone))
	st, err := j.JoinStatus(ctx, "running", "fork/0/0")
	require.NoError(t, err)
	require.Equal(t, 2, st.Arrived)
}

// TestSQLJournalOpensALargeForEach: a ForEach over 100,000 items opens in
// a few seconds, and its items read back in order.
func TestSQLJournalOpensALargeForEach(t *testing.T) {
	t.Parallel()
	db := pool(t)
	j := sqlJournal(t, db, tables(t, db), persistence.SQLJournalConfig{})
	ctx := ctxT(t)
	const n = 100_000
	its := make([][]byte, n)
	for i := range its {
		its[i] = fmt.Appendf(nil, `{"sku":"SKU-%06d","qty":%d}`, i, i%7)
	}
	start := time.Now()
	st, opened, err := j.OpenJoin(ctx, journal.Join{RunID: "big", Key: "each/0/3", Total: n, Limit: 100}, its)
	elapsed := time.Since(start)
	require.NoError(t, err)
	require.True(t, opened)
	require.Equal(t, 100, st.Dispatched)
	t.Logf("opened a ForEach of %d items in %s", n, elapsed.Round(time.Millisecond))
	require.Less(t, elapsed, 10*time.Second)

	got := make([][]byte, 0, n)
	for from := 0; from < n; from += 10_000 {
		page, err := j.JoinItems(ctx, "big", "each/0/3", from, 10_000)
		require.NoError(t, err)
		require.Len(t, page, 10_000)
		got = append(got, page...)
	}
	require.Equal(t, its, got)
	st, opened, err = j.OpenJoin(ctx, journal.Join{RunID: "big", Key: "each/0/3", Total: n, Limit: 100}, its)
	require.NoError(t, err)
	require.False(t, opened, "opened once, the long way too")
	require.Equal(t, n, st.Total)

	// A few items, but large ones: copied in too.
	heavy := make([][]byte, 8)
	for i := range heavy {
		heavy[i] = bytes.Repeat([]byte{byte(i), 0x00, 0xff}, 100_000)
	}
	_, opened, err = j.OpenJoin(ctx, journal.Join{RunID: "big", Key: "each/1/3", Total: len(heavy), Limit: 2}, heavy)
	require.NoError(t, err)
	require.True(t, opened)
	got, err = j.JoinItems(ctx, "big", "each/1/3", 0, 100)
	require.NoError(t, err)
	require.Equal(t, heavy, got)
}

// TestSQLJournalJoinRoundTrips: opening a join with a short list, and
// settling a branch (first or again), are one statement each.
func TestSQLJournalJoinRoundTrips(t *testing.T) {
	t.Parallel()
	db := pool(t)
	counted := &countingJournalDB{DB: db}
	j := sqlJournal(t, counted, tables(t, db), persistence.SQLJournalConfig{})
	ctx := ctxT(t)
	_, opened, err := j.OpenJoin(ctx, journal.Join{RunID: "rt", Key: "each/0", Total: 3, Limit: 1}, [][]byte{[]byte("a"), []byte("b"), []byte("c")})
	require.NoError(t, err)
	require.True(t, opened)
	require.Equal(t, int64(1), counted.queryRows.Swap(0), "open: one statement")
	d, err := j.Settle(ctx, "rt", "each/0", 0, journal.Settled{OK: true, Output: []byte("x")})
	require.NoError(t, err)
	require.Equal(t, journal.Decision{Next: 1, Item: []byte("b")}, d, "the item handed out comes with the decision")
	require.Equal(t, int64(1), counted.queryRows.Swap(0), "settle: one statement")
	again, err := j.Settle(ctx, "rt", "each/0", 0, journal.Settled{OK: false})
	require.NoError(t, err)
	require.Equal(t, d, again)
	require.Equal(t, int64(1), counted.queryRows.Swap(0), "settle again: one statement")
}

// TestSQLJournalJoinOfTwoWorkers: two journals on one database (two
// workers) settling one join's branches, each branch by both, agree on
// every decision.
func TestSQLJournalJoinOfTwoWorkers(t *testing.T) {
	t.Parallel()
	db := pool(t)
	tb := tables(t, db)
	ctx := ctxT(t)
	workers := []*persistence.SQLJournal{sqlJournal(t, db, tb, persistence.SQLJournalConfig{}), sqlJournal(t, pool(t), tb, persistence.SQLJournalConfig{})}
	const total = 60
	_, opened, err := workers[0].OpenJoin(ctx, journal.Join{RunID: "two", Key: "fork/0/1", Total: total, Limit: total}, nil)
	require.NoError(t, err)
	require.True(t, opened)
	var (
		wg    sync.WaitGroup
		ds    [2][total]journal.Decision
		errs  [2]error
		lasts atomic.Int32
	)
	for w, j := range workers {
		wg.Go(func() {
			for b := range total {
				// The workers go through the branches from either end.
				if w == 1 {
					b = total - 1 - b
				}
				d, err := j.Settle(ctx, "two", "fork/0/1", b, journal.Settled{OK: true, Output: fmt.Appendf(nil, "w%d", w)})
				if err != nil {
					errs[w] = err
					return
				}
				ds[w][b] = d
			}
		})
	}
	wg.Wait()
	require.NoError(t, errs[0])
	require.NoError(t, errs[1])
	require.Equal(t, ds[0], ds[1], "one decision per branch, whichever worker asked")
	for _, d := range ds[0] {
		if d.Last {
			lasts.Add(1)
		}
	}
	require.Equal(t, int32(1), lasts.Load())
	st, err := workers[1].JoinStatus(ctx, "two", "fork/0/1")
	require.NoError(t, err)
	require.Equal(t, total, st.Arrived)
}

// BenchmarkSQLJournalSettle measures settles/s on joins of 10,000
// branches (ForEachs handing out 64 at a time), each settle handing out
// the next branch as its decision says: one join settled by 1 worker and
// by 8 at once (they take turns at the join's row lock), and 8 joins by
// 8 workers, one each (joins do not wait for each other).
func BenchmarkSQLJournalSettle(b *testing.B) {
	for _, c := range []struct{ workers, joins int }{{1, 1}, {8, 1}, {8, 8}} {
		b.Run(fmt.Sprintf("goroutines=%d/joins=%d", c.workers, c.joins), func(b *testing.B) {
			db := pool(b)
			j := sqlJournal(b, db, tables(b, db), persistence.SQLJournalConfig{})
			ctx := ctxT(b)
			var elapsed time.Duration
			// b.N settles in all, from as many rounds of c.joins joins of
			// 10,000 branches as that takes.
			for round, left := 0, b.N; left > 0; round++ {
				b.StopTimer()
				quota := min(left, c.joins*benchJoinTotal)
				left -= quota
				joins := make([]*benchJoin, c.joins)
				for k := range joins {
					joins[k] = openBenchJoin(ctx, b, j, fmt.Sprintf("each/%d/%d", round, k), quota/c.joins+btoi(k < quota%c.joins))
				}
				b.StartTimer()
				start := time.Now()
				var wg sync.WaitGroup
				for w := range c.workers {
					wg.Go(func() { joins[w%c.joins].settle(ctx, b, j) })
				}
				wg.Wait()
				elapsed += time.Since(start)
			}
			b.ReportMetric(float64(b.N)/elapsed.Seconds(), "settles/s")
		})
	}
}

const benchJoinTotal, benchJoinLimit = 10_000, 64

// benchJoin is a join BenchmarkSQLJournalSettle settles quota branches of.
type benchJoin struct {
	key     string
	quota   int64
	work    chan int
	done    chan struct{}
	stop    sync.Once
	settled atomic.Int64
}

func btoi(b bool) int {
	if b {
		return 1
	}
	return 0
}

func openBenchJoin(ctx context.Context, b *testing.B, j *persistence.SQLJournal, key string, quota int) *benchJoin {
	_, _, err := j.OpenJoin(ctx, journal.Join{RunID: "bench", Key: key, Total: benchJoinTotal, Limit: benchJoinLimit}, nil)
	require.NoError(b, err)
	bj := &benchJoin{key: key, quota: int64(quota), work: make(chan int, benchJoinTotal), done: make(chan struct{})}
	for i := range benchJoinLimit {
		bj.work <- i
	}
	if quota == 0 {
		close(bj.done)
	}
	return bj
}

// settle settles the branches handed out until the quota is reached.
func (bj *benchJoin) settle(ctx context.Context, b *testing.B, j *persistence.SQLJournal) {
	output := []byte(`{"sku":"SKU-000123","reserved":true,"warehouse":"east-2"}`)
	for {
		var br int
		select {
		case <-bj.done:
			return
		default:
		}
		select {
		case br = <-bj.work:
		case <-bj.done:
			return
		}
		d, err := j.Settle(ctx, "bench", bj.key, br, journal.Settled{OK: true, Output: output})
		if err != nil {
			b.Error(err)
			bj.stop.Do(func() { close(bj.done) })
			return
		}
		if d.Next >= 0 {
			bj.work <- d.Next
		}
		if bj.settled.Add(1) == bj.quota {
			bj.stop.Do(func() { close(bj.done) })
		}
	}
}
