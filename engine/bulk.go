package engine

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strings"
	"sync"
	"time"

	"github.com/acemq/acemq-flow/broker"
	"github.com/acemq/acemq-flow/engine/journal"
	"github.com/acemq/acemq-flow/patterns"
)

// BulkReplay selects failed runs to replay together.
type BulkReplay struct {
	// Flow, when set, keeps only runs of that flow, and is the type Where's
	// payload is checked against.
	Flow string
	// Since keeps only runs started at or after it (zero: all).
	Since time.Time
	// Where, when set, is an expr-lang condition a run must meet: it sees
	// run (run_id, flow, step, error, attempt: of the step that failed,
	// started_at) and payload (the run's input, by its JSON names):
	// `run.step == "ship" && payload.amount_cents > 1000`. It is compiled
	// before anything is read, against Flow's input type: a field that
	// type lacks, or a result that is not a bool, is an error. Without
	// Flow it may read run only.
	Where string
	// RunIDs, when set, are the runs to replay, instead of the journal's
	// failed runs: the other fields still filter them.
	RunIDs []string
	// Limit caps how many runs are replayed: the journal's failed runs are
	// read, newest first, until Limit of them met Where or none are left
	// (0 = journal.DefaultLimit; with RunIDs, 0 = all of them).
	Limit int
	// Rate caps replays per second (0 = as fast as the broker goes).
	Rate float64
	// DryRun selects and filters, and moves nothing.
	DryRun bool
	// From, when set, replays each chosen run from that step instead
	// (ReplayFrom): runs in any of Statuses (failed when none is given)
	// are chosen, which must be statuses ReplayFrom applies to (completed,
	// ended, failed, compensated), and Reason is recorded on each replay.
	// A run ReplayFrom refuses is listed in Refused, and the others go on.
	From     string
	Statuses []journal.Status
	Reason   string
	// Selected hears the selection once it is made, before anything
	// moves: Matched is the total Progress counts towards.
	Selected func(BulkResult)
	// Progress hears the counts after every run decided, one call at a
	// time; it must return quickly, and not keep the result's lists, which
	// the replay goes on changing (copy them).
	Progress func(BulkResult)
}

// BulkResult says what a bulk replay did, or would do.
type BulkResult struct {
	// Selected is how many failed runs were read from the journal and
	// looked at (Where's input).
	Selected int `json:"selected"`
	// Matched is how many of them were chosen (Where accepted them, up to
	// the limit): Replayed and NotFound once the replay is done.
	Matched int `json:"matched"`
	// Replayed lists the runs whose message went back to its step (for a
	// dry run: that would).
	Replayed []string `json:"replayed"`
	// Skipped counts the runs Where declined (with RunIDs, also those of
	// another flow than Flow, or started before Since).
	Skipped int `json:"skipped"`
	// NotFound lists runs whose message was in none of the queues it
	// could be in (or that were parked: replaying cannot help them).
	NotFound []string `json:"not_found"`
	// NotFailed lists runs of RunIDs the journal does not know or that are
	// not failed (any more; for a replay from a step, in none of its
	// Statuses): left alone.
	NotFailed []string `json:"not_failed,omitempty"`
	// Refused lists the runs a replay from a step (BulkReplay.From)
	// refused, with why.
	Refused []BulkRefusal `json:"refused,omitempty"`
	// Interrupted says ctx ended first: what is counted was done, the
	// rest not started, nothing half-moved.
	Interrupted bool `json:"interrupted,omitempty"`
	DryRun      bool `json:"dry_run,omitempty"`
}

// BulkRefusal is a run a bulk replay from a step did not replay, and why
// (ReplayFrom's error).
type BulkRefusal struct {
	RunID  string `json:"run_id"`
	Reason string `json:"reason"`
}

// statuses are the statuses of the runs req chooses: failed, unless a
// replay from a step says otherwise.
func (req BulkReplay) statuses() ([]journal.Status, error) {
	if len(req.Statuses) == 0 {
		return []journal.Status{journal.Failed}, nil
	}
	for _, s := range req.Statuses {
		if req.From == "" && s != journal.Failed || !ReplayableFrom(s) {
			return nil, fmt.Errorf("%w: bulk replay of %s runs: a replay takes failed runs, a replay from a step (From) completed, ended, failed or compensated ones",
				ErrInvalidConfig, s)
		}
	}
	return req.Statuses, nil
}

