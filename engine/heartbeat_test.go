package engine_test

import (
	"context"
	"errors"
	"os"
	"sync/atomic"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
	"go.uber.org/goleak"

	"github.com/acemq/acemq-flow/broker"
	"github.com/acemq/acemq-flow/dsl"
	"github.com/acemq/acemq-flow/engine"
	"github.com/acemq/acemq-flow/engine/journal"
)

// countingReports is a memory journal that counts the workers' reports
// made to it.
type countingReports struct {
	*journal.Memory
	reports atomic.Int32
}

func (c *countingReports) ReportWorker(ctx context.Context, r journal.WorkerReport) error {
	c.reports.Add(1)
	return c.Memory.ReportWorker(ctx, r)
}

// heartbeatWorker is an engine of cfg on a loopback broker of the test's
// own, with a flow of two steps whose second, "hold", waits until release
// is closed, and a compensation on the first.
type heartbeatWorker struct {
	eng     *engine.Engine
	j       journal.WorkerStore
	flow    string
	release chan struct{}
	held    chan struct{}
}

func newHeartbeatWorker(t *testing.T, cfg engine.Config) *heartbeatWorker {
	t.Helper()
	ctx := context.Background()
	conn, err := broker.Open(ctx, "memory://")
	require.NoError(t, err)
	t.Cleanup(func() { require.NoError(t, conn.Close(ctx)) })
	if cfg.Journal == nil {
		mem, err := journal.NewMemory(0)
		require.NoError(t, err)
		cfg.Journal = mem
	}
	cfg.Conn = conn
	eng, err := engine.New(cfg)
	require.NoError(t, err)
	t.Cleanup(func() { require.NoError(t, eng.Close(ctx)) })
	hw := &heartbeatWorker{eng: eng, j: cfg.Journal.(journal.WorkerStore), flow: "beating", release: make(chan struct{}), held: make(chan struct{}, 16)}
	require.NoError(t, eng.Register(dsl.Flow(hw.flow,
		dsl.Step("first", same).Compensate(func(context.Context, Order) error { return nil }),
		dsl.Step("hold", func(ctx context.Context, o Order) (Order, error) {
			select {
			case hw.held <- struct{}{}:
			default: // nobody counts the runs held
			}
			select {
			case <-hw.release:
			case <-ctx.Done():
			}
			return o, nil
		}))))
	return hw
}

// only is the one report in the journal.
func (hw *heartbeatWorker) only(t *testing.T) journal.WorkerReport {
	t.Helper()
	rs, err := hw.j.Workers(context.Background())
	require.NoError(t, err)
	require.Len(t, rs, 1)
	return rs[0]
}

// load is the report's in flight of the flow's step queue (not its
// compensation's).
func load(r journal.WorkerReport, step string) (int, bool) {
	for _, q := range r.Queues {
		if q.Step == step && !q.Compensation {
			return q.InFlight, true
		}
	}
	return 0, false
}

// TestWorkerReportsItself: a started worker has reported itself (its
// host, pid, flows and versions, its readiness, every step and
// compensation queue it consumes), each beat says what its handlers hold,
// it says it is draining while it closes, and its report is gone once it
// closed.
func TestWorkerReportsItself(t *testing.T) {
	t.Parallel()
	hw := newHeartbeatWorker(t, engine.Config{Heartbeat: 20 * time.Millisecond, Build: "v9.9.9"})
	ctx := context.Background()
	before := time.Now()
	w, err := hw.eng.StartWorker(ctx)
	require.NoError(t, err)

	r := hw.only(t)
	require.Equal(t, w.ID(), r.ID)
	host, _ := os.Hostname()
	require.Equal(t, host, r.Host)
	require.Equal(t, os.Getpid(), r.PID)
	require.Equal(t, "v9.9.9", r.Build)
	fi, err := hw.eng.Flow(hw.flow)
	require.NoError(t, err)
	require.Equal(t, []journal.ServedFlow{{Flow: hw.flow, Version: fi.Version}}, r.Flows)
	require.Equal(t, []journal.Check{{Name: "worker"}}, r.Checks, "without Config.Readiness, its consumers")
	require.True(t, r.Ready())
	require.Equal(t, 20*time.Millisecond, r.Interval)
	require.False(t, r.StartedAt.Before(before.Truncate(time.Millisecond)))
	var queues []string
	for _, q := range r.Queues {
		queues = append(queues, q.Queue)
		require.Equal(t, hw.flow, q.Flow)
	}
	require.ElementsMatch(t, []string{fi.Steps[0].Queue, fi.Steps[0].Compensation, fi.Steps[1].Queue}, queues)
	require.Equal(t, "acemq.schedule", r.Ladder.Name)

	_, err = hw.eng.Start(ctx, hw.flow, Order{ID: "o-1"})
	require.NoError(t, err)
	_, err = hw.eng.Start(ctx, hw.flow, Order{ID: "o-2"})
	require.NoError(t, err)
	<-hw.held
	<-hw.held
	require.Eventually(t, func() bool {
		n, _ := load(hw.only(t), "hold")
		return n == 2
	}, 5*time.Second, 5*time.Millisecond, "two runs held at hold")
	n, ok := load(hw.only(t), "first")
	require.True(t, ok)
	require.Zero(t, n)

	closed := make(chan error, 1)
	go func() { closed <- w.Close(ctx) }()
	require.Eventually(t, func() bool { return hw.only(t).Draining }, 5*time.Second, 5*time.Millisecond, "draining said at once")
	close(hw.release)
	require.NoError(t, <-closed)
	rs, err := hw.j.Workers(ctx)
	require.NoError(t, err)
	require.Empty(t, rs, "a worker that closed removed its report")
}

