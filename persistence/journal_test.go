package persistence_test

import (
	"context"
	"encoding/json"
	"fmt"
	"math/rand/v2"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/stretchr/testify/require"

	"github.com/acemq/acemq-flow/broker"
	"github.com/acemq/acemq-flow/engine/journal"
	"github.com/acemq/acemq-flow/engine/journal/journaltest"
	"github.com/acemq/acemq-flow/persistence"
)

func sqlJournal(tb testing.TB, db persistence.DB, t persistence.Tables, cfg persistence.SQLJournalConfig) *persistence.SQLJournal {
	tb.Helper()
	cfg.Tables = t
	j, err := persistence.NewSQLJournal(db, cfg)
	require.NoError(tb, err)
	return j
}

func TestSQLJournalConformance(t *testing.T) {
	t.Parallel()
	db := pool(t)
	journaltest.Run(t, func(t *testing.T) journal.Journal {
		return sqlJournal(t, db, tables(t, db), persistence.SQLJournalConfig{})
	})
}

var jt0 = time.Date(2026, 11, 2, 8, 0, 0, 0, time.UTC)

func jat(ms int) time.Time { return jt0.Add(time.Duration(ms) * time.Millisecond) }

// TestSQLJournalBatchTouchesRunTwice: the rules hold within one batch as
// they do across batches: the later of two entries with one key, the
// status of the highest Seq (the later of a tie), the earliest start.
func TestSQLJournalBatchTouchesRunTwice(t *testing.T) {
	t.Parallel()
	db := pool(t)
	j := sqlJournal(t, db, tables(t, db), persistence.SQLJournalConfig{})
	ctx := ctxT(t)
	charge := journal.Event{RunID: "b1", Flow: "orders", Key: "charge/1", Seq: journal.Seq(0, 2, 1, 2), Kind: journal.KindStep,
		Step: "charge", Attempt: 1, Outcome: "retried", StartedAt: jat(5000), EndedAt: jat(6000), Error: "gateway timeout",
		Status: journal.Running, RunStep: "charge"}
	start := journal.Event{RunID: "b1", Flow: "orders", Key: "start", Seq: journal.Seq(0, 0, 1, 0), Kind: journal.KindStart,
		Outcome: "started", StartedAt: jat(1000), EndedAt: jat(1000), Status: journal.Running, RunStep: "validate",
		Input: json.RawMessage(`{"id":7}`)}
	again := charge
	again.Outcome, again.Error, again.EndedAt, again.Status, again.RunStep = "completed", "", jat(7000), journal.Completed, "charge"
	late := journal.Event{RunID: "b1", Flow: "orders", Key: "validate/1", Seq: journal.Seq(0, 1, 1, 2), Kind: journal.KindStep,
		Step: "validate", Attempt: 1, Outcome: "completed", StartedAt: jat(2000), EndedAt: jat(3000), Status: journal.Running, RunStep: "charge"}
	other := start
	other.RunID, other.Input = "b2", nil
	require.NoError(t, j.Record(ctx, []journal.Event{charge, start, other, again, late}))

	r, err := j.Run(ctx, "b1")
	require.NoError(t, err)
	require.Equal(t, journal.Completed, r.Status, "the tie at the highest Seq goes to the later event")
	require.Empty(t, r.Error)
	require.True(t, r.StartedAt.Equal(jat(1000)), "the start lowers what the first event said: %s", r.StartedAt)
	require.True(t, r.UpdatedAt.Equal(jat(7000)))
	require.NotNil(t, r.EndedAt)
	require.True(t, r.EndedAt.Equal(jat(7000)))
	require.JSONEq(t, `{"id":7}`, string(r.Input))
	require.Equal(t, again.Seq, r.Seq)
	tl, err := j.Timeline(ctx, "b1")
	require.NoError(t, err)
	require.Len(t, tl, 3, "the key recorded twice is one entry")
	require.Equal(t, []string{"start", "validate/1", "charge/1"}, []string{tl[0].Key, tl[1].Key, tl[2].Key})
	require.Equal(t, "completed", tl[2].Outcome, "the later of the two")
	require.Equal(t, "orders", tl[2].Flow)
	require.Equal(t, journal.Completed, tl[2].Status)

	r, err = j.Run(ctx, "b2")
	require.NoError(t, err)
	require.Nil(t, r.Input, "no input is no input, not an empty one")
	require.Nil(t, r.EndedAt)
}