// ReplayBulk replays failed runs chosen by req: each run's given-up
// message goes back to its step with the acemq-replayed-* stamps, in one
// pass over each dead-letter queue involved (one message at a time, so
// that what is counted is exactly what moved), at most req.Rate a second,
// and each replay is recorded. A run that failed moments ago whose message
// is not in its queue yet is looked for again, as Replay does, for a few
// seconds. ctx ending stops it between messages and the result says what
// was done (Interrupted, and a nil error); nothing is half-moved (a
// message is acknowledged only once its copy is confirmed).
//
// With req.From it replays each chosen run from that step instead, one
// ReplayFrom each (see BulkReplay.From).
//
// It refuses, before anything is read or moved: an unknown Flow
// (ErrUnknownFlow), and an invalid Where, a negative Limit or Rate, or
// Statuses a replay does not apply to (ErrInvalidConfig).
func (e *Engine) ReplayBulk(ctx context.Context, req BulkReplay) (BulkResult, error) {
	res := BulkResult{DryRun: req.DryRun, Replayed: []string{}, NotFound: []string{}}
	if req.Limit < 0 || req.Rate < 0 {
		return res, fmt.Errorf("%w: bulk replay: limit %d and rate %g must not be negative", ErrInvalidConfig, req.Limit, req.Rate)
	}
	w, err := e.compileWhere(req)
	if err != nil {
		return res, err
	}
	statuses, err := req.statuses()
	if err != nil {
		return res, err
	}
	limit := req.Limit
	switch {
	case limit == 0 && len(req.RunIDs) > 0:
		limit = len(req.RunIDs)
	case limit == 0:
		limit = journal.DefaultLimit
	}
	var mu sync.Mutex
	report := func() {
		if req.Progress != nil {
			mu.Lock()
			r := res
			mu.Unlock()
			req.Progress(r)
		}
	}
	sel := selection{e: e, req: req, where: w, limit: limit, res: &res, report: report, statuses: statuses}
	runs, err := sel.choose(ctx)
	if ctx.Err() != nil {
		res.Interrupted = true
		return res, nil
	}
	if err != nil {
		return res, err
	}
	res.Matched = len(runs)
	if req.Selected != nil {
		req.Selected(res)
	}
	if req.From != "" {
		return e.replayBulkFrom(ctx, req, runs, &res, &mu, report)
	}
	byQueue := map[string]map[string]journal.Run{}
	var order []string
	for _, r := range runs {
		if r.DeadLetter == "" || strings.HasSuffix(r.DeadLetter, broker.ParkedSuffix) {
			res.NotFound = append(res.NotFound, r.ID)
			report()
			continue
		}
		if byQueue[r.DeadLetter] == nil {
			byQueue[r.DeadLetter] = map[string]journal.Run{}
			order = append(order, r.DeadLetter)
		}
		byQueue[r.DeadLetter][r.ID] = r
	}
	if req.DryRun {
		for _, q := range order {
			for id := range byQueue[q] {
				res.Replayed = append(res.Replayed, id)
			}
		}
		slices.Sort(res.Replayed)
		return res, nil
	}
	m := mover{e: e, pace: newPacer(req.Rate), mu: &mu, res: &res, report: report}
	err = m.move(ctx, order, byQueue)
	slices.Sort(res.NotFound)
	return res, errors.Join(err, e.writer.Flush(context.WithoutCancel(ctx)))
}

// settleBackoff is how long a bulk replay waits first before it looks
// again for the messages of runs that failed less than settleWindow ago;
// it doubles each time.
const settleBackoff = 250 * time.Millisecond

// mover moves the chosen runs' messages, pass by pass.
type mover struct {
	e      *Engine
	pace   *pacer
	mu     *sync.Mutex
	res    *BulkResult
	report func()
}

// move takes the runs of each queue (in order) back to their steps, then
// looks again, with a growing pause, for the runs whose message was not
// there yet because they failed moments ago; the others are not found.
func (m *mover) move(ctx context.Context, order []string, byQueue map[string]map[string]journal.Run) error {
	pause := settleBackoff
	for {
		for _, q := range order {
			if len(byQueue[q]) == 0 {
				continue
			}
			if err := m.pass(ctx, q, byQueue[q]); err != nil || ctx.Err() != nil {
				m.res.Interrupted = ctx.Err() != nil
				return err
			}
		}
		again := false
		for _, q := range order {
			for id, r := range byQueue[q] {
				if m.e.now().Sub(r.UpdatedAt) < settleWindow {
					again = true
					continue
				}
				delete(byQueue[q], id)
				m.mu.Lock()
				m.res.NotFound = append(m.res.NotFound, id)
				m.mu.Unlock()
				m.report()
			}
		}
		if !again {
			return nil
		}
		t := time.NewTimer(pause)
		select {
		case <-ctx.Done():
			t.Stop()
			m.res.Interrupted = true
			return nil
		case <-t.C:
		}
		pause *= 2
	}
}

