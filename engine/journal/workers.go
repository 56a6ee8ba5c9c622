package journal

import (
	"context"
	"errors"
	"fmt"
	"maps"
	"slices"
	"time"
)

// ErrInvalidWorker is what a WorkerStore's refusals match: a report no
// store can keep (see CheckWorker).
var ErrInvalidWorker = errors.New("invalid worker report")

// LostAfter is how many of its heartbeat intervals a worker's report may
// go unrenewed before the worker counts as lost: one missed beat is a
// slow database, three a worker that died or cannot reach it.
const LostAfter = 3

// MaxWorkerID bounds a worker's id, in bytes.
const MaxWorkerID = 200

// WorkerReport is what a running worker says of itself on every
// heartbeat (engine.Config.Heartbeat): who and where it is, what it
// serves, whether it is ready, and what it is doing now. A WorkerStore
// keeps the latest report of each worker until the worker removes it
// (it stopped cleanly) or it is pruned (the worker died long ago).
type WorkerReport struct {
	// ID names the worker: unique among the workers of a journal, and
	// the same on each of its beats.
	ID   string `json:"id"`
	Host string `json:"host"`
	PID  int    `json:"pid"`
	// Build is the version of the binary the worker runs ("" unknown).
	Build string `json:"build,omitempty"`
	// Flows are the flows the worker works, with the version of each
	// (engine.FlowInfo.Version).
	Flows []ServedFlow `json:"flows"`
	// Checks are its readiness checks with what each found when the
	// report was made (what its /readyz answers); Ready says whether they
	// all held.
	Checks []Check `json:"checks"`
	// Draining: the worker is closing, letting its steps in flight
	// finish; it removes the report once done.
	Draining  bool      `json:"draining,omitempty"`
	StartedAt time.Time `json:"started_at"`
	// SeenAt is when the report was made, on the worker's clock.
	SeenAt time.Time `json:"seen_at"`
	// Interval is how often the worker reports: a report older than
	// LostAfter intervals is of a worker that is lost (Lost).
	Interval time.Duration `json:"interval_ns"`
	// Queues are the queues the worker consumes for its flows' steps and
	// compensations, each with the deliveries its handlers hold now.
	Queues []QueueLoad `json:"queues"`
	// Ladder is what the worker's scheduler ladder control consumer did
	// over its last interval.
	Ladder LadderReport `json:"ladder"`
}

// ServedFlow is a flow a worker works and the version of it it serves.
type ServedFlow struct {
	Flow    string `json:"flow"`
	Version string `json:"version"`
}

// Check is one readiness check of a worker and what it found: Error is
// "" while it holds, else why it does not.
type Check struct {
	Name  string `json:"name"`
	Error string `json:"error,omitempty"`
}

// QueueLoad is a queue a worker consumes and how many of its deliveries
// the worker's handlers hold now. Step is the step of Flow whose queue it
// is (a step's old name's queue, dsl.Renamed, counts for the step);
// Compensation says it is the step's compensation queue.
type QueueLoad struct {
	Queue        string `json:"queue"`
	Flow         string `json:"flow"`
	Step         string `json:"step"`
	Compensation bool   `json:"compensation,omitempty"`
	InFlight     int    `json:"in_flight"`
}

// LadderReport is what a worker's scheduler ladder control consumer
// (broker.Conn.LadderStats) delivered over the worker's last interval and
// how late: Last is the lateness of the last message it delivered (ever),
// P99 the 99th percentile over the interval as the upper bound of its
// bucket (broker.LadderStats.LatenessQuantile; 0 when Delivered is 0).
type LadderReport struct {
	Name      string        `json:"name"`
	Delivered int64         `json:"delivered"`
	Last      time.Duration `json:"last_ns"`
	P99       time.Duration `json:"p99_ns"`
}

// Ready reports whether every check of the report held (a worker with no
// checks is ready whenever it reports, as /readyz is).
func (r WorkerReport) Ready() bool {
	return !slices.ContainsFunc(r.Checks, func(c Check) bool { return c.Error != "" })
}

// Lost reports whether, at now, the worker has not renewed its report
// for more than LostAfter intervals.
func (r WorkerReport) Lost(now time.Time) bool {
	return now.Sub(r.SeenAt) > LostAfter*r.Interval
}

// InFlight is how many deliveries the worker's handlers hold now, over
// every queue it consumes.
func (r WorkerReport) InFlight() int {
	n := 0
	for _, q := range r.Queues {
		n += q.InFlight
	}
	return n
}

