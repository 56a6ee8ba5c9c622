package engine

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"reflect"
	"time"

	"github.com/acemq/acemq-flow/broker"
	"github.com/acemq/acemq-flow/engine/journal"
	"github.com/acemq/acemq-flow/patterns"
)

// StartOption is a knob of Start.
type StartOption func(*startConfig) error

type startConfig struct {
	runID string
	// at is when the run starts (At); in, when it is not zero, how long
	// after the start on the connection's clock (In).
	at      time.Time
	in      time.Duration
	outcome string
	again   bool
	// by is who asked for the start, and why (StartedBy).
	by Action
	// headers go on the run's first message beside the engine's own (a
	// child run's acemq-flow-parent).
	headers broker.Table
}

// startOutcome says how the run's start reads in its timeline.
func startOutcome(s string) StartOption {
	return func(c *startConfig) error { c.outcome = s; return nil }
}

// StartedBy records who started the run and why (act) in the outcome of
// its start event ("started by ada: reason"); the zero Action changes
// nothing.
func StartedBy(act Action) StartOption {
	return func(c *startConfig) error { c.by = act; return nil }
}

// RunID starts the run under id instead of a new one. Starting is
// idempotent on the run id: a start of a run the journal knows returns that
// run (Started.Existing, with its status) and publishes nothing, unless
// StartAgain says otherwise; two starts racing before either is journalled
// are still one run (its first step runs once). An empty id, or one that
// is not UTF-8 text without NUL bytes, is refused.
func RunID(id string) StartOption {
	return func(c *startConfig) error {
		if id == "" || !journal.Text(id) {
			return fmt.Errorf("%w: run id %q: want non-empty UTF-8 text", ErrInvalidConfig, id)
		}
		c.runID = id
		return nil
	}
}

// StartAgain lets a start under RunID of a run that has finished
// (completed, ended, failed, compensated, unresolved or cancelled) start it
// again: as replay n+1 of the run, every step anew, on the payload given,
// which the journal then shows as the run's input; its timeline keeps what
// came before. A failed run's given-up message is taken out of its
// dead-letter queue first. A run still in flight is refused
// (ErrRunInFlight); a run id the journal does not know starts as usual.
func StartAgain() StartOption {
	return func(c *startConfig) error { c.again = true; return nil }
}

// At holds the run on the scheduler ladder until t: it shows as waiting,
// and its first step runs at t (never early; the ladder's accuracy is a
// second). A time already past starts it at once.
func At(t time.Time) StartOption {
	return func(c *startConfig) error { c.at, c.in = t, 0; return nil }
}

// In is At(now + d), now on the connection's clock. d must not be
// negative.
func In(d time.Duration) StartOption {
	return func(c *startConfig) error {
		if d < 0 {
			return fmt.Errorf("%w: start in %s, want 0 or more", ErrInvalidConfig, d)
		}
		c.at, c.in = time.Time{}, d
		return nil
	}
}

// Started is what Start did: the run's id and, for a run held until later,
// when it is due.
type Started struct {
	RunID string    `json:"run_id"`
	Flow  string    `json:"flow"`
	DueAt time.Time `json:"due_at,omitzero"`
	// Existing says the run id was a run already: nothing was published,
	// and Status is where that run stands.
	Existing bool           `json:"existing,omitempty"`
	Status   journal.Status `json:"status,omitempty"`
	// Replays is the run's replay count when it was started again
	// (StartAgain): how many times it had been replayed or started before.
	Replays int `json:"replays,omitempty"`
}

