package engine

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"reflect"
	"sync"
	"time"

	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/codes"

	"github.com/acemq/acemq-flow/broker"
	"github.com/acemq/acemq-flow/dsl"
	"github.com/acemq/acemq-flow/engine/journal"
	"github.com/acemq/acemq-flow/patterns"
)

// What a step handler decided about a delivery, for the settle hook that
// records it once the consumer has carried it out.
const (
	resultContinued = "continued" // the step ran and the run went on
	resultDone      = "done"      // the step ran and the route is done
	resultEnded     = "ended"     // the step ended the run (dsl.End)
	resultResent    = "resent"    // done before; its kept hop was sent again
	resultDuplicate = "duplicate" // done before and passed on; nothing to do
	resultFailed    = "failed"    // the step failed (retried or given up)
	resultBusy      = "busy"      // running elsewhere; put back
	resultCancelled = "cancelled" // cancelled while it waited; dropped
)

// stepRunner works one step's queue.
type stepRunner struct {
	e      *Engine
	f      *flow
	spec   dsl.StepSpec
	policy broker.RetryPolicy
	queue  string
	// spanName is the step's span's name, "step <flow>/<step>".
	spanName string
	// attempts hands the handler's decision to the settle hook.
	attempts sync.Map // *broker.Message -> *attempt
}

// attempt is one delivery of a step, as the handler saw it.
type attempt struct {
	route   []string
	pos     int
	replays int
	result  string
	plan    hop
	// resentTo is the step a kept hop was sent again to.
	resentTo string
	// compensation is "started" or "held" when this failure began the
	// run's compensation; holdUntil is when a held one starts.
	compensation string
	holdUntil    time.Time
	hasComp      bool
}

func newStepRunner(e *Engine, f *flow, i int) *stepRunner {
	s := f.steps[i]
	return &stepRunner{e: e, f: f, spec: s, policy: f.retry[i], queue: f.queue(s.Name), spanName: "step " + f.name + "/" + s.Name}
}

// handle is the step's broker.Handler.
func (r *stepRunner) handle(ctx context.Context, m *broker.Message) broker.Ack {
	a := &attempt{replays: replays(m.Headers), result: resultFailed}
	r.attempts.Store(m, a)
	route, pos, slip, err := position(m)
	if err != nil {
		return broker.Reject(broker.Fatal(fmt.Errorf("flow %q step %q: %w", r.f.name, r.spec.Name, err)))
	}
	a.route, a.pos = route, pos
	if route[pos] != r.spec.Name {
		return broker.Reject(broker.Fatal(fmt.Errorf("%w: flow %q step %q got a message for step %q", ErrMisrouted, r.f.name, r.spec.Name, route[pos])))
	}
	if !journal.Text(m.RunID) || m.RunID == "" {
		return broker.Reject(broker.Fatal(fmt.Errorf("flow %q step %q: the message carries no %s that is UTF-8 text", r.f.name, r.spec.Name, broker.HeaderRunID)))
	}
	var st runState
	if _, err := readJSONHeader(m.Headers, HeaderRun, &st); err != nil {
		return broker.Reject(broker.Fatal(fmt.Errorf("flow %q step %q: %w", r.f.name, r.spec.Name, err)))
	}
	a.hasComp = len(st.Compensate) > 0
	if _, held := m.Headers[HeaderDue]; held {
		cancelled, err := r.e.cancelled(ctx, m.RunID)
		if err != nil {
			return broker.Retry(err)
		}
		if cancelled {
			a.result = resultCancelled
			return broker.Accept()
		}
	}
	key := fmt.Sprintf("%s/%d/%s", m.RunID, pos, r.spec.Name)
	claim, err := r.e.store.Claim(ctx, key)
	if err != nil {
		return broker.Retry(fmt.Errorf("idempotency: claim %q: %w", key, err))
	}
	switch claim {
	case patterns.ClaimClaimed:
		return r.run(ctx, m, key, a, slip, st)
	case patterns.ClaimDuplicate:
		return r.duplicate(ctx, m, key, a)
	default:
		a.result = resultBusy
		return broker.InProgress(r.e.cfg.InProgressDelay).As(broker.OutcomeLabelInProgress)
	}
}