// TestSQLJournalAppliesEventsAsMemoryDoes records random batches (keys
// recorded again, ties and reversals of Seq, late starts, inputs on any
// event, runs first heard of from any event) into the PostgreSQL journal
// and into journal.Memory, and finds the same runs and timelines.
func TestSQLJournalAppliesEventsAsMemoryDoes(t *testing.T) {
	t.Parallel()
	db := pool(t)
	ctx := ctxT(t)
	for seed := range uint64(6) {
		t.Run(fmt.Sprint("seed=", seed), func(t *testing.T) {
			t.Parallel()
			j := sqlJournal(t, db, tables(t, db), persistence.SQLJournalConfig{})
			mem, err := journal.NewMemory(0)
			require.NoError(t, err)
			rnd := rand.New(rand.NewPCG(seed, 11))
			events := randomEvents(rnd, 12, 600)
			for len(events) > 0 {
				n := min(len(events), 1+rnd.IntN(60))
				require.NoError(t, j.Record(ctx, events[:n]))
				require.NoError(t, mem.Record(ctx, events[:n]))
				events = events[n:]
			}
			sameJournals(t, mem, j)
		})
	}
}

// randomEvents are n events of runs r0..r<runs-1> in a random order.
func randomEvents(rnd *rand.Rand, runs, n int) []journal.Event {
	kinds := []journal.Kind{journal.KindStart, journal.KindStep, journal.KindSkip, journal.KindDelay, journal.KindCompensation, journal.KindReplay}
	statuses := journal.Statuses()
	errs := []string{"", "", "Card DECLINED", "gateway timeout", "no courier", "100% _full_"}
	out := make([]journal.Event, n)
	for i := range out {
		run := rnd.IntN(runs)
		e := journal.Event{RunID: fmt.Sprint("r", run), Flow: fmt.Sprint("flow", run%3), Key: fmt.Sprint("k", rnd.IntN(6)),
			Seq: int64(rnd.IntN(8)) - 2, Kind: kinds[rnd.IntN(len(kinds))], Step: fmt.Sprint("s", rnd.IntN(4)),
			Attempt: rnd.IntN(3), Outcome: fmt.Sprint("o", rnd.IntN(3)),
			StartedAt: jat(rnd.IntN(20_000)), Error: errs[rnd.IntN(len(errs))], Queue: fmt.Sprint("q", rnd.IntN(2)),
			RunStep: fmt.Sprint("s", rnd.IntN(4)), Replays: rnd.IntN(3)}
		e.EndedAt = e.StartedAt.Add(time.Duration(rnd.IntN(5000)) * time.Millisecond)
		// Some runs hear of a status seldom, and the first class only
		// below Seq -1, which changes no run: they stay as created.
		if odds := []int{3, 2, 8, 25}[run%4]; rnd.IntN(odds) == 0 {
			e.Status = statuses[rnd.IntN(len(statuses))]
			if run%4 == 0 {
				e.Seq = -2 - int64(rnd.IntN(2))
			}
		}
		if rnd.IntN(4) == 0 {
			due := e.EndedAt.Add(time.Minute)
			e.DueAt = &due
		}
		if rnd.IntN(4) == 0 {
			e.DeadLetter = "dlq"
		}
		if rnd.IntN(5) == 0 {
			e.Input = json.RawMessage(fmt.Sprintf(`{"n":%d}`, i))
		}
		out[i] = e
	}
	return out
}