// pass is one pass over q taking the messages of want's runs back to
// their steps: those it moved are recorded and leave want. A run whose
// message is there twice (a crash left a copy) has both moved, and is
// counted once.
func (m *mover) pass(ctx context.Context, q string, want map[string]journal.Run) error {
	moved := map[string]int{}
	last := ""
	// The pass itself is not cut short by ctx: a message taken is then
	// always moved, and once ctx ends the pass only declines (returning
	// what is left in order): stopping between messages.
	_, err := patterns.Replay(context.WithoutCancel(ctx), m.e.conn, q, patterns.ReplayInFlight(1),
		patterns.ReplayFilter(func(env broker.Envelope, _ []byte) bool {
			if _, ok := want[env.RunID]; !ok || ctx.Err() != nil {
				return false
			}
			if !m.pace.wait(ctx) {
				return false
			}
			moved[env.RunID]++
			last = env.RunID
			if moved[env.RunID] == 1 {
				m.mu.Lock()
				m.res.Replayed = append(m.res.Replayed, env.RunID)
				m.mu.Unlock()
				m.report()
			}
			return true
		}))
	if err != nil && last != "" {
		// One copy at a time: the one that failed was the last taken, and
		// it stays where it was.
		if moved[last]--; moved[last] == 0 {
			delete(moved, last)
			m.mu.Lock()
			m.res.Replayed = slices.DeleteFunc(m.res.Replayed, func(id string) bool { return id == last })
			m.mu.Unlock()
		}
	}
	for id := range moved {
		m.e.recordReplay(ctx, want[id], q)
		delete(want, id)
	}
	if err != nil {
		return fmt.Errorf("bulk replay from %s: %w", q, err)
	}
	return nil
}

// recordReplay records that run r's message went back from queue q.
func (e *Engine) recordReplay(ctx context.Context, r journal.Run, q string) {
	n := r.Replays + 1
	now := e.now()
	e.record(ctx, journal.Event{RunID: r.ID, Flow: r.Flow, Kind: journal.KindReplay, Step: r.Step,
		Outcome: "replayed", StartedAt: now, EndedAt: now, Queue: q, Status: journal.Running, RunStep: r.Step,
		Replays: n, Seq: journal.Seq(n, 0, 0, 0), Key: fmt.Sprintf("replay/%d", n)})
}

// pacer spaces events at most rate a second.
type pacer struct {
	every time.Duration
	next  time.Time
}

func newPacer(rate float64) *pacer {
	if rate <= 0 {
		return &pacer{}
	}
	return &pacer{every: time.Duration(float64(time.Second) / rate)}
}

// wait blocks until the next event may happen; false when ctx ended.
func (p *pacer) wait(ctx context.Context) bool {
	if p.every == 0 {
		return ctx.Err() == nil
	}
	now := time.Now()
	if p.next.After(now) {
		t := time.NewTimer(p.next.Sub(now))
		defer t.Stop()
		select {
		case <-t.C:
		case <-ctx.Done():
			return false
		}
		now = p.next
	}
	p.next = now.Add(p.every)
	return true
}

// replayBulkFrom replays each of runs from req.From (ReplayFrom), at most
// req.Rate a second, stopping between runs once ctx ends; a dry run only
// lists them.
func (e *Engine) replayBulkFrom(ctx context.Context, req BulkReplay, runs []journal.Run, res *BulkResult, mu *sync.Mutex, report func()) (BulkResult, error) {
	if req.DryRun {
		for _, r := range runs {
			res.Replayed = append(res.Replayed, r.ID)
		}
		slices.Sort(res.Replayed)
		return *res, nil
	}
	pace := newPacer(req.Rate)
	for _, r := range runs {
		if !pace.wait(ctx) {
			res.Interrupted = true
			break
		}
		_, err := e.ReplayFrom(context.WithoutCancel(ctx), r.ID, ReplayFromRequest{Step: req.From, Reason: req.Reason})
		mu.Lock()
		if err != nil {
			res.Refused = append(res.Refused, BulkRefusal{RunID: r.ID, Reason: err.Error()})
		} else {
			res.Replayed = append(res.Replayed, r.ID)
		}
		mu.Unlock()
		report()
	}
	return *res, nil
}