// run runs the step holding its key, and passes what it produced on.
func (r *stepRunner) run(ctx context.Context, m *broker.Message, key string, a *attempt, slip *patterns.RoutingSlip, st runState) broker.Ack {
	ctx, span := r.e.tracer.Start(ctx, r.spanName)
	defer span.End()
	if span.IsRecording() {
		span.SetAttributes(attribute.String("acemq.flow", r.f.name), attribute.String("acemq.step", r.spec.Name),
			attribute.String("acemq.run_id", m.RunID), attribute.Int("acemq.attempt", m.Attempt))
	}
	out, err := r.call(ctx, m)
	switch {
	case errors.Is(err, dsl.End):
		r.e.confirm(ctx, key)
		a.result = resultEnded
		return broker.Accept()
	case err != nil:
		span.RecordError(err)
		span.SetStatus(codes.Error, err.Error())
		return r.failed(ctx, m, key, a, st, err)
	}
	if end, err := ended(out); end || err != nil {
		if err != nil {
			r.e.forget(ctx, key)
			return broker.Reject(&patterns.StepError{Step: r.spec.Name, Err: broker.Fatal(err)})
		}
		r.e.confirm(ctx, key)
		a.result = resultEnded
		return broker.Accept()
	}
	if slip == nil {
		if a.plan, err = r.f.plan(a.route, a.pos, out, time.Now()); err != nil {
			// The work is done but where it goes cannot be worked out, on
			// this attempt or any other: give it up for a person to see.
			r.e.forget(ctx, key)
			return broker.Reject(&patterns.HopError{Step: r.spec.Name, To: "?", Err: broker.Fatal(err)})
		}
	} else {
		a.plan = hop{next: a.pos + 1}
	}
	if r.spec.Compensable {
		entry, err := r.f.entry(r.spec.Name, out)
		if err != nil {
			r.e.forget(ctx, key)
			return broker.Reject(&patterns.StepError{Step: r.spec.Name, Err: broker.Fatal(err)})
		}
		st.Compensate = append(st.Compensate, entry)
	}
	if a.plan.next == len(a.route) {
		r.e.confirm(ctx, key)
		a.result = resultDone
		return broker.Accept()
	}
	out2, err := r.f.hopMessage(ctx, r.e.conn, m, a.route, a.plan.next, out, st, slip)
	if err != nil {
		r.e.forget(ctx, key)
		return broker.Reject(&patterns.HopError{Step: r.spec.Name, To: a.route[a.plan.next], Err: broker.Fatal(err)})
	}
	a.result = resultContinued
	if !a.plan.due.IsZero() {
		markDue(&out2, a.plan.due)
	}
	return r.e.pass(ctx, key, r.spec.Name, kept{due: a.plan.due, out: out2})
}

// call runs the step's function on m's payload under the step's timeout.
func (r *stepRunner) call(ctx context.Context, m *broker.Message) (any, error) {
	r.e.metrics.active(ctx, r.f.name, r.spec.Name, 1)
	defer r.e.metrics.active(ctx, r.f.name, r.spec.Name, -1)
	sctx := ctx
	if r.spec.Timeout > 0 {
		var cancel context.CancelFunc
		sctx, cancel = context.WithTimeout(ctx, r.spec.Timeout)
		defer cancel()
	}
	start := time.Now()
	out, err := r.spec.Run(sctx, m.Decode)
	took := time.Since(start)
	if r.spec.Timeout > 0 && took > r.spec.Timeout && !errors.Is(err, dsl.End) {
		// The work may or may not have happened: only a retry of an
		// idempotent step can make that right, whatever the step said.
		err = fmt.Errorf("%w: ran %s of %s (it returned %v)", ErrStepTimeout, took.Round(time.Millisecond), r.spec.Timeout, err)
	}
	outcome := "completed"
	if err != nil && !errors.Is(err, dsl.End) {
		outcome = "failed"
	}
	r.e.metrics.step(ctx, r.f.name, r.spec.Name, outcome, took)
	return out, err
}

// failed lets the step's key go and decides what the failure becomes: a
// retry, or the end of the run, whose compensation starts now (or is held
// for a replay) before the consumer gives the message up.
func (r *stepRunner) failed(ctx context.Context, m *broker.Message, key string, a *attempt, st runState, err error) broker.Ack {
	r.e.forget(ctx, key)
	var fatal *broker.FatalError
	isFatal := errors.As(err, &fatal)
	serr := &patterns.StepError{Step: r.spec.Name, Err: err}
	ack := broker.Retry(serr)
	if isFatal {
		ack = broker.Reject(serr)
	}
	final := isFatal || r.policy.GiveUp(m.Attempt, m.FirstSeen, time.Now()) != ""
	if final && len(st.Compensate) > 0 {
		kind, until, cerr := r.e.startCompensation(ctx, r.f, m, st, r.spec.Name, err.Error(), r.f.hold)
		if cerr != nil {
			// Never give the run up without its compensation under way:
			// put the message back, attempt unchanged, and try again.
			r.e.log.Warn("compensation could not be started; the failed step will be tried again",
				slog.String("flow", r.f.name), slog.String("run_id", m.RunID), slog.Any("error", cerr))
			a.result = resultBusy
			return broker.InProgress(r.e.cfg.InProgressDelay)
		}
		a.compensation, a.holdUntil = kind, until
	}
	return ack
}

// duplicate answers a delivery of a step that ran before: its kept hop, if
// any, is sent again (with the message id it had), else it is accepted.
func (r *stepRunner) duplicate(ctx context.Context, m *broker.Message, key string, a *attempt) broker.Ack {
	res, ok, err := r.e.store.Result(ctx, key)
	if err != nil {
		return broker.Retry(fmt.Errorf("idempotency: result of %q: %w", key, err))
	}
	if !ok {
		a.result = resultDuplicate
		return broker.Accept().As(patterns.IdempotencyOutcomeDuplicate)
	}
	k, err := decodeKept(res)
	if err != nil {
		return broker.Reject(&patterns.HopError{Step: r.spec.Name, To: "?", Err: broker.Fatal(err)})
	}
	a.result, a.resentTo, a.plan.due = resultResent, k.out.RoutingKey, k.due
	return r.e.send(ctx, key, r.spec.Name, k)
}

