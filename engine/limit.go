package engine

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"reflect"
	"time"

	"github.com/acemq/acemq-flow/broker"
	"github.com/acemq/acemq-flow/dsl"
	"github.com/acemq/acemq-flow/engine/journal"
	"github.com/acemq/acemq-flow/patterns"
)

// grantAge is how long a waiter handed a place may take to come back
// before its message is sent again (the worker that handed it out may have
// died before it sent it); limitSweep is how often a worker looks.
const (
	grantAge   = 30 * time.Second
	limitSweep = 5 * time.Second
)

// limited reports whether the flow has a step with a ConcurrencyKey or a
// RateLimit: it then needs a journal that keeps limits.
func (f *flow) limited() bool {
	for _, s := range f.steps {
		if s.Limit != nil || s.Rate != nil {
			return true
		}
	}
	return false
}

// keyOf works a limit's (or an ordering's) key out of the payload of m,
// which step s takes: nil expr is the empty key, one for every run.
func (f *flow) keyOf(s dsl.StepSpec, expr *dsl.Expr, m *broker.Message) (string, error) {
	if expr == nil {
		return "", nil
	}
	var payload any = json.RawMessage(m.Body)
	if !f.json {
		v := reflect.New(s.In)
		if err := m.Decode(v.Interface()); err != nil {
			return "", err
		}
		payload = v.Elem().Interface()
	}
	k, err := expr.Key(payload)
	if err != nil {
		return "", err
	}
	if !journal.Text(k) {
		return "", fmt.Errorf("key %q: not text a journal can keep", k)
	}
	return k, nil
}

// slot is the place a delivery of a limited step takes (or waits for).
func (r *stepRunner) slot(d *delivery, key string) journal.Slot {
	return journal.Slot{Flow: r.f.name, Step: r.spec.Name, Key: key, Holder: d.stepKey(r.spec.Name), RunID: d.m.RunID, Limit: r.spec.Limit.N}
}

// limitedUnit runs the step's work once its rate limit and its
// concurrency limit let it: a run over the rate waits on the ladder for
// the turn reserved for it; a run of a key whose places are all taken is
// parked in the journal, its message accepted, until a run of its key
// leaves the step and hands it the place (release).
func (r *stepRunner) limitedUnit(ctx context.Context, a *stepAttempt) broker.Ack {
	d := &a.d
	if rate := r.spec.Rate; rate != nil {
		key, err := r.f.keyOf(r.spec, rate.Key, d.m)
		if err != nil {
			return r.giveUp(ctx, a, d.state, nil, broker.Fatal(fmt.Errorf("flow %q step %q: the rate limit's key: %w", r.f.name, r.spec.Name, err)))
		}
		now := r.e.now()
		at, err := r.e.limits.Reserve(ctx, journal.Rate{Flow: r.f.name, Step: r.spec.Name, Key: key, Holder: d.stepKey(r.spec.Name), Interval: rate.Interval()}, now)
		if err != nil {
			return broker.Retry(fmt.Errorf("flow %q step %q: its rate limit: %w", r.f.name, r.spec.Name, err))
		}
		if wait := at.Sub(now); wait > broker.ShortestRung {
			// The ladder brings it back up to a rung late: a rung early,
			// and it waits the rest here, so that starts keep their
			// spacing rather than come a rung's worth at once.
			a.result, a.waitUntil, a.limitKey = resultRateLimited, at, key
			a.expect = broker.OutcomeLabelInProgress
			return broker.InProgress(wait - broker.ShortestRung).As(broker.OutcomeLabelInProgress)
		} else if wait > 0 {
			ev := r.rateEvent(d, key, at, now)
			if d.branch != nil {
				inBranch(&ev, d.branch, d.pos)
			}
			r.e.record(ctx, ev)
			t := time.NewTimer(wait)
			select {
			case <-ctx.Done():
				t.Stop()
				return broker.InProgress(wait).As(broker.OutcomeLabelInProgress)
			case <-t.C:
			}
			a.start = r.e.now()
		}
	}
	if lim := r.spec.Limit; lim != nil {
		key, err := r.f.keyOf(r.spec, lim.Key, d.m)
		if err != nil {
			return r.giveUp(ctx, a, d.state, nil, broker.Fatal(fmt.Errorf("flow %q step %q: the concurrency key: %w", r.f.name, r.spec.Name, err)))
		}
		again, ok := d.m.Again()
		if !ok {
			return broker.Reject(broker.Fatal(fmt.Errorf("flow %q step %q: a message not from a broker cannot wait for a place", r.f.name, r.spec.Name)))
		}
		parked, err := again.MarshalBinary()
		if err != nil {
			return r.giveUp(ctx, a, d.state, nil, broker.Fatal(fmt.Errorf("flow %q step %q: keep the waiting message: %w", r.f.name, r.spec.Name, err)))
		}
		a.limitKey, a.asked = key, true
		granted, err := r.acquire(ctx, a, r.slot(d, key), parked)
		if err != nil {
			return broker.Retry(fmt.Errorf("flow %q step %q: its concurrency limit: %w", r.f.name, r.spec.Name, err))
		}
		if !granted {
			a.result = resultLimited
			return broker.Accept()
		}
	}
	return r.runUnit(ctx, a, d.stepKey(r.spec.Name))
}