// Start starts a run of the flow called flowName with payload: a value of
// the flow's input type, or its JSON (json.RawMessage or []byte), which
// must decode into that type with no unknown fields. A payload that does
// not fit (JSON null, or one the type's own Validate method refuses) is
// refused with ErrInvalidPayload before anything is published.
// It returns once the broker confirmed the run's first message (held on
// the ladder if the run waits first), and records the run in the journal.
func (e *Engine) Start(ctx context.Context, flowName string, payload any, opts ...StartOption) (Started, error) {
	p, err := e.prepareStart(ctx, flowName, payload, opts, false)
	if err != nil || p.done {
		return p.res, err
	}
	// The deadline's timer goes before the run's first message: a start
	// that then fails leaves a timer that finds the run not started, never
	// a run without its deadline.
	if err := e.scheduleDeadline(ctx, flowName, p); err != nil {
		return p.res, fmt.Errorf("start %q: %w", flowName, err)
	}
	// Recorded before it is sent, so that in this process the start is
	// written before anything its first step records.
	e.record(ctx, p.events...)
	if p.res.DueAt.IsZero() {
		err = e.conn.Send(ctx, p.out)
	} else {
		err = e.conn.Schedule(ctx, p.res.DueAt, p.out)
	}
	if err != nil {
		// If the message did get through after all, its first step's
		// events come later in the run and take it on. Written before
		// Start returns, so that a caller retrying under the run id finds
		// the run not started, and starts it.
		now := e.now()
		n := p.res.Replays
		rctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), patterns.DefaultStoreTimeout)
		defer cancel()
		if rerr := e.writer.RecordSync(rctx, journal.Event{RunID: p.res.RunID, Flow: flowName, Kind: journal.KindStart, Outcome: "not started",
			StartedAt: now, EndedAt: now, Error: err.Error(), Status: journal.Failed, RunStep: p.events[0].RunStep,
			Replays: n, Seq: notStartedSeq(n), Key: fmt.Sprintf("start-failed/%d", n)}); rerr != nil {
			err = errors.Join(err, fmt.Errorf("record that it did not start: %w", rerr))
		}
		return p.res, fmt.Errorf("start %q: %w", flowName, err)
	}
	return p.res, nil
}

// TxOutbox is an outbox that adds a record inside the caller's own
// transaction: persistence.SQLOutboxStore is one, with Tx its DB.
type TxOutbox[Tx any] interface {
	Add(ctx context.Context, tx Tx, rec patterns.OutboxRecord) (string, error)
}

// StartTx starts a run inside the caller's transaction: the run's first
// message is written to outbox in tx, so the run exists if and only if tx
// commits, and the outbox's relay (patterns.OutboxRelay on the same store)
// publishes it once it has. The run enters the journal when its first step
// takes it. Payload and options are Start's; the payload is refused
// before anything is written. A run held until later (At, In, or a delay
// before its first step) waits on the ladder from when the relay sends it,
// never less. StartTx does not look RunID up in the journal (that would
// take a connection beside the caller's transaction): a run id already
// started sends its first message again, which its first step finds done;
// StartAgain is refused (ErrInvalidConfig). A flow's Deadline (or
// DeadlineAt) is written to outbox with the run: its timer commits with
// it and counts from now.
func StartTx[Tx any](ctx context.Context, e *Engine, outbox TxOutbox[Tx], tx Tx, flowName string, payload any, opts ...StartOption) (Started, error) {
	if outbox == nil {
		return Started{}, fmt.Errorf("%w: nil outbox", ErrInvalidConfig)
	}
	p, err := e.prepareStart(ctx, flowName, payload, opts, true)
	if err != nil || p.done {
		return p.res, err
	}
	out := p.out
	if out.Message.Headers == nil {
		out.Message.Headers = broker.Table{}
	}
	out.Message.Headers[HeaderStarted] = "outbox"
	if !p.res.DueAt.IsZero() {
		if err := e.conn.DeclareLadder(ctx); err != nil {
			return p.res, fmt.Errorf("start %q: %w", flowName, err)
		}
		out = e.conn.Scheduled(p.res.DueAt, out)
	}
	out.Mandatory = true
	records := []patterns.OutboxRecord{{Outgoing: out}}
	timer, ok, err := e.deadlineTimer(ctx, flowName, p)
	if err != nil {
		return p.res, fmt.Errorf("start %q: %w", flowName, err)
	}
	if ok {
		// The deadline's timer commits with the run, and runs from its
		// start (now), however late the relay sends it.
		if err := e.conn.DeclareLadder(ctx); err != nil {
			return p.res, fmt.Errorf("start %q: %w", flowName, err)
		}
		records = append(records, patterns.OutboxRecord{Outgoing: e.conn.Scheduled(p.deadline, timer)})
	}
	for _, r := range records {
		if _, err := outbox.Add(ctx, tx, r); err != nil {
			return p.res, fmt.Errorf("start %q in a transaction: %w", flowName, err)
		}
	}
	return p.res, nil
}

