package journaltest

import (
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/acemq/acemq-flow/engine/journal"
)

// report is a worker's report as a worker of two flows makes it, seen at
// second s.
func report(id string, s int) journal.WorkerReport {
	return journal.WorkerReport{
		ID: id, Host: "host-a", PID: 4242, Build: "v1.2.3",
		Flows:     []journal.ServedFlow{{Flow: "orders", Version: "v1"}, {Flow: "refunds", Version: "v7"}},
		Checks:    []journal.Check{{Name: "broker"}, {Name: "database", Error: "ping: connection refused"}},
		StartedAt: at(0), SeenAt: at(s), Interval: 10 * time.Second,
		Queues: []journal.QueueLoad{
			{Queue: "orders.charge", Flow: "orders", Step: "charge", InFlight: 3},
			{Queue: "orders.charge.compensate", Flow: "orders", Step: "charge", Compensation: true, InFlight: 1},
			{Queue: "refunds.refund", Flow: "refunds", Step: "refund"},
		},
		Ladder: journal.LadderReport{Name: "acemq.schedule", Delivered: 12, Last: 40 * time.Millisecond, P99: 250 * time.Millisecond},
	}
}

// workers: a WorkerStore keeps each worker's latest report whole, lists
// them by id, forgets a removed one and those pruned, and refuses what it
// cannot keep; a journal that is not a WorkerStore skips it.
func workers(t *testing.T, j journal.Journal) {
	ws, ok := j.(journal.WorkerStore)
	if !ok {
		t.Skip("not a WorkerStore")
	}
	ctx := ctxOf(t)
	list := func() []journal.WorkerReport {
		t.Helper()
		got, err := ws.Workers(ctx)
		require.NoError(t, err)
		return got
	}
	require.Empty(t, list())

	b := report("w-b", 10)
	require.NoError(t, ws.ReportWorker(ctx, b))
	require.Equal(t, []journal.WorkerReport{b}, list(), "every field kept as reported")

	// The next beat replaces the report: no more checks failing, other
	// loads, draining.
	b2 := report("w-b", 20)
	b2.Checks = []journal.Check{{Name: "broker"}, {Name: "database"}}
	b2.Queues[0].InFlight, b2.Draining = 0, true
	require.NoError(t, ws.ReportWorker(ctx, b2))
	a := report("w-a", 30)
	a.Host, a.PID, a.Checks, a.Queues, a.Flows = "host-b", 7, nil, nil, nil
	require.NoError(t, ws.ReportWorker(ctx, a))
	got := list()
	require.Len(t, got, 2, "one report per worker")
	require.Equal(t, "w-a", got[0].ID, "by id")
	require.Equal(t, "host-b", got[0].Host)
	require.Empty(t, got[0].Checks)
	require.Empty(t, got[0].Queues)
	require.Equal(t, b2, got[1])
	require.True(t, got[1].Ready())
	require.True(t, got[1].Draining)

	// What a caller does with a listed report does not change the store.
	got[1].Queues[0].InFlight = 99
	require.Equal(t, b2, list()[1])

	require.NoError(t, ws.RemoveWorker(ctx, "w-b"))
	require.NoError(t, ws.RemoveWorker(ctx, "w-b"), "removing a worker with no report is not an error")
	require.Equal(t, []string{"w-a"}, ids(list()))

	require.NoError(t, ws.ReportWorker(ctx, report("w-c", 100)))
	n, err := ws.PruneWorkers(ctx, at(50))
	require.NoError(t, err)
	require.Equal(t, int64(1), n, "w-a, seen at 30")
	require.Equal(t, []string{"w-c"}, ids(list()))
	n, err = ws.PruneWorkers(ctx, at(100))
	require.NoError(t, err)
	require.Zero(t, n, "a report made at the limit is kept")

	for name, r := range map[string]journal.WorkerReport{
		"no id":             {SeenAt: at(1), Interval: time.Second},
		"a long id":         {ID: string(make([]byte, journal.MaxWorkerID+1)), SeenAt: at(1), Interval: time.Second},
		"never seen":        {ID: "w-x", Interval: time.Second},
		"no interval":       {ID: "w-x", SeenAt: at(1)},
		"a NUL in the host": {ID: "w-x", Host: "a\x00b", SeenAt: at(1), Interval: time.Second},
		"bad UTF-8 check":   {ID: "w-x", SeenAt: at(1), Interval: time.Second, Checks: []journal.Check{{Name: "db", Error: "\xff"}}},
		"negative load":     {ID: "w-x", SeenAt: at(1), Interval: time.Second, Queues: []journal.QueueLoad{{Queue: "q", InFlight: -1}}},
	} {
		require.ErrorIs(t, ws.ReportWorker(ctx, r), journal.ErrInvalidWorker, name)
	}
	require.Equal(t, []string{"w-c"}, ids(list()), "nothing refused was kept")
}

func ids(rs []journal.WorkerReport) []string {
	out := make([]string, len(rs))
	for i, r := range rs {
		out[i] = r.ID
	}
	return out
}