// placeClaimer is an idempotency store that takes a limited step's place
// and claims the step's work in one round trip, and confirms the work
// giving the place back in another (persistence.SQLIdempotencyStore, over
// a journal on its database).
type placeClaimer interface {
	ClaimsPlaces(journal.LimitStore) bool
	ClaimPlace(ctx context.Context, limits journal.LimitStore, s journal.Slot, parked []byte, key string) (bool, patterns.Claim, error)
	ConfirmReleasing(ctx context.Context, key string, limits journal.LimitStore, s journal.Slot) ([][]byte, error)
}

// acquire takes s's place for a, or parks it with parked: with the claim
// of the step's work when the store takes both at once (a.claimed), which
// saves the claim its own round trip and commit.
func (r *stepRunner) acquire(ctx context.Context, a *stepAttempt, s journal.Slot, parked []byte) (bool, error) {
	if r.e.places == nil {
		return r.e.limits.Acquire(ctx, s, parked)
	}
	// As the unit's own claim would be: not cut short by the worker
	// stopping, which could leave a claim made that nobody knows of for
	// a lease. The holder is the step's key, which the unit claims.
	cctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), patterns.DefaultStoreTimeout)
	defer cancel()
	granted, c, err := r.e.places.ClaimPlace(cctx, r.e.limits, s, parked, s.Holder)
	if err != nil && granted {
		// The place is taken; the claim is the step's unit's to make.
		return true, nil
	}
	a.claimed = c
	return granted, err
}

// releasing is the BeforeSettle function next of a limited step's
// consumer with the delivery's place given back: by next's confirm of the
// step's key, in its statement, when the store can (placeClaimer);
// otherwise apart (release), while next records the delivery. Either way
// off the handler's slot, which goes on with the next delivery, and before
// the broker hears of the delivery, so that a worker killed between the
// two leaves a redelivery that gives the place back. A place that cannot
// be given back puts the message back instead, whose redelivery (the step
// done, its hop sent again) gives it back.
func (r *stepRunner) releasing(next func(context.Context, *broker.Message, broker.Ack) broker.Ack) func(context.Context, *broker.Message, broker.Ack) broker.Ack {
	if r.spec.Limit == nil {
		return next
	}
	return func(ctx context.Context, m *broker.Message, ack broker.Ack) broker.Ack {
		a, ok := ack.Note().(*stepAttempt)
		if !ok {
			return next(ctx, m, ack)
		}
		s, held := r.held(a)
		if !held {
			return next(ctx, m, ack)
		}
		if r.e.places != nil && a.confirm == s.Holder {
			// The confirm gives it back, in its own statement.
			a.release, a.released = &s, errNotReleased
			out := next(ctx, m, ack)
			if a.released != nil {
				return r.notReleased(m, a, a.released)
			}
			return out
		}
		released := make(chan error, 1)
		go func() { released <- r.release(ctx, s) }()
		out := next(ctx, m, ack)
		if err := <-released; err != nil {
			return r.notReleased(m, a, err)
		}
		return out
	}
}

// errNotReleased is what a place the confirm was to give back comes to
// when the delivery's events could not be recorded first.
var errNotReleased = errors.New("the delivery's events were not recorded")

// notReleased puts back the message m of a delivery a whose place was not
// given back (err says why): its redelivery gives it back.
func (r *stepRunner) notReleased(m *broker.Message, a *stepAttempt, err error) broker.Ack {
	r.e.log.Warn("a limited step's place not given back; its message is put back, and its redelivery gives it back",
		slog.String("flow", r.f.name), slog.String("step", r.spec.Name), slog.String("run_id", m.RunID), slog.Any("error", err))
	return broker.InProgress(r.e.cfg.InProgressDelay).With(a)
}

// confirmReleasing confirms key and gives back s's place in one statement
// (placeClaimer), then sends the waiters let in; when the statement
// fails, neither happened, and the error says why.
func (e *Engine) confirmReleasing(ctx context.Context, key string, s journal.Slot) error {
	sctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), patterns.DefaultStoreTimeout)
	defer cancel()
	send, err := e.places.ConfirmReleasing(sctx, key, e.limits, s)
	if err != nil {
		return err
	}
	e.sendParked(ctx, send)
	return nil
}