// TestHeartbeatIsNotPerMessage: a worker reports when it starts and then
// once an interval, whatever it works: a hundred runs through two steps
// add no report.
func TestHeartbeatIsNotPerMessage(t *testing.T) {
	t.Parallel()
	mem, err := journal.NewMemory(0)
	require.NoError(t, err)
	j := &countingReports{Memory: mem}
	hw := newHeartbeatWorker(t, engine.Config{Journal: j, Heartbeat: time.Hour})
	close(hw.release)
	ctx := context.Background()
	w, err := hw.eng.StartWorker(ctx)
	require.NoError(t, err)
	t.Cleanup(func() { require.NoError(t, w.Close(ctx)) })
	var ids []string
	for i := range 100 {
		res, err := hw.eng.Start(ctx, hw.flow, Order{ID: "o", Amount: i})
		require.NoError(t, err)
		ids = append(ids, res.RunID)
	}
	require.NoError(t, hw.eng.Flush(ctx))
	require.Eventually(t, func() bool {
		require.NoError(t, hw.eng.Flush(ctx))
		for _, id := range ids {
			if r, err := mem.Run(ctx, id); err != nil || r.Status != journal.Completed {
				return false
			}
		}
		return true
	}, 10*time.Second, 10*time.Millisecond)
	require.Equal(t, int32(1), j.reports.Load(), "one report, when it started")
}

// TestHeartbeatReadinessAndPrune: a worker's report carries what
// Config.Readiness found; a worker prunes the reports of workers lost
// longer than WorkerReportRetention ago, and leaves the lately lost.
func TestHeartbeatReadinessAndPrune(t *testing.T) {
	t.Parallel()
	var asked atomic.Pointer[engine.Worker]
	hw := newHeartbeatWorker(t, engine.Config{Heartbeat: 10 * time.Millisecond,
		Readiness: func(_ context.Context, w *engine.Worker) []journal.Check {
			asked.Store(w)
			return []journal.Check{{Name: "broker"}, {Name: "database", Error: errors.New("ping: refused").Error()}}
		}})
	close(hw.release)
	ctx := context.Background()
	now := time.Now()
	old := journal.WorkerReport{ID: "dead-long-ago", SeenAt: now.Add(-engine.WorkerReportRetention - time.Minute), Interval: time.Second}
	lately := journal.WorkerReport{ID: "dead-lately", SeenAt: now.Add(-time.Minute), Interval: time.Second}
	require.NoError(t, hw.j.ReportWorker(ctx, old))
	require.NoError(t, hw.j.ReportWorker(ctx, lately))
	w, err := hw.eng.StartWorker(ctx)
	require.NoError(t, err)
	t.Cleanup(func() { require.NoError(t, w.Close(ctx)) })
	require.Same(t, w, asked.Load())
	require.Eventually(t, func() bool {
		rs, err := hw.j.Workers(ctx)
		require.NoError(t, err)
		return len(rs) == 2
	}, 5*time.Second, 5*time.Millisecond, "the one lost long ago pruned")
	rs, err := hw.j.Workers(ctx)
	require.NoError(t, err)
	require.ElementsMatch(t, []string{"dead-lately", w.ID()}, []string{rs[0].ID, rs[1].ID})
	for _, r := range rs {
		if r.ID == w.ID() {
			require.False(t, r.Ready())
			require.Equal(t, []journal.Check{{Name: "broker"}, {Name: "database", Error: "ping: refused"}}, r.Checks)
		} else {
			require.True(t, r.Lost(time.Now()))
		}
	}
}

// TestNoHeartbeat: a negative Heartbeat makes no report, and a journal
// that keeps none gets none.
func TestNoHeartbeat(t *testing.T) {
	t.Parallel()
	hw := newHeartbeatWorker(t, engine.Config{Heartbeat: -1})
	ctx := context.Background()
	w, err := hw.eng.StartWorker(ctx)
	require.NoError(t, err)
	t.Cleanup(func() { require.NoError(t, w.Close(ctx)) })
	rs, err := hw.j.Workers(ctx)
	require.NoError(t, err)
	require.Empty(t, rs)
	require.Empty(t, w.ID())
}

// TestHeartbeatLeavesNoGoroutine: once its worker, engine and connection
// are closed, nothing the heartbeat started runs. Not parallel, so that
// no other test's goroutines come and go meanwhile.
func TestHeartbeatLeavesNoGoroutine(t *testing.T) {
	before := goleak.IgnoreCurrent()
	// Registered first, so run last: after the connection closed.
	t.Cleanup(func() { goleak.VerifyNone(t, before) })
	mem, err := journal.NewMemory(0)
	require.NoError(t, err)
	j := &countingReports{Memory: mem}
	hw := newHeartbeatWorker(t, engine.Config{Journal: j, Heartbeat: 5 * time.Millisecond})
	close(hw.release)
	ctx := context.Background()
	w, err := hw.eng.StartWorker(ctx)
	require.NoError(t, err)
	require.Eventually(t, func() bool { return j.reports.Load() >= 10 }, 5*time.Second, time.Millisecond, "ten beats")
	require.NoError(t, w.Close(ctx))
	rs, err := mem.Workers(ctx)
	require.NoError(t, err)
	require.Empty(t, rs)
}
