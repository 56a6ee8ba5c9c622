// Package journal is the run journal's interface and its in-memory form:
// every run of a flow (its status, where it is, its input and last error)
// and its timeline (every step attempt, skip, delay, compensation and
// replay). The engine writes it through a [Writer], off the hot path in
// batches; package persistence implements it on PostgreSQL. One
// conformance suite (journaltest) runs against every implementation.
//
// # How events become a run
//
// A run is not written directly: the engine records [Event]s and each
// implementation applies them by the same rules, so that they give the
// same runs whatever order the batches of several workers arrive in.
//
//   - An event is one entry of its run's timeline, identified by its Key:
//     recording the same key again (a step redelivered after a crash)
//     replaces the entry rather than adding one.
//   - An event with a Status changes the run only if its Seq is not below
//     the Seq the run already shows: a late batch never takes a run back.
//     [Seq] orders a run's events: by replay, then by where in the run,
//     then by attempt.
//   - The first event of a run creates it; a start event sets its input.
//     Of several, the input is that of the latest replay (a run started
//     again), and of those the first recorded.
package journal

import (
	"cmp"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"slices"
	"strings"
	"time"
	"unicode/utf8"
)

// ErrRunNotFound: the journal has no run with that id.
var ErrRunNotFound = errors.New("run not found")

// ErrInvalidEvent: an event no journal can keep (see Event.Validate). A
// journal refuses a batch holding one; the Writer sets such events aside
// (logged) and writes the rest, so one bad event never stalls the journal.
var ErrInvalidEvent = errors.New("invalid journal event")

// Status is where a run stands.
type Status string

// The statuses of a run.
const (
	// Running: a step is about to run, running, or being retried.
	Running Status = "running"
	// Waiting: held on the scheduler ladder until its DueAt (a delayed
	// start or a delay before a step).
	Waiting Status = "waiting"
	// Completed: its last step completed.
	Completed Status = "completed"
	// Ended: a step ended it early on purpose (dsl.End).
	Ended Status = "ended"
	// Failed: a step was given up; its message is in DeadLetter, to be
	// replayed. A run held for replay shows its hold's end in DueAt.
	Failed Status = "failed"
	// Compensating: the completed steps are being undone.
	Compensating Status = "compensating"
	// Compensated: every completed step with a compensation was undone.
	Compensated Status = "compensated"
	// Unresolved: a compensation was given up: a real effect happened, was
	// meant to be undone, and was not. A person has to look.
	Unresolved Status = "unresolved"
	// Cancelled: an operator cancelled it while it waited.
	Cancelled Status = "cancelled"
)

// Statuses lists every status, in the order a person reads them.
func Statuses() []Status {
	return []Status{Running, Waiting, Completed, Ended, Failed, Compensating, Compensated, Unresolved, Cancelled}
}

// Valid reports whether s is one of the statuses.
func (s Status) Valid() bool {
	for _, v := range Statuses() {
		if s == v {
			return true
		}
	}
	return false
}

// Stopped reports whether a run in status s is not moving: finished for
// good, or failed and waiting for a person. Its EndedAt is set.
func (s Status) Stopped() bool {
	switch s {
	case Completed, Ended, Failed, Compensated, Unresolved, Cancelled:
		return true
	}
	return false
}

// Kind is what an event records.
type Kind string

// The kinds of event.
const (
	KindStart        Kind = "start"
	KindStep         Kind = "step"
	KindSkip         Kind = "skip"
	KindDelay        Kind = "delay"
	KindHandOff      Kind = "handoff"
	KindCompensation Kind = "compensation"
	KindReplay       Kind = "replay"
	KindCancel       Kind = "cancel"
)

// MaxErrorLen bounds the error text a journal keeps, in bytes: a step that
// fails with a stack trace or a whole response body must not make every
// run row that large.
const MaxErrorLen = 2048