// sameJournals fails unless want and got hold the same runs (every field)
// and timelines (every field but Input, which the SQL journal keeps on the
// run only), and answer a few queries alike.
func sameJournals(t *testing.T, want, got journal.Journal) {
	t.Helper()
	ctx := ctxT(t)
	all, err := want.Runs(ctx, journal.Query{Limit: 1000})
	require.NoError(t, err)
	require.NotEmpty(t, all)
	for _, w := range all {
		g, err := got.Run(ctx, w.ID)
		require.NoError(t, err)
		require.Equal(t, w, g, "run %s", w.ID)
		wt, err := want.Timeline(ctx, w.ID)
		require.NoError(t, err)
		for i := range wt {
			wt[i].Input = nil
		}
		gt, err := got.Timeline(ctx, w.ID)
		require.NoError(t, err)
		require.Equal(t, wt, gt, "timeline of %s", w.ID)
	}
	for _, q := range []journal.Query{
		{Limit: 1000}, {Flow: "flow1"}, {Statuses: []journal.Status{journal.Failed, journal.Running, journal.Failed}},
		{Flow: "flow0", Statuses: []journal.Status{journal.Completed, journal.Waiting}}, {Since: jat(3000), Before: jat(9000)},
		{ErrorContains: "card declined"}, {ErrorContains: "% _"}, {ErrorContains: "0%"}, {Flow: "flow2", ErrorContains: "O"}, {Limit: 2},
		{Order: journal.SoonestDue}, {Order: journal.SoonestDue, Flow: "flow1", Limit: 3},
		{Order: journal.SoonestDue, Statuses: []journal.Status{journal.Waiting, journal.Failed}, Limit: 2},
		{Order: journal.SoonestDue, ErrorContains: "o", Since: jat(2000)},
	} {
		w, err := want.Runs(ctx, q)
		require.NoError(t, err)
		g, err := got.Runs(ctx, q)
		require.NoError(t, err)
		if len(w) == 0 {
			// Memory answers nil, the SQL journal an empty slice.
			require.Empty(t, g, "query %+v", q)
			continue
		}
		require.Equal(t, w, g, "query %+v", q)
	}
	for _, prefix := range []string{"", "r", "r1", "r10", "r1x", "x"} {
		w, err := want.RunsByIDPrefix(ctx, prefix, 5)
		require.NoError(t, err)
		g, err := got.RunsByIDPrefix(ctx, prefix, 5)
		require.NoError(t, err)
		require.Equal(t, w, g, "prefix %q", prefix)
	}
}

// TestSQLJournalTwoWorkersSameRuns: two journals on one database (two
// workers) record the same events of the same runs at once, in batches
// that touch the runs in different orders (each event twice, as after a
// redelivery): no deadlock, no entry twice, every run completed.
func TestSQLJournalTwoWorkersSameRuns(t *testing.T) {
	t.Parallel()
	tb := tables(t, pool(t))
	ctx := ctxT(t)
	var events []journal.Event
	const runs, steps = 200, 5
	for r := range runs {
		id := fmt.Sprintf("w%03d", r)
		events = append(events, journal.Event{RunID: id, Flow: "orders", Key: "start", Seq: journal.Seq(0, 0, 1, 0),
			Kind: journal.KindStart, Outcome: "started", StartedAt: jat(r), EndedAt: jat(r), Status: journal.Running,
			RunStep: "s0", Input: json.RawMessage(fmt.Sprintf(`{"run":%d}`, r))})
		for s := range steps {
			e := journal.Event{RunID: id, Flow: "orders", Key: fmt.Sprintf("s%d/1", s), Seq: journal.Seq(0, s+1, 1, 2),
				Kind: journal.KindStep, Step: fmt.Sprint("s", s), Attempt: 1, Outcome: "completed",
				StartedAt: jat(r + 1000*(s+1)), EndedAt: jat(r + 1000*(s+1) + 500), Status: journal.Running, RunStep: fmt.Sprint("s", s+1)}
			if s == steps-1 {
				e.Status, e.RunStep = journal.Completed, e.Step
			}
			events = append(events, e)
		}
	}
	var wg sync.WaitGroup
	for w := range 2 {
		// A pool each: two processes.
		j := sqlJournal(t, pool(t), tb, persistence.SQLJournalConfig{})
		mine := append([]journal.Event(nil), events...)
		rnd := rand.New(rand.NewPCG(uint64(w), 3))
		rnd.Shuffle(len(mine), func(a, b int) { mine[a], mine[b] = mine[b], mine[a] })
		wg.Go(func() {
			for len(mine) > 0 {
				n := min(len(mine), 50)
				if err := j.Record(ctx, mine[:n]); err != nil {
					t.Errorf("worker %d: %v", w, err)
					return
				}
				mine = mine[n:]
			}
		})
	}
	wg.Wait()
	mem, err := journal.NewMemory(0)
	require.NoError(t, err)
	require.NoError(t, mem.Record(ctx, events))
	sameJournals(t, mem, sqlJournal(t, pool(t), tb, persistence.SQLJournalConfig{}))
	var entries int
	require.NoError(t, pool(t).QueryRow(ctx, `SELECT count(*) FROM `+tb.RunEvents).Scan(&entries))
	require.Equal(t, runs*(steps+1), entries, "each entry once")
	done, err := mem.Runs(ctx, journal.Query{Statuses: []journal.Status{journal.Completed}, Limit: runs})
	require.NoError(t, err)
	require.Len(t, done, runs)
}

// countingJournalDB counts the statements run through QueryRow.
type countingJournalDB struct {
	persistence.DB
	queryRows atomic.Int64
}