// held is the place a delivery of a limited step may hold, once it is
// done with it: the one it took, or one it was handed while it waited (a
// run found cancelled, a message given up before it ran); none when the
// step has no ConcurrencyKey, or the delivery waits for a place, or the
// step runs elsewhere.
func (r *stepRunner) held(a *stepAttempt) (journal.Slot, bool) {
	if r.spec.Limit == nil || a.d.err != nil || a.d.m.RunID == "" {
		return journal.Slot{}, false
	}
	switch a.result {
	case resultLimited, resultBusy, resultRateLimited:
		return journal.Slot{}, false
	}
	key := a.limitKey
	if !a.asked {
		// It did not ask: its place is under the key its payload gives
		// (none, when the payload gives none).
		k, err := r.f.keyOf(r.spec, r.spec.Limit.Key, a.d.m)
		if err != nil {
			return journal.Slot{}, false
		}
		key = k
	}
	return r.slot(&a.d, key), true
}

// release gives back the place s, if its holder has it, and sends the
// messages of the waiters it lets in. The worker's sweep hands out places
// a release freed but did not hand out.
func (r *stepRunner) release(ctx context.Context, s journal.Slot) error {
	send, err := r.e.limits.Release(context.WithoutCancel(ctx), s)
	if err != nil {
		return err
	}
	r.e.sendParked(ctx, send)
	return nil
}

// sendParked sends the parked messages a limit store handed out (sendOne);
// one still not sent is handed out again by a worker's sweep (Granted).
func (e *Engine) sendParked(ctx context.Context, send [][]byte) {
	for _, b := range send {
		if err := e.sendOne(ctx, b); err != nil {
			e.log.Warn("a waiter's message not sent; a worker's sweep sends it again", slog.Any("error", err))
		}
	}
}

// sendOne sends a parked message, tried again a few times over some
// seconds (a connection the broker closed comes back meanwhile) unless
// ctx ends.
func (e *Engine) sendOne(ctx context.Context, b []byte) error {
	var out broker.Outgoing
	if err := out.UnmarshalBinary(b); err != nil {
		return fmt.Errorf("a parked message cannot be read: %w", err)
	}
	sendCtx := context.WithoutCancel(ctx)
	var err error
	for _, wait := range parkedResends {
		if err = e.conn.Send(sendCtx, out); err == nil {
			return nil
		}
		select {
		case <-ctx.Done():
			return fmt.Errorf("send %s to %s: %w", out.Message.MessageID, out.RoutingKey, err)
		case <-time.After(wait):
		}
	}
	return fmt.Errorf("send %s to %s: %w", out.Message.MessageID, out.RoutingKey, err)
}

// parkedResends are the pauses after each failed send of a parked
// message: about 5 s in all, a reconnection's time, before the sweep's 30.
var parkedResends = []time.Duration{100 * time.Millisecond, 400 * time.Millisecond, time.Second, 3 * time.Second, 0}

// unpark sends a cancelled run's messages waiting for a place back to
// their steps, which find the run cancelled and stop it there; one that
// cannot be sent stays parked (and the error says so).
func (e *Engine) unpark(ctx context.Context, runID string) error {
	if e.limits == nil {
		return nil
	}
	if err := e.limits.Unpark(ctx, runID, func(b []byte) error { return e.sendOne(ctx, b) }); err != nil {
		return fmt.Errorf("take it out of the queues of limited steps: %w", err)
	}
	return nil
}

// sweepLimits sends again, every limitSweep until ctx ends, the messages
// of waiters handed a place that did not come, and hands out places a
// release freed but did not hand out.
func (w *Worker) sweepLimits(ctx context.Context) {
	every(ctx, limitSweep, func() {
		send, err := w.e.limits.Granted(ctx, grantAge)
		if err != nil && ctx.Err() == nil {
			w.e.log.Warn("limited steps' waiters not swept", slog.Any("error", err))
		}
		w.e.sendParked(ctx, send)
	})
}

// rateEvent is the timeline's entry for a delivery of a rate-limited
// step d that waits, at now, for its turn at: placed before the step's
// own entry of the attempt (on a branch, inBranch places it there).
func (r *stepRunner) rateEvent(d *delivery, key string, at, now time.Time) journal.Event {
	m := d.m
	return journal.Event{RunID: m.RunID, Flow: r.f.name, Kind: journal.KindStep, Step: r.spec.Name, Attempt: m.Attempt,
		Outcome: rateOutcome(r.spec.Rate, key, at), StartedAt: now, EndedAt: now, DueAt: &at, Queue: r.queue,
		Replays: d.replays, RunStep: r.spec.Name, Status: journal.Waiting,
		Seq: journal.Seq(d.replays, d.pos+1, m.Attempt, 1), Key: fmt.Sprintf("rate/%d/%d/%d", d.replays, d.pos, m.Attempt)}
}

// limitOutcome is what a run waiting for a place of key says.
func limitOutcome(n int, key string) string {
	return fmt.Sprintf("waiting for a place: at most %d at once with key %q", n, key)
}

// rateOutcome is what a run waiting for its turn under rate says.
func rateOutcome(rate *dsl.RateSpec, key string, at time.Time) string {
	of := ""
	if rate.Key != nil {
		of = fmt.Sprintf(" with key %q", key)
	}
	return fmt.Sprintf("rate limited: at most %d per %s%s; starts at %s", rate.N, rate.Per, of, at.UTC().Format("15:04:05.000"))
}
