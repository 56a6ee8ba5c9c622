package engine

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"reflect"
	"time"

	"github.com/acemq/acemq-flow/broker"
	"github.com/acemq/acemq-flow/engine/journal"
	"github.com/acemq/acemq-flow/patterns"
)

// StartOption is a knob of Start.
type StartOption func(*startConfig) error

type startConfig struct {
	runID   string
	at      time.Time
	outcome string
}

// startOutcome says how the run's start reads in its timeline.
func startOutcome(s string) StartOption {
	return func(c *startConfig) error { c.outcome = s; return nil }
}

// RunID starts the run under id instead of a new one: starting twice with
// the same id is one run (its first step runs once). An empty id, or one
// that is not UTF-8 text without NUL bytes, is refused.
func RunID(id string) StartOption {
	return func(c *startConfig) error {
		if id == "" || !journal.Text(id) {
			return fmt.Errorf("%w: run id %q: want non-empty UTF-8 text", ErrInvalidConfig, id)
		}
		c.runID = id
		return nil
	}
}

// At holds the run on the scheduler ladder until t: it shows as waiting,
// and its first step runs at t (never early; the ladder's accuracy is a
// second). A time already past starts it at once.
func At(t time.Time) StartOption {
	return func(c *startConfig) error { c.at = t; return nil }
}

// In is At(now + d). d must not be negative.
func In(d time.Duration) StartOption {
	return func(c *startConfig) error {
		if d < 0 {
			return fmt.Errorf("%w: start in %s, want 0 or more", ErrInvalidConfig, d)
		}
		c.at = time.Now().Add(d)
		return nil
	}
}

// Started is what Start did: the run's id and, for a run held until later,
// when it is due.
type Started struct {
	RunID string    `json:"run_id"`
	Flow  string    `json:"flow"`
	DueAt time.Time `json:"due_at,omitzero"`
}

// Start starts a run of the flow called flowName with payload: a value of
// the flow's input type, or its JSON (json.RawMessage or []byte), which
// must decode into that type with no unknown fields. A payload that does
// not fit is refused with ErrInvalidPayload before anything is published.
// It returns once the broker confirmed the run's first message (held on
// the ladder if the run waits first), and records the run in the journal.
func (e *Engine) Start(ctx context.Context, flowName string, payload any, opts ...StartOption) (Started, error) {
	p, err := e.prepareStart(ctx, flowName, payload, opts)
	if err != nil || p.done {
		return p.res, err
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
		// events come later in the run and take it on.
		now := time.Now()
		e.record(ctx, journal.Event{RunID: p.res.RunID, Flow: flowName, Kind: journal.KindStart, Outcome: "not started",
			StartedAt: now, EndedAt: now, Error: err.Error(), Status: journal.Failed, RunStep: p.events[0].RunStep,
			Seq: journal.Seq(0, 0, 1, 1), Key: "start-failed"})
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
// never less.
func StartTx[Tx any](ctx context.Context, e *Engine, outbox TxOutbox[Tx], tx Tx, flowName string, payload any, opts ...StartOption) (Started, error) {
	if outbox == nil {
		return Started{}, fmt.Errorf("%w: nil outbox", ErrInvalidConfig)
	}
	p, err := e.prepareStart(ctx, flowName, payload, opts)
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
	if _, err := outbox.Add(ctx, tx, patterns.OutboxRecord{Outgoing: out}); err != nil {
		return p.res, fmt.Errorf("start %q in a transaction: %w", flowName, err)
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
}

func (e *Engine) prepareStart(ctx context.Context, flowName string, payload any, opts []StartOption) (started, error) {
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
	if cfg.runID == "" {
		cfg.runID = broker.NewID()
	}
	p := started{res: Started{RunID: cfg.runID, Flow: f.name}}
	route, err := f.def.Route(ctx, func(v any) error { return json.Unmarshal(raw, v) })
	if err != nil {
		return p, fmt.Errorf("start %q: %w", f.name, err)
	}
	now := time.Now()
	h, err := f.plan(route, -1, input, now)
	if err != nil {
		return p, fmt.Errorf("start %q: %w", f.name, err)
	}
	if cfg.at.After(now) && cfg.at.After(h.due) {
		h.due = cfg.at
	}
	start := journal.Event{RunID: p.res.RunID, Flow: f.name, Kind: journal.KindStart, Outcome: "started",
		StartedAt: now, EndedAt: now, Input: raw, Status: journal.Running, Seq: journal.Seq(0, 0, 1, 0), Key: "start"}
	if cfg.outcome != "" {
		start.Outcome = cfg.outcome
	}
	if h.next == len(route) {
		// Every step skipped: the run is done as it starts.
		start.Status, start.RunStep = journal.Completed, route[len(route)-1]
		e.record(ctx, append([]journal.Event{start}, f.startSkips(p.res.RunID, route, h, now)...)...)
		p.done = true
		return p, nil
	}
	start.RunStep = route[h.next]
	// A run started before any worker ran waits in its queue for one.
	if err := e.declare(ctx, f); err != nil {
		return p, fmt.Errorf("start %q: %w", f.name, err)
	}
	if p.out, err = f.startMessage(ctx, e.conn, p.res.RunID, route, h.next, input); err != nil {
		return p, fmt.Errorf("start %q: %w", f.name, err)
	}
	p.events = append([]journal.Event{start}, f.startSkips(p.res.RunID, route, h, now)...)
	if h.due.After(now) {
		p.res.DueAt = h.due
		markDue(&p.out, h.due)
		due := h.due
		p.events = append(p.events, journal.Event{RunID: p.res.RunID, Flow: f.name, Kind: journal.KindDelay, Step: route[h.next],
			Outcome: "waiting", StartedAt: now, EndedAt: now, DueAt: &due, Status: journal.Waiting, RunStep: route[h.next],
			Seq: journal.Seq(0, h.next+1, 0, 0), Key: fmt.Sprintf("delay/0/%d", h.next)})
	}
	return p, nil
}

func (f *flow) startSkips(runID string, route []string, h hop, now time.Time) []journal.Event {
	var out []journal.Event
	for _, p := range h.skipped {
		out = append(out, journal.Event{RunID: runID, Flow: f.name, Kind: journal.KindSkip, Step: route[p], Outcome: "skipped",
			StartedAt: now, EndedAt: now, Queue: f.queue(route[p]), Seq: journal.Seq(0, p+1, 0, 1), Key: fmt.Sprintf("skip/0/%d", p)})
	}
	return out
}

// input reads payload as the flow's input: the value itself, or JSON that
// decodes into it, and gives the value and its JSON.
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
		b, err := json.Marshal(payload)
		if err != nil {
			return nil, nil, fmt.Errorf("%w: flow %q: %w", ErrInvalidPayload, f.name, err)
		}
		return payload, b, nil
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
	b, err := json.Marshal(v.Elem().Interface())
	if err != nil {
		return nil, nil, fmt.Errorf("%w: flow %q: %w", ErrInvalidPayload, f.name, err)
	}
	return v.Elem().Interface(), b, nil
}

// startMessage is a run's first message, addressed to route[pos].
func (f *flow) startMessage(ctx context.Context, conn *broker.Conn, runID string, route []string, pos int, input any) (broker.Outgoing, error) {
	opts := []broker.PublishOption{
		broker.ToExchange(f.name), broker.To(route[pos]), broker.Mandatory(), broker.RunID(runID),
		broker.WithCodec(f.codec),
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
