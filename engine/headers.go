package engine

import (
	"encoding/binary"
	"encoding/json"
	"fmt"
	"math"
	"time"

	"github.com/acemq/acemq-flow/broker"
	"github.com/acemq/acemq-flow/broker/transport"
	"github.com/acemq/acemq-flow/patterns"
)

// Headers the engine writes on a run's messages, beside the contract's
// (docs/wire.md, "The engine"). They are application headers, so that an
// AceMQ service serving an External step carries them on as it carries
// any other.
const (
	// HeaderRun is the run's state that travels with it: the log of what
	// to compensate, should a later step be given up.
	HeaderRun = "acemq-flow-run"
	// HeaderCompensation is on a compensation's message: why the run is
	// being compensated and what is left to undo.
	HeaderCompensation = "acemq-flow-compensation"
	// HeaderStarted marks the first message of a run started through an
	// outbox (StartTx): its first step records the run's start, which no
	// process recorded when the transaction committed.
	HeaderStarted = "acemq-flow-started"
	// HeaderDue is on a message held back on the ladder (a delayed start, a
	// delay before a step): when it was due, in epoch ms. A step that gets
	// such a message first asks the journal whether the run was cancelled
	// while it waited.
	HeaderDue = "acemq-flow-due"
	// HeaderBranch is on the messages of a branch of a Parallel or an item
	// of a ForEach: which join the branch comes back to, which branch it
	// is, and where in the run's route the fork is. An AceMQ service that
	// serves an External step in a branch carries it on as it carries any
	// application header.
	HeaderBranch = "acemq-flow-branch"
	// HeaderParent is on the messages of a child run (dsl.Child): the
	// parent run and step it returns to, and where the message that
	// resumes the parent is kept in the parent's run data.
	HeaderParent = "acemq-flow-parent"
	// HeaderChild is on the message that resumes a parent run once its
	// child run is over: the child's run id, whether it completed, its
	// error, and which attempt of the parent's step it was.
	HeaderChild = "acemq-flow-child"
	// HeaderHold is on the timer of a branch given up in a flow with
	// HoldForReplay, sent to the fork's queue for when the hold ends: the
	// step that failed and the run's replay count then. A run replayed
	// since drops it; otherwise the branch is undone and its join fails.
	HeaderHold = "acemq-flow-hold"
	// HeaderSignal is on the message that resumes a run at its WaitFor
	// once its signal came, and on the wait's timer (timeout true): the
	// key of the wait's join, where the signal is kept.
	HeaderSignal = "acemq-flow-signal"
	// HeaderDeadline is on the timer of a run's dsl.Deadline, sent to the
	// flow's compensate-now queue for when it passes: the replay of the
	// run it is for.
	HeaderDeadline = "acemq-flow-deadline"
)

// holdRef is the acemq-flow-hold header.
type holdRef struct {
	Step    string `json:"step"`
	Replays int    `json:"replays"`
}

// parentRef is the acemq-flow-parent header.
type parentRef struct {
	Run     string `json:"run"`
	Flow    string `json:"flow"`
	Step    string `json:"step"`
	Data    string `json:"data"`
	Attempt int    `json:"attempt"`
}

// childResult is the acemq-flow-child header.
type childResult struct {
	Run       string `json:"run"`
	Completed bool   `json:"completed"`
	Error     string `json:"error,omitempty"`
	Attempt   int    `json:"attempt"`
}

// branchRef is the acemq-flow-branch header, and a compensation's state's
// mark of a chain that undoes one branch.
type branchRef struct {
	// Join is the join's key in the JoinStore, Branch the branch's index
	// (the item's, for a ForEach).
	Join   string `json:"join"`
	Branch int    `json:"branch"`
	// At is the fork's position in the run's route.
	At int `json:"at"`
}

// markDue marks out as held until due (HeaderDue).
func markDue(out *broker.Outgoing, due time.Time) {
	h := out.Message.Headers.Clone()
	if h == nil {
		h = broker.Table{}
	}
	h[HeaderDue] = broker.DueMillis(due)
	out.Message.Headers = h
}

// runState is the acemq-flow-run header.
type runState struct {
	// Compensate lists the completed steps that have a compensation, in
	// the order they completed, each with what it returned.
	Compensate []compEntry `json:"compensate,omitempty"`
}

// compEntry is one step to compensate and the payload its compensation
// gets: raw JSON when the flow's codec is JSON (readable in a management
// console), base64 otherwise, or, when it is too large to travel in a
// header, Ref: the key it is kept under in the journal (journal.DataStore).
type compEntry struct {
	Step   string          `json:"step"`
	Data   json.RawMessage `json:"data,omitempty"`
	Data64 []byte          `json:"data64,omitempty"`
	Ref    string          `json:"ref,omitempty"`
}

// inline is the payload the entry carries itself (nil for a Ref).
func (c compEntry) inline() []byte {
	if c.Data != nil {
		return c.Data
	}
	return c.Data64
}

// size is how many bytes of payload the entry carries in its header.
func (c compEntry) size() int { return len(c.Data) + len(c.Data64) }

