package persistence_test

import (
	"context"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/acemq/acemq-flow/engine/journal"
	"github.com/acemq/acemq-flow/patterns"
	"github.com/acemq/acemq-flow/persistence"
)

// wrapped is a journal wrapped as a caller might (to watch its writes,
// as the enginepeer harness does), passing the context of Record on, or
// not.
type wrapped struct {
	journal.Journal
	dropContext bool
}

func (w *wrapped) Record(ctx context.Context, events []journal.Event) error {
	if w.dropContext {
		ctx = context.Background()
	}
	return w.Journal.Record(ctx, events)
}

// TestSQLIdempotencyRecordKept: RecordKept records the events and keeps
// the results (a confirmation drops the key's) in one statement when the
// journal is a SQLJournal on the store's database, also wrapped; through a
// wrapper that drops the context of Record, or on a journal of another
// kind, in three (results, events, confirmations), with the same outcome.
func TestSQLIdempotencyRecordKept(t *testing.T) {
	t.Parallel()
	db := pool(t)
	tb := tables(t, db)
	ctx := ctxT(t)
	mem, err := journal.NewMemory(0)
	require.NoError(t, err)
	for _, tc := range []struct {
		name  string
		j     func(persistence.DB) journal.Journal
		execs int64
	}{
		{"a SQL journal", func(d persistence.DB) journal.Journal { return sqlJournal(t, d, tb, persistence.SQLJournalConfig{}) }, 1},
		{"wrapped", func(d persistence.DB) journal.Journal {
			return &wrapped{Journal: sqlJournal(t, d, tb, persistence.SQLJournalConfig{})}
		}, 1},
		{"wrapped, dropping the context", func(d persistence.DB) journal.Journal {
			return &wrapped{Journal: sqlJournal(t, d, tb, persistence.SQLJournalConfig{}), dropContext: true}
		}, 3},
		{"in memory", func(persistence.DB) journal.Journal { return mem }, 2},
	} {
		t.Run(tc.name, func(t *testing.T) {
			cdb := &countingDB{DB: db}
			s := idemStore(t, cdb, tb, persistence.SQLIdempotencyStoreConfig{})
			j := tc.j(cdb)
			run := "run-" + tc.name
			now := time.Now()
			ev := journal.Event{RunID: run, Flow: "f", Kind: journal.KindStart, Outcome: "started", StartedAt: now, EndedAt: now,
				Status: journal.Running, RunStep: "a", Key: "start"}
			require.NoError(t, s.RecordKept(ctx, j, []journal.Event{ev},
				[]journal.Kept{{Key: run + "/kept", Result: []byte("hop")}, {Key: run + "/done", Result: []byte("x"), Confirmed: true}}))
			require.Equal(t, tc.execs, cdb.execs.Load(), "statements")
			r, err := j.Run(ctx, run)
			require.NoError(t, err)
			require.Equal(t, journal.Running, r.Status)
			got, ok, err := s.Result(ctx, run+"/kept")
			require.NoError(t, err)
			require.True(t, ok)
			require.Equal(t, "hop", string(got))
			_, ok, err = s.Result(ctx, run+"/done")
			require.NoError(t, err)
			require.False(t, ok, "confirmed: nothing kept")
			require.Equal(t, patterns.ClaimDuplicate, claimOf(t, s, run+"/done"))
		})
	}
}
