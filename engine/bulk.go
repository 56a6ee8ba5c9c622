package engine

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"slices"
	"strings"
	"sync"
	"time"

	"github.com/expr-lang/expr"
	"github.com/expr-lang/expr/vm"

	"github.com/acemq/acemq-flow/broker"
	"github.com/acemq/acemq-flow/engine/journal"
	"github.com/acemq/acemq-flow/patterns"
)

// BulkReplay selects failed runs to replay together.
type BulkReplay struct {
	// Flow, when set, keeps only runs of that flow.
	Flow string
	// Since keeps only runs started at or after it (zero: all).
	Since time.Time
	// Where, when set, is an expr-lang condition a run must meet: it sees
	// run (run_id, flow, step, error, attempt: of the step that failed,
	// started_at) and payload (the run's input, as JSON reads it):
	// `run.step == "ship" && payload.amount_cents > 1000`.
	Where string
	// Limit caps how many runs are replayed (0 = journal.DefaultLimit).
	Limit int
	// Rate caps replays per second (0 = as fast as the broker goes).
	Rate float64
	// DryRun selects and filters, and moves nothing.
	DryRun bool
	// Progress hears the counts after every run decided, one call at a
	// time; it must return quickly.
	Progress func(BulkResult)
}

// BulkResult says what a bulk replay did, or would do.
type BulkResult struct {
	// Selected is how many failed runs the journal gave for the query.
	Selected int `json:"selected"`
	// Replayed lists the runs whose message went back to its step (for a
	// dry run: that would).
	Replayed []string `json:"replayed"`
	// Skipped counts the runs Where declined.
	Skipped int `json:"skipped"`
	// NotFound lists runs whose message was in none of the queues it
	// could be in (or that were parked: replaying cannot help them).
	NotFound []string `json:"not_found"`
	// Interrupted says ctx ended first: what is counted was done, the
	// rest not started, nothing half-moved.
	Interrupted bool `json:"interrupted,omitempty"`
	DryRun      bool `json:"dry_run,omitempty"`
}

// ReplayBulk replays failed runs chosen by req: each run's given-up
// message goes back to its step with the acemq-replayed-* stamps, in one
// pass over each dead-letter queue involved (one message at a time, so
// that what is counted is exactly what moved), at most req.Rate a second,
// and each replay is recorded. ctx ending stops it between messages and
// the result says what was done; nothing is half-moved (a message is
// acknowledged only once its copy is confirmed). An invalid Where is an
// error before anything moves.
func (e *Engine) ReplayBulk(ctx context.Context, req BulkReplay) (BulkResult, error) {
	res := BulkResult{DryRun: req.DryRun, Replayed: []string{}, NotFound: []string{}}
	where, err := compileWhere(req.Where)
	if err != nil {
		return res, err
	}
	runs, err := e.journal.Runs(ctx, journal.Query{Flow: req.Flow, Statuses: []journal.Status{journal.Failed}, Since: req.Since, Limit: req.Limit})
	if err != nil {
		return res, fmt.Errorf("bulk replay: select runs: %w", err)
	}
	res.Selected = len(runs)
	var mu sync.Mutex
	report := func() {
		if req.Progress != nil {
			mu.Lock()
			r := res
			mu.Unlock()
			req.Progress(r)
		}
	}
	byQueue := map[string]map[string]journal.Run{}
	var order []string
	for _, r := range runs {
		ok, err := e.matches(ctx, where, r)
		if err != nil {
			return res, err
		}
		if !ok {
			res.Skipped++
			report()
			continue
		}
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
	pace := newPacer(req.Rate)
	for _, q := range order {
		want := byQueue[q]
		moved := map[string]bool{}
		last := ""
		// The pass itself is not cut short by ctx: a message taken is then
		// always moved, and once ctx ends the pass only declines (returning
		// what is left in order): stopping between messages.
		_, err := patterns.Replay(context.WithoutCancel(ctx), e.conn, q, patterns.ReplayInFlight(1),
			patterns.ReplayFilter(func(env broker.Envelope, _ []byte) bool {
				if _, ok := want[env.RunID]; !ok || ctx.Err() != nil {
					return false
				}
				if !pace.wait(ctx) {
					return false
				}
				moved[env.RunID], last = true, env.RunID
				mu.Lock()
				res.Replayed = append(res.Replayed, env.RunID)
				mu.Unlock()
				report()
				return true
			}))
		if err != nil && ctx.Err() == nil && last != "" {
			// One copy at a time: the one that failed was the last taken,
			// and it stays where it was.
			delete(moved, last)
			mu.Lock()
			res.Replayed = slices.DeleteFunc(res.Replayed, func(id string) bool { return id == last })
			mu.Unlock()
		}
		for id, r := range want {
			if moved[id] {
				e.recordReplay(ctx, r, q)
			} else if ctx.Err() == nil && err == nil {
				res.NotFound = append(res.NotFound, id)
			}
		}
		if ctx.Err() != nil {
			res.Interrupted = true
			break
		}
		if err != nil {
			return res, fmt.Errorf("bulk replay from %s: %w", q, err)
		}
	}
	slices.Sort(res.NotFound)
	return res, e.writer.Flush(context.WithoutCancel(ctx))
}

// recordReplay records that run r's message went back from queue q.
func (e *Engine) recordReplay(ctx context.Context, r journal.Run, q string) {
	n := r.Replays + 1
	now := time.Now()
	e.record(ctx, journal.Event{RunID: r.ID, Flow: r.Flow, Kind: journal.KindReplay, Step: r.Step,
		Outcome: "replayed", StartedAt: now, EndedAt: now, Queue: q, Status: journal.Running, RunStep: r.Step,
		Replays: n, Seq: journal.Seq(n, 0, 0, 0), Key: fmt.Sprintf("replay/%d", n)})
}

// compileWhere compiles a bulk replay's condition (nil for none).
func compileWhere(where string) (*vm.Program, error) {
	if strings.TrimSpace(where) == "" {
		return nil, nil
	}
	p, err := expr.Compile(where, expr.AsBool(), expr.AllowUndefinedVariables())
	if err != nil {
		return nil, fmt.Errorf("%w: --where %q: %v", ErrInvalidConfig, where, err)
	}
	return p, nil
}

// matches evaluates where on r: its fields, the attempt of its last step
// attempt, and its input.
func (e *Engine) matches(ctx context.Context, where *vm.Program, r journal.Run) (bool, error) {
	if where == nil {
		return true, nil
	}
	attempt := 0
	if tl, err := e.journal.Timeline(ctx, r.ID); err == nil {
		for _, ev := range tl {
			if ev.Kind == journal.KindStep && ev.Step == r.Step {
				attempt = ev.Attempt
			}
		}
	}
	var payload any
	if len(r.Input) > 0 {
		_ = json.Unmarshal(r.Input, &payload)
	}
	env := map[string]any{
		"run": map[string]any{"run_id": r.ID, "flow": r.Flow, "step": r.Step, "error": r.Error,
			"attempt": attempt, "started_at": r.StartedAt},
		"payload": payload,
	}
	out, err := expr.Run(where, env)
	if err != nil {
		// A condition that cannot be worked out for one run (a field its
		// payload lacks) declines it rather than stopping the others.
		return false, nil
	}
	ok, isBool := out.(bool)
	if !isBool {
		return false, errors.New("--where gave no bool")
	}
	return ok, nil
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
