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
	"github.com/acemq/acemq-flow/broker/transport"
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
	recording
	route   []string
	pos     int
	replays int
	result  string
	plan    hop
	// resentTo is the step a kept hop was sent again to, when the kept
	// record did not say where the run went (see kept.planned).
	resentTo string
	// compensation is "started" or "held" when this failure began the
	// run's compensation; holdUntil is when a held one starts.
	compensation string
	holdUntil    time.Time
	hasComp      bool
}

// recording is what a step's or a compensation's handler leaves for
// Engine.written, which records the delivery's events before the consumer
// settles it.
type recording struct {
	// start is when the handler took the delivery.
	start time.Time
	// expect is the consumer's outcome (a broker.OutcomeLabel) the events
	// are recorded for before the delivery is settled, with the error,
	// reason and retry delay they say; the settle hook records again only
	// when the consumer did something else. Empty when nothing is to be
	// recorded first.
	expect string
	err    error
	reason string
	delay  time.Duration
	// confirm is the key to confirm once the events are recorded.
	confirm string
}

// settlement is the settlement the handler expects the consumer of queue
// to carry out for m.
func (p *recording) settlement(queue string, m *broker.Message) broker.Settlement {
	return broker.Settlement{Queue: queue, Message: m, Started: p.start, Outcome: p.expect, Err: p.err, Reason: p.reason, Delay: p.delay}
}

func newStepRunner(e *Engine, f *flow, i int) *stepRunner {
	s := f.steps[i]
	return &stepRunner{e: e, f: f, spec: s, policy: f.retry[i], queue: f.queue(s.Name), spanName: "step " + f.name + "/" + s.Name}
}

// handle is the step's broker.Handler: it works out what becomes of the
// delivery (running the step unless it ran before) and leaves recording
// it to written, which the consumer calls before it settles the delivery.
func (r *stepRunner) handle(ctx context.Context, m *broker.Message) broker.Ack {
	a := &attempt{replays: replays(m.Headers), result: resultFailed, recording: recording{start: time.Now()}}
	r.attempts.Store(m, a)
	ack := r.decide(ctx, m, a)
	switch a.result {
	case resultContinued, resultDone, resultEnded, resultResent, resultCancelled:
		a.expect = broker.OutcomeLabelAccepted
	}
	return ack
}

// written is the step consumer's broker.BeforeSettle (Engine.written).
func (r *stepRunner) written(ctx context.Context, m *broker.Message, ack broker.Ack) broker.Ack {
	v, ok := r.attempts.Load(m)
	if !ok {
		return ack
	}
	a := v.(*attempt)
	return r.e.written(ctx, m, &a.recording, r.f.name, r.spec.Name, ack, func() []journal.Event {
		return r.events(ctx, m, a, a.settlement(r.queue, m))
	})
}

// written records what a delivery came to (events, built when the
// recording expects an outcome) before the broker hears of it, so that a
// worker killed, or a connection lost, between the two leaves a
// redelivery and a complete journal, never a run whose step is done and
// unrecorded. Only then is the key confirmed, so that a
// redelivery of a step whose events were not yet written writes them. It
// runs as the consumers' broker.BeforeSettle, off the handler's slot: the
// handlers go on with the next deliveries while the journal commits.
func (e *Engine) written(ctx context.Context, m *broker.Message, p *recording, flow, step string, ack broker.Ack, events func() []journal.Event) broker.Ack {
	if p.expect != "" {
		if events := events(); len(events) > 0 {
			if err := e.writer.RecordSync(ctx, events...); err != nil {
				e.log.Warn("journal events not written before their delivery's settlement; they are still queued",
					slog.String("flow", flow), slog.String("run_id", m.RunID), slog.String("step", step), slog.Any("error", err))
				if p.confirm != "" {
					// The outcome is kept under its key: put the message back,
					// and its redelivery records the events (again).
					p.expect = ""
					return broker.InProgress(e.cfg.InProgressDelay)
				}
			}
		}
	}
	if p.confirm != "" {
		e.confirm(ctx, p.confirm)
	}
	return ack
}

// decide works out what becomes of a delivery: it runs the step unless it
// ran before, and passes what it produced on.
func (r *stepRunner) decide(ctx context.Context, m *broker.Message, a *attempt) broker.Ack {
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
		r.e.metrics.reached(ctx, r.f.name, m, pos, a.replays)
		return r.run(ctx, m, key, a, slip, st)
	case patterns.ClaimDuplicate:
		return r.duplicate(ctx, m, key, a)
	default:
		a.result = resultBusy
		return broker.InProgress(r.e.cfg.InProgressDelay).As(broker.OutcomeLabelInProgress)
	}
}