// compState is the acemq-flow-compensation header.
type compState struct {
	// Failed is the step that was given up, Error why.
	Failed string `json:"failed_step"`
	Error  string `json:"error"`
	// Remaining is what is still to compensate after this message's step,
	// in the order the steps completed (the last is next).
	Remaining []compEntry `json:"remaining,omitempty"`
	// Unresolved lists the steps whose compensation was given up so far.
	Unresolved []string `json:"unresolved,omitempty"`
	// K counts the compensations of the run before this one.
	K int `json:"k"`
	// Replays is the run's replay count when it failed.
	Replays int `json:"replays"`
	// Held marks a compensation sent on a HoldForReplay timer: it is
	// dropped if the run was replayed (or compensated) meanwhile.
	Held bool `json:"held,omitempty"`
	// Branch marks a chain that undoes one branch of a fork (its own
	// steps): at its end the branch is settled as stopped, and the run's
	// status is left to the chain that undoes the rest.
	Branch *branchRef `json:"branch,omitempty"`
}

// at is where the compensation is in its run, for its message id and its
// key: the replay and the count, and for a chain that undoes one branch
// the join and the branch.
func (cs *compState) at() string {
	if cs.Branch != nil {
		return fmt.Sprintf("%d/%s/%d/%d", cs.Replays, cs.Branch.Join, cs.Branch.Branch, cs.K)
	}
	return fmt.Sprintf("%d/%d", cs.Replays, cs.K)
}

// givenUpWhy is why the branch a chain undoes was given up, "" when it
// was stopped by another's failure.
func (cs *compState) givenUpWhy() string {
	if cs.Error == branchStopped {
		return ""
	}
	return cs.Error
}

// readJSONHeader decodes header name of h into v; absent is no error.
func readJSONHeader(h broker.Table, name string, v any) (bool, error) {
	raw, ok := h[name]
	if !ok {
		return false, nil
	}
	var b []byte
	switch x := raw.(type) {
	case string:
		b = []byte(x)
	case []byte:
		b = x
	default:
		return true, fmt.Errorf("header %s is a %T, want a JSON string", name, raw)
	}
	if err := json.Unmarshal(b, v); err != nil {
		return true, fmt.Errorf("header %s: %w", name, err)
	}
	return true, nil
}

func jsonHeader(v any) (string, error) {
	b, err := json.Marshal(v)
	return string(b), err
}

// replays is how many times the message's run was replayed: the
// acemq-replay-count a replay stamps, which a run's hops carry on.
func replays(h broker.Table) int {
	n, _ := transport.Int(h[broker.HeaderReplayCount])
	return int(max(n, 0))
}

// hopDropped are the input's headers a hop does not carry besides the
// broker's own (broker.StripBrokerHeaders): the trace context its own
// publish writes, the stamps of a replay that describe that one copy
// (acemq-replay-count stays: it is how many times the run was replayed),
// and the headers the hop writes afresh.
var hopDropped = []string{
	"traceparent", "tracestate",
	broker.HeaderReplayedFrom, broker.HeaderReplayedAt,
	broker.HeaderRoutingSlip, HeaderRun, HeaderCompensation, HeaderStarted, HeaderDue, HeaderChild, HeaderSignal,
}

// carried is the headers of m a message that continues its run carries.
func carried(m *broker.Message) broker.Table {
	h := m.Headers.Clone()
	if h == nil {
		h = broker.Table{}
	}
	broker.StripBrokerHeaders(h)
	for _, k := range hopDropped {
		delete(h, k)
	}
	return h
}

// What a kept record says became of the run at the step.
const (
	keptHop    byte = iota // a message to send on (the next step, a compensation)
	keptDone               // the route is done: nothing to send
	keptEnded              // the step ended the run (dsl.End)
	keptReturn             // the route of a child run is done: its result goes to its parent
)

// keptVersion starts a kept record that carries the hop's plan, and
// keptSpilling one that also carries what the hop's run state keeps in the
// journal (spills). A record without either (written before there was a
// plan to keep) starts with the top byte of its due time, always 0.
const (
	keptVersion  byte = 1
	keptSpilling byte = 2
)

// kept is what the idempotency store holds for a step whose work is done:
// what became of the run (kind), the message it produced and when that
// message is due (zero: at once), so that a redelivery sends exactly it
// again, and where the run went (next position, skipped positions), so
// that it records in the journal exactly what the first delivery did.
type kept struct {
	kind    byte
	due     time.Time
	out     broker.Outgoing
	next    int
	skipped []int
	// planned is false for a record that did not carry the plan.
	planned bool
	// spills are the compensation payloads the hop's run state refers to,
	// to put in the journal before the hop is sent.
	spills []spill
}

// spill is a compensation payload kept in the journal rather than in the
// run's headers: under key, for the run the record is of.
type spill struct {
	key  string
	data []byte
}