// pass keeps k under key, then sends it: a redelivery after a lost confirm
// finds it kept and sends it again rather than running the step twice.
func (e *Engine) pass(ctx context.Context, key, step string, k kept) broker.Ack {
	b, err := k.encode()
	if err == nil {
		err = e.store.Complete(withoutCancel(ctx), key, b)
	}
	if err != nil {
		e.log.Warn("cannot keep a step's hop; a redelivery would run the step again",
			slog.String("key", key), slog.Any("error", err))
	}
	return e.send(ctx, key, step, k)
}

// send sends a kept hop (through the ladder when it is not yet due) and,
// once the broker confirmed it, lets the kept copy go.
func (e *Engine) send(ctx context.Context, key, step string, k kept) broker.Ack {
	var err error
	if k.due.After(time.Now()) {
		err = e.conn.Schedule(ctx, k.due, k.out)
	} else {
		err = e.conn.Send(ctx, k.out)
	}
	if err != nil {
		he := &patterns.HopError{Step: step, To: k.out.RoutingKey, Err: err}
		if broker.Refused(err) && !errors.Is(err, broker.ErrUnroutable) {
			// Refused for what it is, not for where it goes: it will be
			// refused the next time too.
			return broker.Reject(broker.Fatal(he))
		}
		return broker.Retry(he)
	}
	e.confirm(ctx, key)
	return broker.Accept()
}

func (e *Engine) confirm(ctx context.Context, key string) {
	if err := e.store.Confirm(withoutCancel(ctx), key); err != nil {
		e.log.Warn("idempotency: confirm failed; the key stays claimed until its lease ends", slog.String("key", key), slog.Any("error", err))
	}
}

func (e *Engine) forget(ctx context.Context, key string) {
	if err := e.store.Forget(withoutCancel(ctx), key); err != nil {
		e.log.Warn("idempotency: forget failed; a retry may find the step still held", slog.String("key", key), slog.Any("error", err))
	}
}

// withoutCancel keeps ctx's values but not its cancellation: a worker
// closing at its deadline must still confirm or release what it claimed.
func withoutCancel(ctx context.Context) context.Context { return context.WithoutCancel(ctx) }

// ended reports whether a step's result ends its run (patterns.End,
// returned through an any), and refuses a nil result, which would travel
// on as null: a step ends its run with dsl.End.
func ended(out any) (bool, error) {
	if out == patterns.End {
		return true, nil
	}
	if out == nil {
		return false, fmt.Errorf("%w (nil); return dsl.End to end the run", patterns.ErrNilResult)
	}
	if v := reflect.ValueOf(out); v.Kind() == reflect.Pointer && v.IsNil() {
		return false, fmt.Errorf("%w (%T); return dsl.End to end the run", patterns.ErrNilResult, out)
	}
	return false, nil
}

// entry is what a compensable step's compensation will get: its result,
// in the flow's codec.
func (f *flow) entry(step string, out any) (compEntry, error) {
	b, err := f.codec.Encode(out)
	if err != nil {
		return compEntry{}, fmt.Errorf("encode %q's result for its compensation: %w", step, err)
	}
	if f.json {
		return compEntry{Step: step, Data: json.RawMessage(b)}, nil
	}
	return compEntry{Step: step, Data64: b}, nil
}

// hopMessage is the message that carries a run from the step it is at to
// route[next]: a new message (new id, the causation and correlation
// recorded, the run id and x-acemq-first-seen carried, attempt 1), in the
// form the run travels in, with its state.
func (f *flow) hopMessage(ctx context.Context, conn *broker.Conn, m *broker.Message, route []string, next int, payload any, st runState, slip *patterns.RoutingSlip) (broker.Outgoing, error) {
	opts := []broker.PublishOption{
		broker.ToExchange(f.name), broker.To(route[next]), broker.Mandatory(),
		broker.CausedBy(m), broker.RunID(m.RunID), broker.FirstSeen(m.FirstSeen),
		broker.Headers(carried(m)), broker.WithCodec(f.codec),
	}
	if m.Type != "" {
		opts = append(opts, broker.Type(m.Type))
	}
	if slip != nil {
		header, err := json.Marshal(slip.Advance(time.Now()))
		if err != nil {
			return broker.Outgoing{}, err
		}
		opts = append(opts, broker.Header(broker.HeaderRoutingSlip, string(header)))
	} else {
		opts = append(opts, broker.Route(route, next))
	}
	if len(st.Compensate) > 0 {
		h, err := jsonHeader(st)
		if err != nil {
			return broker.Outgoing{}, err
		}
		opts = append(opts, broker.Header(HeaderRun, h))
	}
	return conn.Prepare(ctx, payload, opts...)
}