func (c *countingJournalDB) QueryRow(ctx context.Context, sql string, args ...any) pgx.Row {
	c.queryRows.Add(1)
	return c.DB.QueryRow(ctx, sql, args...)
}

func TestSQLJournalPurgeEndedInBatches(t *testing.T) {
	t.Parallel()
	db := pool(t)
	tb := tables(t, db)
	ctx := ctxT(t)
	counted := &countingJournalDB{DB: db}
	j := sqlJournal(t, counted, tb, persistence.SQLJournalConfig{PurgeBatch: 4, Retention: time.Hour})
	require.Equal(t, time.Hour, j.Retention())
	now := time.Now()
	run := func(id string, startedAgo time.Duration, status journal.Status, endedAgo time.Duration) {
		start := journal.Event{RunID: id, Flow: "orders", Key: "start", Kind: journal.KindStart, StartedAt: now.Add(-startedAgo),
			EndedAt: now.Add(-startedAgo), Status: journal.Running, Input: json.RawMessage(`{}`)}
		last := journal.Event{RunID: id, Flow: "orders", Key: "last", Seq: 1, Kind: journal.KindStep, StartedAt: now.Add(-endedAgo),
			EndedAt: now.Add(-endedAgo), Status: status}
		require.NoError(t, j.Record(ctx, []journal.Event{start, last}))
		require.NoError(t, j.PutData(ctx, id, "compensate/0/0/charge", []byte(id)))
	}
	var old []string
	for i := range 10 {
		old = append(old, fmt.Sprint("done-", i))
		run(old[len(old)-1], 3*time.Hour, journal.Completed, 2*time.Hour)
	}
	for i := range 3 {
		old = append(old, fmt.Sprint("failed-", i))
		run(old[len(old)-1], 3*time.Hour, journal.Failed, 90*time.Minute)
	}
	kept := []string{"recent-0", "recent-1", "running", "waiting", "compensating"}
	run("recent-0", 3*time.Hour, journal.Completed, 10*time.Minute)
	run("recent-1", 2*time.Hour, journal.Cancelled, 59*time.Minute)
	run("running", 5*time.Hour, journal.Running, 4*time.Hour)
	run("waiting", 5*time.Hour, journal.Waiting, 4*time.Hour)
	run("compensating", 5*time.Hour, journal.Compensating, 4*time.Hour)

	counted.queryRows.Store(0)
	n, err := j.PurgeEnded(ctx, time.Hour)
	require.NoError(t, err)
	require.Equal(t, int64(len(old)), n)
	require.Equal(t, int64(4), counted.queryRows.Load(), "13 runs, 4 a statement: 4, 4, 4, 1")
	for _, id := range old {
		_, err := j.Run(ctx, id)
		require.ErrorIs(t, err, journal.ErrRunNotFound)
		_, err = j.Timeline(ctx, id)
		require.ErrorIs(t, err, journal.ErrRunNotFound)
	}
	var orphans int
	require.NoError(t, db.QueryRow(ctx, `SELECT count(*) FROM `+tb.RunEvents+` WHERE run_id = ANY($1)`, old).Scan(&orphans))
	require.Zero(t, orphans, "their timelines went with them")
	for _, id := range old {
		_, err := j.Data(ctx, id, "compensate/0/0/charge")
		require.ErrorIs(t, err, journal.ErrDataNotFound, "their data went with them")
	}
	for _, id := range kept {
		got, err := j.Data(ctx, id, "compensate/0/0/charge")
		require.NoError(t, err)
		require.Equal(t, id, string(got))
	}
	for _, id := range kept {
		tl, err := j.Timeline(ctx, id)
		require.NoError(t, err, id)
		require.Len(t, tl, 2, id)
	}
	n, err = j.PurgeEnded(ctx, time.Hour)
	require.NoError(t, err)
	require.Zero(t, n)
	_, err = j.PurgeEnded(ctx, -time.Second)
	require.ErrorIs(t, err, broker.ErrInvalidOption)
}