// errRollBack rolls a transactional step's transaction back: the step
// failed, or what it produced cannot go on.
var errRollBack = errors.New("step failed: roll back")

// run runs the step holding its key, keeps what it produced under the key
// (in the step's own transaction when it is Transactional) and carries it
// out.
func (r *stepRunner) run(ctx context.Context, m *broker.Message, key string, a *attempt, slip *patterns.RoutingSlip, st runState) broker.Ack {
	ctx, span := r.e.tracer.Start(ctx, r.spanName)
	defer span.End()
	if span.IsRecording() {
		span.SetAttributes(attribute.String("acemq.flow", r.f.name), attribute.String("acemq.step", r.spec.Name),
			attribute.String("acemq.run_id", m.RunID), attribute.Int("acemq.attempt", m.Attempt))
	}
	var (
		k                 kept
		stepErr, giveUpEr error
	)
	if r.spec.Transactional {
		err := r.e.store.(patterns.TxStore).CompleteInTx(ctx, key, func(ctx context.Context) ([]byte, error) {
			if k, stepErr, giveUpEr = r.work(ctx, m, a, slip, st); stepErr != nil || giveUpEr != nil {
				return nil, errRollBack
			}
			return k.encode()
		})
		switch {
		case stepErr != nil || giveUpEr != nil:
		case errors.Is(err, patterns.ErrClaimLost):
			// Another delivery holds the step now; its outcome counts.
			a.result = resultBusy
			return broker.InProgress(r.e.cfg.InProgressDelay).As(broker.OutcomeLabelInProgress)
		case err != nil:
			// Committed or not, the key is either done (a redelivery
			// passes on what was kept) or still ours to let go.
			r.e.forget(ctx, key)
			return broker.Retry(&patterns.StepError{Step: r.spec.Name, Err: fmt.Errorf("transaction: %w", err)})
		}
	} else {
		k, stepErr, giveUpEr = r.work(ctx, m, a, slip, st)
		if stepErr == nil && giveUpEr == nil {
			r.e.keep(ctx, key, k)
		}
	}
	switch {
	case stepErr != nil:
		span.RecordError(stepErr)
		span.SetStatus(codes.Error, stepErr.Error())
		return r.failed(ctx, m, key, a, st, stepErr)
	case giveUpEr != nil:
		r.e.forget(ctx, key)
		return broker.Reject(giveUpEr)
	}
	return r.carryOut(ctx, key, a, k)
}

// work runs the step's function and works out what follows: k is what the
// run came to at this step. stepErr is the step's own failure (retried or
// given up by its policy); giveUp is a result that cannot go on, on this
// attempt or any other.
func (r *stepRunner) work(ctx context.Context, m *broker.Message, a *attempt, slip *patterns.RoutingSlip, st runState) (k kept, stepErr, giveUp error) {
	out, err := r.call(ctx, m)
	switch {
	case errors.Is(err, dsl.End):
		return keptOf(keptEnded, hop{}, broker.Outgoing{}), nil, nil
	case err != nil:
		return kept{}, err, nil
	}
	if end, err := ended(out); end || err != nil {
		if err != nil {
			return kept{}, nil, &patterns.StepError{Step: r.spec.Name, Err: broker.Fatal(err)}
		}
		return keptOf(keptEnded, hop{}, broker.Outgoing{}), nil, nil
	}
	plan := hop{next: a.pos + 1}
	if slip == nil {
		if plan, err = r.f.plan(a.route, a.pos, out, time.Now()); err != nil {
			// The work is done but where it goes cannot be worked out, on
			// this attempt or any other: give it up for a person to see.
			return kept{}, nil, &patterns.HopError{Step: r.spec.Name, To: "?", Err: broker.Fatal(err)}
		}
	}
	if r.spec.Compensable {
		entry, err := r.f.entry(r.spec.Name, out)
		if err != nil {
			return kept{}, nil, &patterns.StepError{Step: r.spec.Name, Err: broker.Fatal(err)}
		}
		st.Compensate = append(st.Compensate, entry)
	}
	if plan.next == len(a.route) {
		return keptOf(keptDone, plan, broker.Outgoing{}), nil, nil
	}
	next, err := r.f.hopMessage(ctx, r.e.conn, m, a.route, plan.next, out, st, slip)
	if err != nil {
		return kept{}, nil, &patterns.HopError{Step: r.spec.Name, To: a.route[plan.next], Err: broker.Fatal(err)}
	}
	if !plan.due.IsZero() {
		markDue(&next, plan.due)
	}
	return keptOf(keptHop, plan, next), nil, nil
}