// started is what a start prepared: its result, its first message, the
// journal events it records once sent, and whether the run was already
// done (every step skipped: nothing to send).
type started struct {
	res    Started
	out    broker.Outgoing
	events []journal.Event
	done   bool
	// deadline is when the run is stopped if it has not ended (zero: the
	// flow has no deadline).
	deadline time.Time
}

// prepareStart works out a start. inTx is a start inside the caller's
// transaction (StartTx): it never looks the run id up in the journal,
// which would take a second connection from a pool the caller may hold
// every connection of (starters in transactions then wait on each other
// for ever); a run id already started only sends its first message again,
// which its first step finds done.
func (e *Engine) prepareStart(ctx context.Context, flowName string, payload any, opts []StartOption, inTx bool) (started, error) {
	var cfg startConfig
	for _, o := range opts {
		if err := o(&cfg); err != nil {
			return started{}, err
		}
	}
	f, err := e.flow(flowName)
	if err != nil {
		return started{}, err
	}
	input, raw, err := f.input(payload)
	if err != nil {
		return started{}, err
	}
	n, retried := 0, false
	switch {
	case cfg.again && inTx:
		return started{}, fmt.Errorf("%w: StartAgain in a transaction: a run is started again outside one (Start)", ErrInvalidConfig)
	case cfg.runID == "":
		cfg.runID = broker.NewID()
	case !inTx:
		run, again, err := e.existing(ctx, f, cfg)
		switch {
		case err != nil:
			return started{res: Started{RunID: cfg.runID, Flow: f.name}}, err
		case run != nil && !again:
			return started{res: Started{RunID: run.ID, Flow: run.Flow, Existing: true, Status: run.Status}, done: true}, nil
		case run != nil:
			n = run.Replays + 1
			retried = run.Status == journal.Failed && run.Seq == notStartedSeq(n)
		}
	}
	p := started{res: Started{RunID: cfg.runID, Flow: f.name, Replays: n}}
	route, err := f.def.Route(ctx, func(v any) error { return json.Unmarshal(raw, v) })
	if err != nil {
		return p, fmt.Errorf("start %q: %w", f.name, err)
	}
	now := e.now()
	h, err := f.plan(route, -1, input, now)
	if err != nil {
		return p, fmt.Errorf("start %q: %w", f.name, err)
	}
	if cfg.in > 0 {
		cfg.at = now.Add(cfg.in)
	}
	if cfg.at.After(now) && cfg.at.After(h.due) {
		h.due = cfg.at
	}
	start := journal.Event{RunID: p.res.RunID, Flow: f.name, Kind: journal.KindStart, Outcome: "started",
		StartedAt: now, EndedAt: now, Input: raw, Version: f.version, Status: journal.Running, Replays: n, Seq: journal.Seq(n, 0, 1, 0), Key: "start",
		BusinessKey: e.businessKey(f, p.res.RunID, input)}
	if n > 0 {
		start.Outcome, start.Key = fmt.Sprintf("started again (replay %d)", n), fmt.Sprintf("start/%d", n)
	}
	if retried {
		// After the failed start's event, which it takes back.
		start.Outcome, start.Seq, start.Key = "started (retried)", notStartedSeq(n)+1, fmt.Sprintf("start-retried/%d", n)
	}
	if cfg.outcome != "" {
		start.Outcome = cfg.outcome
	}
	if !cfg.by.IsZero() {
		start.Outcome = cfg.by.outcome(start.Outcome)
	}
	if h.next == len(route) {
		// Every step skipped: the run is done as it starts.
		start.Status, start.RunStep = journal.Completed, route[len(route)-1]
		e.record(ctx, append([]journal.Event{start}, f.startSkips(p.res.RunID, n, route, h, now)...)...)
		p.done = true
		return p, nil
	}
	start.RunStep = route[h.next]
	// A run started before any worker ran waits in its queue for one.
	if err := e.declare(ctx, f); err != nil {
		return p, fmt.Errorf("start %q: %w", f.name, err)
	}
	if p.out, err = f.startMessage(ctx, e.conn, p.res.RunID, n, route, h.next, input, cfg.headers); err != nil {
		return p, fmt.Errorf("start %q: %w", f.name, err)
	}
	startAt := now
	if h.due.After(now) {
		startAt = h.due
	}
	if p.deadline, err = f.deadline(input, startAt); err != nil {
		return p, fmt.Errorf("start %q: %w: its deadline: %w", f.name, ErrInvalidPayload, err)
	}
	p.events = append([]journal.Event{start}, f.startSkips(p.res.RunID, n, route, h, now)...)
	if h.due.After(now) {
		p.res.DueAt = h.due
		markDue(&p.out, h.due)
		due := h.due
		p.events = append(p.events, journal.Event{RunID: p.res.RunID, Flow: f.name, Kind: journal.KindDelay, Step: route[h.next],
			Outcome: "waiting", StartedAt: now, EndedAt: now, DueAt: &due, Status: journal.Waiting, RunStep: route[h.next],
			Replays: n, Seq: journal.Seq(n, h.next+1, 0, 0), Key: fmt.Sprintf("delay/%d/%d", n, h.next)})
	}
	return p, nil
}

