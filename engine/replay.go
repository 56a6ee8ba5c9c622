package engine

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strings"
	"time"

	"github.com/acemq/acemq-flow/broker"
	"github.com/acemq/acemq-flow/broker/transport"
	"github.com/acemq/acemq-flow/engine/journal"
	"github.com/acemq/acemq-flow/patterns"
)

// Moved is what Replay or Compensate did with a run's given-up message.
type Moved struct {
	RunID string `json:"run_id"`
	Flow  string `json:"flow"`
	// From is the queue the message was taken from; To where it went.
	From string `json:"from"`
	To   string `json:"to"`
	// Messages is how many copies of the run's message were moved (more
	// than one only when a crash left a duplicate in the dead-letter
	// queue; the step's idempotency runs it once).
	Messages int `json:"messages"`
	// Searched lists the queues looked through when the journal did not
	// know the run (no shared database): every dead-letter queue of the
	// registered flows.
	Searched []string `json:"searched,omitempty"`
}

// Replay sends a failed run's given-up message back to the step that gave
// it up, with the acemq-replayed-* stamps and a fresh retry budget, and
// records the replay: the run goes back to running and continues from
// that step. The journal says which dead-letter queue holds the message;
// a run it does not know is looked for in every dead-letter queue of the
// registered flows (Moved.Searched says which). The journal records a
// failure before the message's move to the dead-letter queue is
// confirmed: a run that failed moments ago is waited for (settleWindow).
//
// It refuses, with errors naming the run: a run that is not failed
// (ErrNotReplayable: a compensated run cannot be replayed, a running one
// needs no replay; a stopped one can be re-run from a step: ReplayFrom), a run given up because its message could not be read
// (parked: replaying cannot help), and a message that is nowhere to be
// found (ErrMessageNotFound).
func (e *Engine) Replay(ctx context.Context, runID string) (Moved, error) {
	return e.ReplayWith(ctx, runID, Action{})
}

// ReplayWith is Replay, recording who asked and why (act) in the outcome
// of the replay's event ("replayed by ada: the card was fixed"). It
// refuses what Replay refuses.
func (e *Engine) ReplayWith(ctx context.Context, runID string, act Action) (Moved, error) {
	run, known, queues, err := e.findFailed(ctx, runID, ErrNotReplayable)
	if err != nil {
		return Moved{RunID: runID}, err
	}
	if known && strings.HasSuffix(run.DeadLetter, broker.ParkedSuffix) {
		return Moved{RunID: runID, Flow: run.Flow}, fmt.Errorf("%w: run %s was parked in %s: its message could not be read, and replaying it cannot help",
			ErrNotReplayable, runID, run.DeadLetter)
	}
	var siblings []string
	if known {
		if f, ferr := e.flow(run.Flow); ferr == nil {
			if fork, ok := f.forkOf(run.Step); ok {
				if f.hold <= 0 {
					return Moved{RunID: runID, Flow: run.Flow}, fmt.Errorf("%w: run %s failed at step %q, on a branch of %q, whose join has failed (flow %q has no HoldForReplay); compensate the run instead",
						ErrNotReplayable, runID, run.Step, fork, f.name)
				}
				siblings = f.branchDeadLetters(fork, run.Step)
			}
		}
	}
	moved, err := e.moveFailed(ctx, run, known, runID, queues, nil)
	if !known {
		moved.Searched = queues
	}
	if err != nil {
		return moved, err
	}
	for _, q := range siblings {
		// Every branch held with it is replayed with it: their timers
		// are dropped once the run's replay count has gone up.
		n, err := patterns.Replay(ctx, e.conn, q, patterns.ReplayFilter(func(env broker.Envelope, _ []byte) bool { return env.RunID == runID }))
		if err != nil && !notFound(err) {
			return moved, fmt.Errorf("replay run %s's other held branches from %s: %w", runID, q, err)
		}
		moved.Messages += n.Moved
	}
	moved.To = strings.TrimSuffix(moved.From, broker.DeadLetterSuffix)
	n := run.Replays + 1
	now := e.now()
	e.record(ctx, journal.Event{RunID: runID, Flow: moved.Flow, Kind: journal.KindReplay, Step: run.Step,
		Outcome: act.outcome("replayed"), StartedAt: now, EndedAt: now, Queue: moved.From, Status: journal.Running, RunStep: run.Step,
		Replays: n, Seq: journal.Seq(n, 0, 0, 0), Key: fmt.Sprintf("replay/%d", n)})
	return moved, e.writer.Flush(ctx)
}

// Compensate compensates a failed run now, instead of replaying it: its
// given-up message is taken from the dead-letter queue to the flow's
// compensate queue, where a worker starts the compensations of the steps
// it had completed. A run held for replay is compensated now rather than
// when its hold ends. It refuses a run that is not failed
// (ErrNotCompensable) and a message that is nowhere to be found
// (ErrMessageNotFound).
func (e *Engine) Compensate(ctx context.Context, runID string) (Moved, error) {
	return e.CompensateWith(ctx, runID, Action{})
}