// carryOut carries out what the run came to at the step, k: it sends the
// hop on (again, for a redelivery), and says what to record and confirm.
func (r *stepRunner) carryOut(ctx context.Context, key string, a *attempt, k kept) broker.Ack {
	switch {
	case k.kind == keptEnded:
		a.result = resultEnded
	case k.kind == keptDone:
		a.result, a.plan = resultDone, k.plan()
	default:
		if ack, ok := r.e.send(ctx, r.spec.Name, k); !ok {
			return ack
		}
		a.result, a.plan = resultContinued, k.plan()
		if !k.planned {
			a.result, a.resentTo, a.plan.due = resultResent, k.out.RoutingKey, k.due
		}
	}
	a.confirm = key
	return broker.Accept()
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
// for a replay) before the consumer gives the message up. It says what the
// consumer will do (attempt.expect), for the journal.
func (r *stepRunner) failed(ctx context.Context, m *broker.Message, key string, a *attempt, st runState, err error) broker.Ack {
	r.e.forget(ctx, key)
	var fatal *broker.FatalError
	isFatal := errors.As(err, &fatal)
	serr := &patterns.StepError{Step: r.spec.Name, Err: err}
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
	a.err = serr
	a.expect, a.reason, a.delay = expected(serr, isFatal, r.policy, m)
	if isFatal {
		return broker.Reject(serr)
	}
	return broker.Retry(serr)
}

// expected is what a consumer with policy p does with the handler's
// broker.Retry(err) (broker.Reject(err) when reject) for m, as
// broker.Consumer decides it: the outcome it will report, with its reason
// or retry delay, so that the handler can record it first.
func expected(err error, reject bool, p broker.RetryPolicy, m *broker.Message) (outcome, reason string, delay time.Duration) {
	var decodeErr *broker.DecodeError
	switch {
	case errors.As(err, &decodeErr):
		return broker.OutcomeLabelParked, err.Error(), 0
	case reject:
		return broker.OutcomeLabelDeadLettered, err.Error(), 0
	}
	if why := p.GiveUp(m.Attempt, m.FirstSeen, time.Now()); why != "" {
		return broker.OutcomeLabelDeadLettered, fmt.Sprintf("%v (%s)", err, why), 0
	}
	return broker.OutcomeLabelRetried, "", p.Delay(m.Attempt)
}

// duplicate answers a delivery of a step that ran before: what it kept,
// if anything, is carried out again (its hop sent with the message id it
// had, its events recorded), else it is accepted.
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
	return r.carryOut(ctx, key, a, k)
}

// keep keeps k under key before it is carried out: a redelivery after a
// lost confirm, or before the run's events were written, finds it kept and
// carries it out again rather than running the step twice.
func (e *Engine) keep(ctx context.Context, key string, k kept) {
	b, err := k.encode()
	if err == nil {
		err = e.store.Complete(withoutCancel(ctx), key, b)
	}
	if err != nil {
		e.log.Warn("cannot keep a step's hop; a redelivery would run the step again",
			slog.String("key", key), slog.Any("error", err))
	}
}

// send sends a kept hop (through the ladder when it is not yet due). ok
// is false when the broker did not take it; ack then says what becomes of
// the delivery. The caller confirms the key once the run's events are
// recorded: until then a redelivery sends the kept hop again.
func (e *Engine) send(ctx context.Context, step string, k kept) (ack broker.Ack, ok bool) {
	var err error
	if k.due.After(time.Now()) {
		err = e.conn.Schedule(ctx, k.due, k.out)
	} else {
		err = e.conn.Send(ctx, k.out)
	}
	if err != nil {
		he := &patterns.HopError{Step: step, To: k.out.RoutingKey, Err: err}
		if unsendable(err) {
			// Refused for what it is: it will be refused the next time too.
			return broker.Reject(broker.Fatal(he)), false
		}
		// Unroutable, nacked (a quorum queue between leaders nacks for a
		// while after losing a node) or lost with the connection: the same
		// message may well go next time.
		return broker.Retry(he), false
	}
	return broker.Accept(), true
}

// unsendable reports whether the broker refused a message for what it is
// (its headers, its expiration, its size), which no retry changes.
func unsendable(err error) bool {
	return errors.Is(err, transport.ErrInvalidHeader) || errors.Is(err, transport.ErrInvalidExpiration) ||
		errors.Is(err, transport.ErrTooLarge)
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