// notStartedSeq is the Seq of the event that says a run (replay n) was not
// started: its first message may not have got through, so a start under
// its id (a caller retrying) starts it, rather than returning it as it is.
func notStartedSeq(n int) int64 { return journal.Seq(n, 0, 1, 1) }

// existing looks up the run cfg names: nil when the journal does not know
// it, or knows only that it was not started (a retry of that start is that
// start); again says it is to be started again (StartAgain), rather than
// returned as it is.
func (e *Engine) existing(ctx context.Context, f *flow, cfg startConfig) (run *journal.Run, again bool, err error) {
	r, err := e.journal.Run(ctx, cfg.runID)
	switch {
	case errors.Is(err, journal.ErrRunNotFound):
		return nil, false, nil
	case err != nil:
		return nil, false, fmt.Errorf("start %q: look up run %s: %w", f.name, cfg.runID, err)
	case r.Status == journal.Failed && r.Seq == notStartedSeq(r.Replays) && r.Flow == f.name:
		// This is a retry of that start (again, when it was a start again).
		r.Replays--
		return &r, true, nil
	case !cfg.again:
		return &r, false, nil
	case r.Flow != f.name:
		return nil, false, fmt.Errorf("%w: run %s is a run of flow %q, not %q", ErrInvalidConfig, cfg.runID, r.Flow, f.name)
	case !r.Status.Stopped():
		return nil, false, fmt.Errorf("%w: run %s of %s is %s: only a run that has finished can be started again", ErrRunInFlight, cfg.runID, r.Flow, r.Status)
	}
	if r.Status == journal.Failed && r.DeadLetter != "" {
		// Its given-up message belongs to the run that is over.
		if _, err := patterns.Replay(ctx, e.conn, r.DeadLetter, patterns.ReplayDiscard(),
			patterns.ReplayFilter(func(env broker.Envelope, _ []byte) bool { return env.RunID == cfg.runID })); err != nil && !notFound(err) {
			return nil, false, fmt.Errorf("start run %s again: take its failed message out of %s: %w", cfg.runID, r.DeadLetter, err)
		}
	}
	return &r, true, nil
}

func (f *flow) startSkips(runID string, replays int, route []string, h hop, now time.Time) []journal.Event {
	var out []journal.Event
	for _, p := range h.skipped {
		out = append(out, journal.Event{RunID: runID, Flow: f.name, Kind: journal.KindSkip, Step: route[p], Outcome: "skipped",
			StartedAt: now, EndedAt: now, Queue: f.queue(route[p]), Replays: replays, Seq: journal.Seq(replays, p+1, 0, 1),
			Key: fmt.Sprintf("skip/%d/%d", replays, p)})
	}
	return out
}

// validator is a payload type that can say whether a value is valid.
type validator interface{ Validate() error }