// Clone is a copy of r sharing nothing with it.
func (r WorkerReport) Clone() WorkerReport {
	r.Flows, r.Checks, r.Queues = slices.Clone(r.Flows), slices.Clone(r.Checks), slices.Clone(r.Queues)
	return r
}

// WorkerStore is a journal that keeps the reports the workers of its
// flows make of themselves (WorkerReport), the latest of each worker:
// what the fleet view (package engine/fleet) lists. Both shipped journals
// implement it; the Memory journal knows only the workers of its own
// process.
type WorkerStore interface {
	// ReportWorker keeps r as its worker's latest report, in place of
	// the one before. It refuses what CheckWorker refuses.
	ReportWorker(ctx context.Context, r WorkerReport) error
	// RemoveWorker forgets the report of worker id: it stopped. An id
	// with no report is not an error.
	RemoveWorker(ctx context.Context, id string) error
	// Workers are the latest reports of every worker, by id.
	Workers(ctx context.Context) ([]WorkerReport, error)
	// PruneWorkers forgets the reports made before seenBefore (of
	// workers that died long ago) and says how many.
	PruneWorkers(ctx context.Context, seenBefore time.Time) (int64, error)
}

// CheckWorker refuses, with an error matching ErrInvalidWorker, a report
// no WorkerStore can keep: without an id or with one over MaxWorkerID
// bytes, without the time it was made or a positive interval, a
// negative pid or count, or a text that is not Text.
func CheckWorker(r WorkerReport) error {
	bad := func(format string, args ...any) error {
		return fmt.Errorf("%w: worker %q: %s", ErrInvalidWorker, r.ID, fmt.Sprintf(format, args...))
	}
	switch {
	case r.ID == "" || len(r.ID) > MaxWorkerID || !Text(r.ID):
		return bad("want an id of 1 to %d bytes of text", MaxWorkerID)
	case r.SeenAt.IsZero():
		return bad("no time it was seen")
	case r.Interval <= 0:
		return bad("interval %s: want a positive one", r.Interval)
	case r.PID < 0 || r.Ladder.Delivered < 0:
		return bad("negative pid %d or deliveries %d", r.PID, r.Ladder.Delivered)
	}
	texts := []string{r.Host, r.Build, r.Ladder.Name}
	for _, f := range r.Flows {
		texts = append(texts, f.Flow, f.Version)
	}
	for _, c := range r.Checks {
		texts = append(texts, c.Name, c.Error)
	}
	for _, q := range r.Queues {
		if q.InFlight < 0 {
			return bad("queue %q: negative in flight %d", q.Queue, q.InFlight)
		}
		texts = append(texts, q.Queue, q.Flow, q.Step)
	}
	for _, s := range texts {
		if !Text(s) {
			return bad("%q is not text", s)
		}
	}
	return nil
}

// memWorkers are the reports a Memory journal keeps (WorkerStore), by
// worker id, under mu.
type memWorkers map[string]WorkerReport

// ReportWorker keeps r as its worker's latest report (WorkerStore).
func (m *Memory) ReportWorker(_ context.Context, r WorkerReport) error {
	if err := CheckWorker(r); err != nil {
		return err
	}
	m.mu.Lock()
	defer m.mu.Unlock()
	if m.workers == nil {
		m.workers = memWorkers{}
	}
	m.workers[r.ID] = r.Clone()
	return nil
}

// RemoveWorker forgets worker id's report (WorkerStore).
func (m *Memory) RemoveWorker(_ context.Context, id string) error {
	m.mu.Lock()
	defer m.mu.Unlock()
	delete(m.workers, id)
	return nil
}

// Workers are the latest report of every worker, by id (WorkerStore).
func (m *Memory) Workers(context.Context) ([]WorkerReport, error) {
	m.mu.RLock()
	defer m.mu.RUnlock()
	out := make([]WorkerReport, 0, len(m.workers))
	for _, id := range slices.Sorted(maps.Keys(m.workers)) {
		out = append(out, m.workers[id].Clone())
	}
	return out, nil
}

// PruneWorkers forgets the reports made before seenBefore (WorkerStore).
func (m *Memory) PruneWorkers(_ context.Context, seenBefore time.Time) (int64, error) {
	m.mu.Lock()
	defer m.mu.Unlock()
	var n int64
	for id, r := range m.workers {
		if r.SeenAt.Before(seenBefore) {
			delete(m.workers, id)
			n++
		}
	}
	return n, nil
}