// Run is one run of a flow as the journal knows it.
type Run struct {
	ID     string `json:"run_id"`
	Flow   string `json:"flow"`
	Status Status `json:"status"`
	// Step is where the run is, or where it stopped.
	Step string `json:"step"`
	// Input is the payload the run started with.
	Input json.RawMessage `json:"input,omitempty"`
	// Version is the version of its flow the run started on (its latest
	// start, for a run started again): engine.FlowInfo.Version; "" for a
	// run started before flows had versions.
	Version string `json:"version,omitempty"`
	// BusinessKey is what its flow's dsl.Key gave on its input at its
	// (latest) start: what runs list --key finds it by; "" when the flow
	// names none.
	BusinessKey string `json:"business_key,omitempty"`
	// Error is why the run last failed or was retried ("" once it moved on).
	Error     string     `json:"error"`
	StartedAt time.Time  `json:"started_at"`
	UpdatedAt time.Time  `json:"updated_at"`
	EndedAt   *time.Time `json:"ended_at"`
	// DueAt is when a waiting run goes on, or when a failed run held for
	// replay is compensated.
	DueAt *time.Time `json:"due_at,omitempty"`
	// DeadLetter is the queue holding a failed run's given-up message.
	DeadLetter string `json:"dead_letter,omitempty"`
	// Replays is how many times the run was replayed.
	Replays int `json:"replays"`
	// Seq is the Seq of the last event that changed the run.
	Seq int64 `json:"-"`
	// InputReplays is the replay count of the event Input came from: a
	// run started again takes the input of its later start.
	InputReplays int `json:"-"`
}

// Event is one entry of a run's timeline, and what it changes about the
// run. Zero values of the change fields change nothing.
type Event struct {
	RunID string `json:"-"`
	Flow  string `json:"-"`
	// Key identifies the entry within its run: recording a key again
	// replaces its entry.
	Key string `json:"-"`
	// Seq orders the run's events (see Seq).
	Seq       int64      `json:"-"`
	Kind      Kind       `json:"kind"`
	Step      string     `json:"step"`
	Attempt   int        `json:"attempt"`
	Outcome   string     `json:"outcome"`
	StartedAt time.Time  `json:"started_at"`
	EndedAt   time.Time  `json:"ended_at"`
	Error     string     `json:"error,omitempty"`
	Queue     string     `json:"queue,omitempty"`
	DueAt     *time.Time `json:"due_at,omitempty"`

	// Status, when set, is the run's status after this event; RunStep is
	// then where the run is (or stopped) and Replays how often it was
	// replayed. Error is the run's error too.
	Status  Status `json:"-"`
	RunStep string `json:"-"`
	Replays int    `json:"-"`
	// Input is the run's input, on its start event, and Version the
	// version of its flow it starts on.
	Input   json.RawMessage `json:"-"`
	Version string          `json:"-"`
	// BusinessKey is, on a start event, the run's business key (Run's);
	// it goes with the input.
	BusinessKey string `json:"-"`
	// DeadLetter is the queue holding the message of a failed run.
	DeadLetter string `json:"-"`

	// StepInput is, on a step event (KindStep) of a run's own route, the
	// payload of the message the step ran on, in its flow's codec, and
	// StepState what else the engine needs to send that step the same
	// message again (opaque to the journal): what a replay from the step
	// (engine.ReplayFrom) sends. InputSize is their size in bytes; an
	// input over MaxStepInput is not kept (StepInput nil, InputSize still
	// set), so that a replay from that step can say why it cannot be
	// done. A journal keeps them as long as the event (its retention),
	// and gives them back through StepInputs only, not on the timeline.
	StepInput []byte `json:"-"`
	StepState string `json:"-"`
	InputSize int    `json:"-"`
}

// MaxBusinessKey is the longest business key (Event.BusinessKey) a
// journal keeps, in bytes.
const MaxBusinessKey = 512