// CompensateWith is Compensate, recording who asked and why (act) in the
// run's timeline: an event whose outcome is "compensation asked by ada:
// reason", which leaves the run's status to the compensations. The zero
// Action records nothing more than Compensate does. It refuses what
// Compensate refuses.
func (e *Engine) CompensateWith(ctx context.Context, runID string, act Action) (Moved, error) {
	run, known, queues, err := e.findFailed(ctx, runID, ErrNotCompensable)
	if err != nil {
		return Moved{RunID: runID}, err
	}
	moved, err := e.moveFailed(ctx, run, known, runID, queues, func(f *flow) (string, string) { return f.name, compensateKey })
	if !known {
		moved.Searched = queues
	}
	if err != nil {
		return moved, err
	}
	f, _ := e.flow(moved.Flow)
	moved.To = f.compensateNowQueue()
	if act.IsZero() {
		return moved, nil
	}
	now := e.now()
	e.record(ctx, journal.Event{RunID: runID, Flow: moved.Flow, Kind: journal.KindCompensation, Outcome: act.outcome("compensation asked"),
		StartedAt: now, EndedAt: now, Queue: moved.From, Replays: run.Replays,
		Seq: journal.Seq(run.Replays, journal.CompensationStage-2, 0, 0), Key: fmt.Sprintf("compensate-asked/%d", run.Replays)})
	return moved, e.writer.Flush(ctx)
}

// findFailed looks the run up: it must be failed; its dead-letter queue is
// where to look. A run the journal does not know may be in any
// dead-letter queue of the registered flows.
func (e *Engine) findFailed(ctx context.Context, runID string, refuse error) (journal.Run, bool, []string, error) {
	run, err := e.journal.Run(ctx, runID)
	switch {
	case errors.Is(err, journal.ErrRunNotFound):
		var queues []string
		for _, f := range e.registered() {
			queues = append(queues, f.deadLetterQueues()...)
		}
		return run, false, queues, nil
	case err != nil:
		return run, false, nil, fmt.Errorf("look up run %s: %w", runID, err)
	}
	if _, err := e.flow(run.Flow); err != nil {
		return run, true, nil, fmt.Errorf("run %s: %w", runID, err)
	}
	if run.Status != journal.Failed {
		why := "not failed"
		switch run.Status {
		case journal.Compensated, journal.Compensating, journal.Unresolved:
			why = "already compensated (a compensated run cannot be replayed)"
			if run.Status != journal.Compensated {
				why = "being compensated or unresolved (a compensated run cannot be replayed)"
			}
		}
		if refuse == ErrNotReplayable && ReplayableFrom(run.Status) {
			why += "; re-run it from one of its steps with ReplayFrom (acemq-flow replay --from)"
		}
		return run, true, nil, fmt.Errorf("%w: run %s of %s is %s: %s", refuse, runID, run.Flow, run.Status, why)
	}
	if run.DeadLetter != "" {
		return run, true, []string{run.DeadLetter}, nil
	}
	f, _ := e.flow(run.Flow)
	return run, true, f.deadLetterQueues(), nil
}

// settleWindow is how long after a run was recorded failed its message
// may still be on its way to the dead-letter queue: a step's events are
// committed before its delivery is settled, and so before the move to the
// dead-letter queue is confirmed (both come before the ack). A few
// seconds more absorb the clocks of the worker and of the replaying
// process disagreeing.
const settleWindow = 10 * time.Second

// moveFailed is move for a failed run: when the journal knows the run and
// recorded its failure less than settleWindow ago, a message not found
// yet is looked for again, every 100 ms, until it arrives, the window
// passes or ctx ends.
func (e *Engine) moveFailed(ctx context.Context, run journal.Run, known bool, runID string, queues []string, to func(*flow) (string, string)) (Moved, error) {
	for {
		moved, err := e.move(ctx, runID, queues, to)
		if !known || !errors.Is(err, ErrMessageNotFound) || e.now().Sub(run.UpdatedAt) > settleWindow {
			return moved, err
		}
		select {
		case <-ctx.Done():
			return moved, err
		case <-time.After(100 * time.Millisecond):
		}
	}
}

// move takes the run's messages out of the first of queues that holds
// them: back where they came from, or to the destination to gives.
func (e *Engine) move(ctx context.Context, runID string, queues []string, to func(*flow) (string, string)) (Moved, error) {
	res := Moved{RunID: runID}
	for _, q := range queues {
		f := e.flowOfQueue(q)
		if f == nil {
			continue
		}
		opts := []patterns.ReplayOption{patterns.ReplayFilter(func(env broker.Envelope, _ []byte) bool { return env.RunID == runID })}
		if to != nil {
			opts = append(opts, patterns.ReplayTo(to(f)))
		}
		r, err := patterns.Replay(ctx, e.conn, q, opts...)
		if notFound(err) {
			continue
		}
		if err != nil {
			return res, fmt.Errorf("run %s: take its message from %s: %w", runID, q, err)
		}
		if r.Moved > 0 {
			res.Flow, res.From, res.Messages = f.name, q, r.Moved
			return res, nil
		}
	}
	return res, fmt.Errorf("%w: run %s is in none of %s", ErrMessageNotFound, runID, strings.Join(queues, ", "))
}

// flowOfQueue is the registered flow a step queue its workers consume (or
// its dead-letter queue) belongs to: a step's, or a step's old name's.
func (e *Engine) flowOfQueue(q string) *flow {
	q = strings.TrimSuffix(q, broker.DeadLetterSuffix)
	for _, f := range e.registered() {
		if slices.Contains(f.workedQueues(), q) {
			return f
		}
	}
	return nil
}

// notFound reports whether err is the broker saying a queue does not exist.
func notFound(err error) bool {
	var ae *transport.AMQPError
	return errors.As(err, &ae) && ae.Code == transport.NotFound
}