// keptOf is what a step that produced plan (and, for a hop, out) keeps.
func keptOf(kind byte, plan hop, out broker.Outgoing) kept {
	return kept{kind: kind, due: plan.due, out: out, next: plan.next, skipped: plan.skipped, planned: true}
}

// plan is the hop the record kept.
func (k kept) plan() hop { return hop{next: k.next, skipped: k.skipped, due: k.due} }

func (k kept) encode() ([]byte, error) {
	var due int64
	if !k.due.IsZero() {
		due = k.due.UnixMilli()
	}
	version := keptVersion
	if len(k.spills) > 0 {
		version = keptSpilling
	}
	b := append(make([]byte, 0, 64), version, k.kind)
	b = binary.BigEndian.AppendUint64(b, uint64(due))
	b = binary.AppendUvarint(b, uint64(k.next))
	b = binary.AppendUvarint(b, uint64(len(k.skipped)))
	for _, p := range k.skipped {
		b = binary.AppendUvarint(b, uint64(p))
	}
	if k.kind != keptHop && k.kind != keptReturn {
		return b, nil
	}
	if version == keptSpilling {
		b = binary.AppendUvarint(b, uint64(len(k.spills)))
		for _, s := range k.spills {
			b = binary.AppendUvarint(b, uint64(len(s.key)))
			b = append(b, s.key...)
			b = binary.AppendUvarint(b, uint64(len(s.data)))
			b = append(b, s.data...)
		}
	}
	out, err := k.out.MarshalBinary()
	if err != nil {
		return nil, err
	}
	return append(b, out...), nil
}

func decodeKept(b []byte) (kept, error) {
	bad := func(what string) (kept, error) {
		return kept{}, fmt.Errorf("%w: kept record of %d bytes: %s", broker.ErrUnreadableEnvelope, len(b), what)
	}
	if len(b) > 0 && b[0] != keptVersion && b[0] != keptSpilling {
		return decodeUnplanned(b)
	}
	if len(b) < 10 {
		return bad("too short")
	}
	k := kept{kind: b[1], planned: true}
	if due := int64(binary.BigEndian.Uint64(b[2:])); due != 0 {
		k.due = time.UnixMilli(due)
	}
	rest := b[10:]
	uvarint := func() (int, bool) {
		v, n := binary.Uvarint(rest)
		if n <= 0 || v > math.MaxInt32 {
			return 0, false
		}
		rest = rest[n:]
		return int(v), true
	}
	var ok bool
	if k.next, ok = uvarint(); !ok {
		return bad("next position")
	}
	n, ok := uvarint()
	if !ok || n > len(rest) {
		return bad("skipped positions")
	}
	for range n {
		p, ok := uvarint()
		if !ok {
			return bad("skipped position")
		}
		k.skipped = append(k.skipped, p)
	}
	switch k.kind {
	case keptDone, keptEnded:
		return k, nil
	case keptHop, keptReturn:
	default:
		return bad(fmt.Sprintf("kind %d", k.kind))
	}
	if b[0] == keptSpilling {
		n, ok := uvarint()
		if !ok || n > len(rest) {
			return bad("spills")
		}
		bytesOf := func() ([]byte, bool) {
			l, ok := uvarint()
			if !ok || l > len(rest) {
				return nil, false
			}
			v := rest[:l:l]
			rest = rest[l:]
			return v, true
		}
		for range n {
			key, ok := bytesOf()
			if !ok {
				return bad("spill key")
			}
			data, ok := bytesOf()
			if !ok {
				return bad("spill data")
			}
			k.spills = append(k.spills, spill{key: string(key), data: data})
		}
	}
	if err := k.out.UnmarshalBinary(rest); err != nil {
		return kept{}, err
	}
	k.out.Mandatory = true
	return k, nil
}

// decodeUnplanned reads a record kept without its plan: the due time and
// the message.
func decodeUnplanned(b []byte) (kept, error) {
	if len(b) < 8 {
		return kept{}, fmt.Errorf("%w: kept hop of %d bytes", broker.ErrUnreadableEnvelope, len(b))
	}
	var k kept
	if due := int64(binary.BigEndian.Uint64(b)); due != 0 {
		k.due = time.UnixMilli(due)
	}
	if err := k.out.UnmarshalBinary(b[8:]); err != nil {
		return kept{}, err
	}
	k.out.Mandatory = true
	return k, nil
}

// position reads where m is in its run: the route's step names and the
// index of the step m is addressed to, and the slip when it travels as
// one.
func position(m *broker.Message) (route []string, pos int, slip *patterns.RoutingSlip, err error) {
	if m.Route != nil {
		if _, hasSlip := m.Headers[broker.HeaderRoutingSlip]; !hasSlip {
			return m.Route, m.RoutePosition, nil, nil
		}
	}
	slip, err = patterns.SlipFrom(m)
	if err != nil {
		return nil, 0, nil, err
	}
	for _, s := range slip.Done() {
		route = append(route, s.Name)
	}
	pos = len(route)
	for _, s := range slip.Itinerary() {
		route = append(route, s.Name)
	}
	return route, pos, slip, nil
}