// MaxStepInput is the most a journal keeps of a step's input, in bytes
// (Event.StepInput and Event.StepState together): 64 KiB. A step that ran
// on a larger message has its event recorded without its input, and a
// replay from that step is refused.
const MaxStepInput = 64 << 10

// HasInput reports whether e says anything of its step's input: kept, or
// too large to be.
func (e Event) HasInput() bool { return e.StepInput != nil || e.InputSize > 0 }

// StepInput is the input a step of a run ran on, as a journal kept it
// (see Event.StepInput): the latest of its step's events that had one.
type StepInput struct {
	// Step is the step; Key and Seq are of the event it was kept on, and
	// Replays and Attempt that event's.
	Step    string `json:"step"`
	Key     string `json:"key"`
	Seq     int64  `json:"-"`
	Replays int    `json:"replays"`
	Attempt int    `json:"attempt"`
	// At is when that attempt started.
	At time.Time `json:"at"`
	// Input and State are Event.StepInput and Event.StepState: Input is
	// nil when the input was over MaxStepInput, and was not kept.
	Input []byte `json:"-"`
	State string `json:"-"`
	// Size is Event.InputSize.
	Size int `json:"size"`
}

// Kept reports whether the input itself was kept (it was not over
// MaxStepInput).
func (s StepInput) Kept() bool { return s.Input != nil }

// StepInputs is a journal that keeps the input of each step of a run's own
// route (Event.StepInput). Both shipped journals implement it.
type StepInputs interface {
	// StepInputs returns, for each step of run id that has an event with
	// an input (kept or too large), the latest such event's (by Seq), in
	// Seq order, or an error matching ErrRunNotFound.
	StepInputs(ctx context.Context, id string) ([]StepInput, error)
}

// LatestInputs is what StepInputs answers for a run whose events with an
// input are inputs, in any order: the latest per step (by Seq, then key),
// in Seq order.
func LatestInputs(inputs []StepInput) []StepInput {
	latest := map[string]StepInput{}
	for _, in := range inputs {
		if cur, ok := latest[in.Step]; !ok || in.Seq > cur.Seq || in.Seq == cur.Seq && in.Key > cur.Key {
			latest[in.Step] = in
		}
	}
	out := make([]StepInput, 0, len(latest))
	for _, in := range latest {
		out = append(out, in)
	}
	slices.SortFunc(out, func(a, b StepInput) int { return cmp.Or(cmp.Compare(a.Seq, b.Seq), strings.Compare(a.Key, b.Key)) })
	return out
}

// Seq orders a run's events: every event of a later replay after every
// earlier one; within a replay, by stage (0 the start, position+1 a step of
// the route, CompensationStage+k the k-th compensation), then attempt,
// then phase (what happened first within one attempt).
func Seq(replays, stage, attempt, phase int) int64 {
	return int64(replays)<<48 | int64(stage&0xffffff)<<24 | int64(attempt&0xfffff)<<4 | int64(phase&0xf)
}

// CompensationStage is the stage of a run's first compensation: after any
// step of its route.
const CompensationStage = 1 << 20

// Query selects runs, newest first unless Order says otherwise.
type Query struct {
	// Flow, when set, keeps only runs of that flow.
	Flow string
	// Statuses, when set, keeps only runs in one of them.
	Statuses []Status
	// Since keeps only runs started at or after it (zero: all).
	Since time.Time
	// Before keeps only runs started before it (zero: all): paging.
	Before time.Time
	// ErrorContains keeps only runs whose error contains it (case
	// insensitive).
	ErrorContains string
	// Version, when set, keeps only runs started on that version of their
	// flow.
	Version string
	// BusinessKey, when set, keeps only runs with that business key.
	BusinessKey string
	// IDPrefix, when set, keeps only runs whose id begins with it.
	IDPrefix string
	// Where, when set, keeps only runs it matches (Cond.Match): the part
	// of a where expression a journal evaluates (see Find).
	Where *Cond
	// Order is the order of the answer, and so which runs Limit keeps
	// (zero: NewestFirst).
	Order Order
	// Limit caps the answer (0 = DefaultLimit).
	Limit int
}

