package engine

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"fmt"
	"log/slog"
	"os"
	"time"

	"github.com/acemq/acemq-flow/broker"
	"github.com/acemq/acemq-flow/engine/journal"
)

// DefaultHeartbeat is how often a worker reports itself to the journal
// unless Config.Heartbeat says otherwise: a worker that stops reporting is
// shown lost journal.LostAfter intervals (30 s) later.
const DefaultHeartbeat = 10 * time.Second

// WorkerReportRetention is how long the report of a worker that stopped
// reporting without removing it (it died) is kept, shown as lost, before
// a running worker prunes it.
const WorkerReportRetention = time.Hour

// pruneEvery is how many beats a worker makes between two prunes of the
// journal's old reports: a minute at the default interval.
const pruneEvery = 6

// checkWorker names the readiness check a worker reports when
// Config.Readiness is not set: its consumers run (Worker.Err).
const checkWorker = "worker"

// workedQueue is a queue a worker consumes for a step or a compensation,
// and whose: what its heartbeat reports the deliveries in flight of.
type workedQueue struct {
	c            *broker.Consumer
	flow, step   string
	compensation bool
}

// heartbeat is a worker's reports of itself to a journal.WorkerStore:
// one when the worker starts, then one every interval and one when it
// starts draining, until it is closed, when its report is removed. Its
// goroutine is owned by the worker (Worker.Close stops it).
type heartbeat struct {
	w        *Worker
	store    journal.WorkerStore
	interval time.Duration
	// static is the report's part that does not change between beats.
	static journal.WorkerReport
	// ladder is the connection's ladder counters at the last beat, what
	// the next one's lateness is taken since. Only the beating goroutine
	// touches it, or start before that goroutine runs.
	ladder broker.LadderStats
	// failing is set while reports fail, so that an outage is logged once.
	failing bool

	kick chan struct{}
	stop context.CancelFunc
	done chan struct{}
}

// startHeartbeat makes the worker's first report, then reports every
// Config.Heartbeat until the worker closes: when the journal keeps
// reports (journal.WorkerStore) and the interval is not negative. A
// report that fails is logged, never the worker's failure.
func (w *Worker) startHeartbeat(fs []*flow) {
	store, ok := w.e.journal.(journal.WorkerStore)
	if !ok || w.e.cfg.Heartbeat < 0 {
		return
	}
	host, _ := os.Hostname()
	h := &heartbeat{w: w, store: store, interval: w.e.cfg.Heartbeat, kick: make(chan struct{}, 1), done: make(chan struct{}),
		ladder: w.e.conn.LadderStats(),
		static: journal.WorkerReport{ID: workerID(host), Host: host, PID: os.Getpid(), Build: w.e.cfg.Build,
			StartedAt: w.e.now(), Interval: w.e.cfg.Heartbeat}}
	for _, f := range fs {
		h.static.Flows = append(h.static.Flows, journal.ServedFlow{Flow: f.name, Version: f.version})
	}
	w.hb = h
	ctx, stop := context.WithCancel(context.Background())
	h.stop = stop
	h.beat(ctx)
	go func() {
		defer close(h.done)
		h.run(ctx)
	}()
}

// workerID names a worker: its host and pid, for a person, and a random
// suffix, since a process may run several workers.
func workerID(host string) string {
	var b [4]byte
	rand.Read(b[:]) // never fails: it crashes the process first
	if host == "" {
		host = "unknown"
	}
	id := fmt.Sprintf("%s-%d-%s", host, os.Getpid(), hex.EncodeToString(b[:]))
	if len(id) > journal.MaxWorkerID {
		id = id[len(id)-journal.MaxWorkerID:]
	}
	return id
}

// run beats every interval, and at once when kicked, until ctx ends;
// every pruneEvery beats it prunes the reports of workers lost long ago.
func (h *heartbeat) run(ctx context.Context) {
	t := time.NewTicker(h.interval)
	defer t.Stop()
	for beats := 1; ; beats++ {
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		case <-h.kick:
		}
		h.beat(ctx)
		if beats%pruneEvery == 0 {
			h.prune(ctx)
		}
	}
}

// beat makes one report, within one interval, so that a slow journal
// never piles beats up.
func (h *heartbeat) beat(ctx context.Context) {
	ctx, cancel := context.WithTimeout(ctx, h.interval)
	defer cancel()
	err := h.store.ReportWorker(ctx, h.report(ctx))
	log := h.w.e.log
	switch {
	case err != nil && ctx.Err() == nil && !h.failing:
		log.Warn("worker: report to the journal failed; the fleet view shows this worker lost until one succeeds",
			slog.String("worker", h.static.ID), slog.Any("error", err))
		h.failing = true
	case err == nil && h.failing:
		log.Info("worker: reporting to the journal again", slog.String("worker", h.static.ID))
		h.failing = false
	}
}

// report is the worker's report now: its readiness checks run, what its
// consumers hold, and its ladder's deliveries since the last beat.
func (h *heartbeat) report(ctx context.Context) journal.WorkerReport {
	w := h.w
	r := h.static.Clone()
	r.SeenAt = w.e.now()
	r.Draining = w.draining.Load()
	if w.e.cfg.Readiness != nil {
		r.Checks = w.e.cfg.Readiness(ctx, w)
	} else {
		r.Checks = []journal.Check{{Name: checkWorker, Error: errText(w.Err())}}
	}
	for _, q := range w.queues {
		r.Queues = append(r.Queues, journal.QueueLoad{Queue: q.c.Queue(), Flow: q.flow, Step: q.step,
			Compensation: q.compensation, InFlight: q.c.InFlight()})
	}
	now := w.e.conn.LadderStats()
	r.Ladder = journal.LadderReport{Name: w.e.conn.Ladder(), Delivered: now.Delivered - h.ladder.Delivered, Last: now.LastLateness}
	r.Ladder.P99, _ = now.LatenessQuantile(h.ladder, 0.99)
	h.ladder = now
	return r
}

// prune forgets the reports of workers that stopped reporting more than
// WorkerReportRetention ago.
func (h *heartbeat) prune(ctx context.Context) {
	ctx, cancel := context.WithTimeout(ctx, h.interval)
	defer cancel()
	n, err := h.store.PruneWorkers(ctx, h.w.e.now().Add(-WorkerReportRetention))
	if err != nil || n > 0 {
		h.w.e.log.Debug("worker: reports of workers lost long ago pruned", slog.Int64("reports", n), slog.Any("error", err))
	}
}

// draining reports at once that the worker is draining.
func (h *heartbeat) draining() {
	select {
	case h.kick <- struct{}{}:
	default: // a beat is already asked for
	}
}

// close stops the beats and removes the worker's report within five
// seconds, whatever is left of ctx: a worker whose drain ran out of time
// still removes it.
func (h *heartbeat) close(ctx context.Context) {
	h.stop()
	<-h.done
	ctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 5*time.Second)
	defer cancel()
	if err := h.store.RemoveWorker(ctx, h.static.ID); err != nil {
		h.w.e.log.Warn("worker: its report was not removed from the journal; the fleet view shows it lost until it is pruned",
			slog.String("worker", h.static.ID), slog.Any("error", err))
	}
}

// ID is the id the worker reports itself under in the journal's workers'
// reports (journal.WorkerReport), "" when it makes none.
func (w *Worker) ID() string {
	if w.hb == nil {
		return ""
	}
	return w.hb.static.ID
}