// TestSQLJournalRefusesBadEvents: a batch with an event no journal can keep
// is refused whole, before anything is written; an error text that
// PostgreSQL cannot hold as it is is stored repaired instead.
func TestSQLJournalRefusesBadEvents(t *testing.T) {
	t.Parallel()
	db := pool(t)
	j := sqlJournal(t, db, tables(t, db), persistence.SQLJournalConfig{})
	ctx := ctxT(t)
	good := journal.Event{RunID: "g", Flow: "orders", Key: "start", Kind: journal.KindStart, StartedAt: jat(0), EndedAt: jat(0), Status: journal.Running}
	for name, bad := range map[string]func(*journal.Event){
		"no run id":      func(e *journal.Event) { e.RunID = "" },
		"unknown status": func(e *journal.Event) { e.Status = "done" },
		"NUL in a key":   func(e *journal.Event) { e.Key = "a\x00b" },
		"invalid step":   func(e *journal.Event) { e.Step = "\xff" },
		"huge attempt":   func(e *journal.Event) { e.Attempt = 1 << 40 },
	} {
		e := good
		e.RunID = "b"
		bad(&e)
		err := j.Record(ctx, []journal.Event{good, e})
		require.ErrorIs(t, err, persistence.ErrInvalidEvent, name)
	}
	_, err := j.Run(ctx, "g")
	require.ErrorIs(t, err, journal.ErrRunNotFound, "nothing of a refused batch is written")

	f := good
	f.Key, f.Seq, f.Status, f.Error = "fail", 1, journal.Failed, "bad \xff\xfe bytes and a \x00 NUL "+strings.Repeat("x", journal.MaxErrorLen)
	require.NoError(t, j.Record(ctx, []journal.Event{good, f}))
	r, err := j.Run(ctx, "g")
	require.NoError(t, err)
	require.True(t, strings.HasPrefix(r.Error, "bad \uFFFD bytes and a \uFFFD NUL xxx"), r.Error[:40])
	require.True(t, strings.HasSuffix(r.Error, "[truncated]"))
	require.LessOrEqual(t, len(r.Error), journal.MaxErrorLen)
}

// TestSQLJournalErrorContainsLiterally: % and _ in ErrorContains are text,
// not LIKE wildcards.
func TestSQLJournalErrorContainsLiterally(t *testing.T) {
	t.Parallel()
	db := pool(t)
	j := sqlJournal(t, db, tables(t, db), persistence.SQLJournalConfig{})
	ctx := ctxT(t)
	for i, msg := range []string{`disk 100% full`, `disk 1000 full`, `a_b`, `axb`, `back\slash`} {
		require.NoError(t, j.Record(ctx, []journal.Event{{RunID: fmt.Sprint("e", i), Flow: "f", Key: "k", Kind: journal.KindStep,
			StartedAt: jat(i), EndedAt: jat(i), Status: journal.Failed, Error: msg}}))
	}
	for needle, want := range map[string]string{`100%`: "e0", `A_B`: "e2", `k\s`: "e4"} {
		runs, err := j.Runs(ctx, journal.Query{ErrorContains: needle})
		require.NoError(t, err)
		require.Len(t, runs, 1, needle)
		require.Equal(t, want, runs[0].ID, needle)
	}
}

// journalNilDB is a DB never reached: configuration is checked first.
type journalNilDB struct{ persistence.DB }

func TestSQLJournalRefusesBadConfig(t *testing.T) {
	t.Parallel()
	_, err := persistence.NewSQLJournal(nil, persistence.SQLJournalConfig{})
	require.ErrorIs(t, err, broker.ErrInvalidOption)
	for name, cfg := range map[string]persistence.SQLJournalConfig{
		"negative purge batch": {PurgeBatch: -1},
		"negative retention":   {Retention: -time.Minute},
	} {
		_, err := persistence.NewSQLJournal(journalNilDB{}, cfg)
		require.ErrorIs(t, err, broker.ErrInvalidOption, name)
	}
	for name, tb := range map[string]persistence.Tables{
		"invalid runs table":  {Runs: "runs; DROP TABLE x"},
		"invalid events":      {RunEvents: "Events"},
		"runs and events one": {Runs: "journal", RunEvents: "journal"},
		"runs is the outbox":  {Runs: persistence.DefaultOutboxTable},
	} {
		_, err := persistence.NewSQLJournal(journalNilDB{}, persistence.SQLJournalConfig{Tables: tb})
		require.ErrorIs(t, err, persistence.ErrInvalidTableName, name)
	}
	j, err := persistence.NewSQLJournal(journalNilDB{}, persistence.SQLJournalConfig{})
	require.NoError(t, err)
	require.Zero(t, j.Retention(), "no retention unless asked")
}

func TestSQLJournalBriefTimeline(t *testing.T) {
	db := pool(t)
	journaltest.Brief(t, func(t *testing.T) journal.Journal {
		return sqlJournal(t, db, tables(t, db), persistence.SQLJournalConfig{})
	})
}