// input reads payload as the flow's input: the value itself, or JSON that
// decodes into it, and gives the value and its JSON. JSON null is refused
// (it would decode into a zero value nobody sent), and so is a value whose
// type has a Validate method that refuses it.
func (f *flow) input(payload any) (any, json.RawMessage, error) {
	in := f.def.Input()
	var raw []byte
	switch p := payload.(type) {
	case json.RawMessage:
		raw = p
	case []byte:
		raw = p
	default:
		if payload == nil || !reflect.TypeOf(payload).AssignableTo(in) {
			return nil, nil, fmt.Errorf("%w: flow %q takes %s, not %T", ErrInvalidPayload, f.name, in, payload)
		}
		if err := f.validate(payload); err != nil {
			return nil, nil, err
		}
		b, err := json.Marshal(payload)
		if err != nil {
			return nil, nil, fmt.Errorf("%w: flow %q: %w", ErrInvalidPayload, f.name, err)
		}
		return payload, b, nil
	}
	if bytes.Equal(bytes.TrimSpace(raw), []byte("null")) {
		return nil, nil, fmt.Errorf("%w: flow %q takes %s, not null", ErrInvalidPayload, f.name, in)
	}
	v := reflect.New(in)
	dec := json.NewDecoder(bytes.NewReader(raw))
	dec.DisallowUnknownFields()
	if err := dec.Decode(v.Interface()); err != nil {
		return nil, nil, fmt.Errorf("%w: flow %q takes %s: %w", ErrInvalidPayload, f.name, in, err)
	}
	if dec.More() {
		return nil, nil, fmt.Errorf("%w: flow %q: more than one JSON value", ErrInvalidPayload, f.name)
	}
	if err := f.validate(v.Interface()); err != nil {
		return nil, nil, err
	}
	b, err := json.Marshal(v.Elem().Interface())
	if err != nil {
		return nil, nil, fmt.Errorf("%w: flow %q: %w", ErrInvalidPayload, f.name, err)
	}
	return v.Elem().Interface(), b, nil
}

// validate asks a payload (a value, or a pointer to one) whose type has a
// Validate method whether it is valid.
func (f *flow) validate(payload any) error {
	v, ok := payload.(validator)
	if !ok {
		// A Validate with a pointer receiver, on a value.
		p := reflect.New(reflect.TypeOf(payload))
		p.Elem().Set(reflect.ValueOf(payload))
		if v, ok = p.Interface().(validator); !ok {
			return nil
		}
	}
	if rv := reflect.ValueOf(v); rv.Kind() == reflect.Pointer && rv.IsNil() {
		return nil
	}
	if err := v.Validate(); err != nil {
		return fmt.Errorf("%w: flow %q: %w", ErrInvalidPayload, f.name, err)
	}
	return nil
}

// startMessage is a run's first message, addressed to route[pos]; a run
// started again carries its replay count, as its hops do.
func (f *flow) startMessage(ctx context.Context, conn *broker.Conn, runID string, replays int, route []string, pos int, input any, headers broker.Table) (broker.Outgoing, error) {
	opts := []broker.PublishOption{
		broker.ToExchange(f.name), broker.To(route[pos]), broker.Mandatory(), broker.RunID(runID),
		broker.WithCodec(f.codec),
	}
	if len(headers) > 0 {
		opts = append(opts, broker.Headers(headers))
	}
	if replays > 0 {
		opts = append(opts, broker.Header(broker.HeaderReplayCount, int64(replays)))
	}
	if f.def.HasItinerary() {
		slip := patterns.NewRoutingSlip()
		for _, s := range route {
			slip.Step(s, f.name, s)
		}
		header, err := json.Marshal(slip)
		if err != nil {
			return broker.Outgoing{}, err
		}
		opts = append(opts, broker.Header(broker.HeaderRoutingSlip, string(header)))
	} else {
		opts = append(opts, broker.Route(route, pos))
	}
	out, err := conn.Prepare(ctx, input, opts...)
	if err != nil {
		if errors.Is(err, broker.ErrInvalidOption) {
			return out, err
		}
		return out, fmt.Errorf("%w: %w", ErrInvalidPayload, err)
	}
	return out, nil
}

// businessKey is the run's business key (dsl.Key) of its input: "" when
// the flow names none, or when its key does not evaluate or gives what no
// journal keeps (not text, over journal.MaxBusinessKey bytes), which is
// logged: the run starts all the same, it is only not found by its key.
func (e *Engine) businessKey(f *flow, runID string, input any) string {
	k := f.def.BusinessKey()
	if k == nil {
		return ""
	}
	s, err := k.Key(input)
	switch {
	case err != nil:
	case !journal.Text(s):
		err = errors.New("it is not text")
	case len(s) > journal.MaxBusinessKey:
		err = fmt.Errorf("it is %d bytes, over %d", len(s), journal.MaxBusinessKey)
	default:
		return s
	}
	e.log.Warn("the run's business key (dsl.Key) is not recorded; the run is not found by it",
		slog.String("flow", f.name), slog.String("run_id", runID), slog.Any("error", err))
	return ""
}