// Order is the order a Query answers in.
type Order int

// The orders of a Query.
const (
	// NewestFirst: by start, newest first, then by run id, descending.
	NewestFirst Order = iota
	// SoonestDue: only runs with a due time (DueAt: waiting on the
	// ladder, or failed and held for a replay), soonest due first, then by
	// run id: the Limit runs due soonest, not the newest ones sorted.
	SoonestDue
)

// DefaultLimit is how many runs a Query without a Limit returns.
const DefaultLimit = 100

// Journal records runs and answers questions about them. Implementations
// are safe for concurrent use and apply events by the package's rules.
type Journal interface {
	// Record applies events: each to its run's timeline and, by its Seq,
	// to the run. It is all or nothing.
	Record(ctx context.Context, events []Event) error
	// Run returns one run, or an error matching ErrRunNotFound.
	Run(ctx context.Context, id string) (Run, error)
	// Runs returns the runs q selects, in q's Order.
	Runs(ctx context.Context, q Query) ([]Run, error)
	// RunsByIDPrefix returns the runs whose id begins with prefix, in id
	// order (by bytes), at most limit (DefaultLimit when 0 or less): how
	// a person's shortened run id is found (see Resolve).
	RunsByIDPrefix(ctx context.Context, prefix string, limit int) ([]Run, error)
	// Timeline returns a run's events in order (by Seq, then time), or an
	// error matching ErrRunNotFound.
	Timeline(ctx context.Context, id string) ([]Event, error)
}

// CancelledStage is the stage of a run's cancellation (Seq): after every
// other event of its replay, so that nothing recorded after it, a step
// that was in flight or the compensation it starts, moves the run out of
// Cancelled.
const CancelledStage = 0xffffff

// CancelFeed is a journal that says which runs were cancelled lately, for
// workers to stop them. Both shipped journals implement it.
type CancelFeed interface {
	// CancelledSince returns the runs whose status is Cancelled and whose
	// end is at or after since, at most limit, those that ended first
	// first, with when each ended.
	CancelledSince(ctx context.Context, since time.Time, limit int) ([]Run, error)
}

// BranchRef names one branch of a run's fork: the fork's join key
// ("<replays>/<position>/<fork step>") and the branch's index.
type BranchRef struct {
	Join   string
	Branch int
}

// BriefTimeline is a journal that reads the timeline of a run with many
// branches (a ForEach over 100,000 items has some 200,000 events) in two
// parts: every event briefly, then the whole events of the branches a
// page shows. The SQL journal implements it; a caller that finds a
// journal without it reads Timeline.
type BriefTimeline interface {
	// BriefTimeline returns a run's events as Timeline does, except that
	// an event of a fork's branch (its key begins "branch/" or
	// "arrived/") carries only RunID, Key, Kind, Step, Outcome and Seq, and the
	// branches' events are not in order: what says where each branch
	// stands. It returns an error matching ErrRunNotFound as Timeline
	// does.
	BriefTimeline(ctx context.Context, id string) ([]Event, error)
	// BranchEvents returns the whole events of the named branches of a
	// run (their steps, their arrivals at their fork, the compensations
	// that undid them) in Timeline's order; none for a branch without
	// events.
	BranchEvents(ctx context.Context, id string, branches []BranchRef) ([]Event, error)
}

// ErrDataNotFound: a DataStore keeps nothing under that run and key: it
// was never put, or went with its run (purged, or forgotten by a Memory
// journal past its MaxRuns).
var ErrDataNotFound = errors.New("run data not found")

// DataStore is a journal that also keeps data a run needs later and that
// is too large to travel in its messages' headers: what a completed step
// returned, for its compensation. Data lives as long as its run in the
// journal and goes with it. Both shipped journals implement it; the
// engine keeps such data only in a journal that does.
type DataStore interface {
	// PutData keeps data under (runID, key), replacing what was there. It
	// refuses a run id or key that is not Text, or empty.
	PutData(ctx context.Context, runID, key string, data []byte) error
	// Data returns what PutData kept under (runID, key), or an error
	// matching ErrDataNotFound.
	Data(ctx context.Context, runID, key string) ([]byte, error)
}

// CheckDataKey refuses, with an error matching ErrInvalidEvent, a run id or
// data key no DataStore can keep: empty, or not Text.
func CheckDataKey(runID, key string) error {
	if runID == "" || key == "" || !Text(runID) || !Text(key) {
		return fmt.Errorf("%w: run data %q of run %q: want non-empty UTF-8 text without NUL bytes", ErrInvalidEvent, key, runID)
	}
	return nil
}

// Validate refuses, with an error matching ErrInvalidEvent, an event no
// journal can keep: no run id, a status that is not one, an attempt or
// replay count beyond 32 bits, a step input over MaxStepInput, or an id,
// name, outcome or step state that is not UTF-8 text without NUL bytes (error texts are repaired instead: see Truncate).
func (e Event) Validate() error {
	bad := func(format string, args ...any) error {
		return fmt.Errorf("%w: run %q key %q: %s", ErrInvalidEvent, e.RunID, e.Key, fmt.Sprintf(format, args...))
	}
	if e.RunID == "" {
		return bad("no run id")
	}
	if e.Status != "" && !e.Status.Valid() {
		return bad("status %q is not a journal status", e.Status)
	}
	if e.Attempt != int(int32(e.Attempt)) || e.Replays != int(int32(e.Replays)) {
		return bad("attempt %d or replays %d beyond a 32-bit integer", e.Attempt, e.Replays)
	}
	if len(e.BusinessKey) > MaxBusinessKey {
		return bad("business key of %d bytes, want at most %d", len(e.BusinessKey), MaxBusinessKey)
	}
	if e.InputSize < 0 || e.InputSize != int(int32(e.InputSize)) || len(e.StepInput)+len(e.StepState) > MaxStepInput {
		return bad("step input of %d bytes (%d kept): want 0 or more, at most %d kept", e.InputSize, len(e.StepInput)+len(e.StepState), MaxStepInput)
	}
	for _, f := range [...]struct{ name, value string }{
		{"run id", e.RunID}, {"flow", e.Flow}, {"key", e.Key}, {"kind", string(e.Kind)}, {"step", e.Step},
		{"outcome", e.Outcome}, {"queue", e.Queue}, {"run step", e.RunStep}, {"dead letter", e.DeadLetter},
		{"step state", e.StepState}, {"business key", e.BusinessKey},
	} {
		if !Text(f.value) {
			return bad("%s %q is not UTF-8 text without NUL bytes", f.name, f.value)
		}
	}
	return nil
}

// Text reports whether s is what every journal can store as text: valid
// UTF-8 without NUL bytes (PostgreSQL's text refuses either).
func Text(s string) bool { return utf8.ValidString(s) && strings.IndexByte(s, 0) < 0 }

// Truncate makes an error text storable and bounded: invalid UTF-8 and NUL
// bytes become U+FFFD (an error is whatever a step returned, and one that
// cannot be stored must not refuse its batch), and a text over
// MaxErrorLen bytes is cut on a rune boundary, saying it was.
func Truncate(s string) string {
	if !Text(s) {
		s = strings.ReplaceAll(strings.ToValidUTF8(s, "\uFFFD"), "\x00", "\uFFFD")
	}
	if len(s) <= MaxErrorLen {
		return s
	}
	const mark = " [truncated]"
	cut := MaxErrorLen - len(mark)
	for cut > 0 && s[cut]&0xc0 == 0x80 {
		cut--
	}
	return s[:cut] + mark
}
