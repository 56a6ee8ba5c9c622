package journal_test

import (
	"bytes"
	"encoding/json"
	"errors"
	"math"
	"reflect"
	"strings"
	"testing"
	"time"
	"unicode/utf8"

	"github.com/acemq/acemq-flow/engine/journal"
)

// fuzzShown is what `acemq-flow runs show -o json` prints: the run and its
// timeline.
type fuzzShown struct {
	journal.Run
	Steps []journal.Event `json:"steps"`
}

// show prints v as the command does.
func show(v fuzzShown) ([]byte, error) { return json.MarshalIndent(v, "", "  ") }

// normalized is v as its JSON says it: times in UTC, the input as
// encoding/json writes it.
func normalized(t *testing.T, v fuzzShown) fuzzShown {
	t.Helper()
	utc := func(p **time.Time) {
		if *p != nil {
			u := (**p).UTC()
			*p = &u
		}
	}
	input := func(raw json.RawMessage) json.RawMessage {
		if raw == nil {
			return nil
		}
		b, err := json.Marshal(raw)
		if err != nil {
			t.Fatalf("input %q: %v", raw, err)
		}
		return b
	}
	v.StartedAt, v.UpdatedAt = v.StartedAt.UTC(), v.UpdatedAt.UTC()
	utc(&v.EndedAt)
	utc(&v.DueAt)
	v.Input = input(v.Input)
	steps := make([]journal.Event, len(v.Steps))
	for i, e := range v.Steps {
		e.StartedAt, e.EndedAt = e.StartedAt.UTC(), e.EndedAt.UTC()
		utc(&e.DueAt)
		steps[i] = e
	}
	v.Steps = steps
	return v
}

func fuzzShownSample() fuzzShown {
	at := time.Date(2026, 12, 24, 9, 0, 0, 123456789, time.UTC)
	ended := at.Add(time.Minute)
	due := at.Add(time.Hour).In(time.FixedZone("", -(3*3600 + 30*60)))
	return fuzzShown{
		Run: journal.Run{ID: "run-1", Flow: "place-order", Status: journal.Failed, Step: "ship",
			Input: json.RawMessage(`{"id": "o-1", "html": "<&>"}`), Error: "courier refused: \"no\" \u2028 é",
			StartedAt: at, UpdatedAt: ended, EndedAt: &ended, DueAt: &due, DeadLetter: "place-order.ship.dlq", Replays: 2},
		Steps: []journal.Event{
			{Kind: journal.KindStart, Step: "validate", Attempt: 1, Outcome: "started", StartedAt: at, EndedAt: at},
			{Kind: journal.KindStep, Step: "ship", Attempt: 3, Outcome: "failed", StartedAt: at, EndedAt: ended,
				Error: "timeout", Queue: "place-order.ship", DueAt: &due},
		},
	}
}

// stdlibPrints reports whether encoding/json can print every time of v
// again: time.Time's UnmarshalJSON takes a zone offset of 24 hours or more
// ("+24:00") that its MarshalJSON refuses, which no journal writes (they
// keep UTC) and no code of ours can change.
func stdlibPrints(v fuzzShown) bool {
	times := []*time.Time{&v.StartedAt, &v.UpdatedAt, v.EndedAt, v.DueAt}
	for i := range v.Steps {
		times = append(times, &v.Steps[i].StartedAt, &v.Steps[i].EndedAt, v.Steps[i].DueAt)
	}
	for _, t := range times {
		if t == nil {
			continue
		}
		if _, err := t.MarshalJSON(); err != nil {
			return false
		}
	}
	return true
}

// FuzzJournalJSON: whatever JSON `runs show -o json` is fed back (a
// script reading it, an older or newer binary's output), what parses into
// a run and its timeline prints again, and that reads back as the same
// run and timeline and prints the same; nothing panics.
func FuzzJournalJSON(f *testing.F) {
	sample, err := show(fuzzShownSample())
	if err != nil {
		f.Fatal(err)
	}
	f.Add(sample)
	for _, s := range []string{
		`{"run_id":"r","flow":"f","status":"running","step":"a","error":"","started_at":"2026-12-24T09:00:00Z",
		  "updated_at":"2026-12-24T09:00:00.5+14:00","ended_at":null,"replays":0,"steps":[]}`,
		`{"run_id":"r","status":"not-a-status","input":null,"due_at":"0001-01-01T00:00:00Z","replays":-1,"steps":null}`,
		`{"run_id":"r","input":[1,{"a":"\u003c"}],"error":"bad \xff\x00 bytes","ended_at":"9999-12-31T23:59:59.999999999-23:59"}`,
		`{"steps":[{"kind":"skip","step":"s","attempt":2147483648,"outcome":"skipped","started_at":"2026-01-01T00:00:00Z",
		  "ended_at":"2026-01-01T00:00:00Z","due_at":null,"run_id":"hidden","status":"completed"}]}`,
		`{"started_at":"2026-12-24T09:00:00.5+24:00"}`,
		`{"started_at":"2026-13-01T00:00:00Z"}`, `{"replays":1e3}`, `{"input":}`, `null`, `[]`, `{}`, ``,
	} {
		f.Add([]byte(s))
	}
	f.Fuzz(func(t *testing.T, data []byte) {
		if len(data) > 1024 {
			return
		}
		var first fuzzShown
		if err := json.Unmarshal(data, &first); err != nil {
			return
		}
		if !stdlibPrints(first) {
			return
		}
		printed, err := show(first)
		if err != nil {
			t.Fatalf("%q parsed but does not print: %v", data, err)
		}
		var again fuzzShown
		if err := json.Unmarshal(printed, &again); err != nil {
			t.Fatalf("printed %s does not parse: %v", printed, err)
		}
		if a, b := normalized(t, first), normalized(t, again); !reflect.DeepEqual(a, b) {
			t.Fatalf("%q printed as %s reads back as\n%#v\nnot\n%#v", data, printed, b, a)
		}
		reprinted, err := show(again)
		if err != nil || !bytes.Equal(printed, reprinted) {
			t.Fatalf("printed\n%s\nthen\n%s (%v)", printed, reprinted, err)
		}
	})
}

// FuzzJournalText: Truncate turns any error text into one every journal
// stores (UTF-8, no NUL, at most MaxErrorLen bytes), leaves one that
// already is alone and cuts a longer one to a prefix of it, and is
// idempotent; Validate accepts exactly the events it documents (a run id,
// a journal status or none, 32-bit counts, text fields that are UTF-8
// without NUL), and such an event, its error truncated, prints as
// `runs show -o json` does and reads back unchanged.
//
// The error text is its fuzz input repeated: texts past MaxErrorLen from
// short inputs, which the fuzzer mutates and minimizes far faster.
func FuzzJournalText(f *testing.F) {
	f.Add("run-1", "place-order", "step:ship:1", "step", "ship", "failed", "place-order.ship", "ship", "", "failed",
		"courier refused", uint16(1), int64(1), int64(0), int64(1764489600123456789))
	f.Add("", "f", "k", "start", "a", "", "", "", "", "", "", uint16(0), int64(1), int64(0), int64(0))
	f.Add("r", "f", "k", "step", "a", "ok", "q", "a", "dlq", "not-a-status", "é", uint16(journal.MaxErrorLen),
		int64(math.MaxInt32), int64(math.MaxInt32), int64(-1))
	f.Add("r", "f\x00", "k", "step", "a", "ok", "q", "a", "dlq", "running", "x\x00y", uint16(1000),
		int64(math.MaxInt32+1), int64(0), int64(math.MinInt64))
	f.Add("r\xff", "f", "k", "step", "a", "ok", "q", "a", "dlq", "", "\xff\xfe", uint16(1500),
		int64(math.MinInt32-1), int64(-1), int64(math.MaxInt64))
	f.Add("r", "f", "k", "step", "a", "o\xc3", "q", "a", "dlq", "waiting", "xé", uint16(1000),
		int64(0), int64(math.MinInt64), int64(0))
	f.Add("r", "f", "k", "step", "a", "ok", "q", "a", "dlq", "waiting", "x", uint16(journal.MaxErrorLen+1),
		int64(0), int64(0), int64(0))
	f.Fuzz(func(t *testing.T, runID, flow, key, kind, step, outcome, queue, runStep, deadLetter, status, errPiece string,
		repeat uint16, attempt, replays, startedAt int64) {
		for _, s := range []string{runID, flow, key, kind, step, outcome, queue, runStep, deadLetter, status, errPiece} {
			if len(s) > 64 {
				return
			}
		}
		errText := strings.Repeat(errPiece, int(repeat%4096))
		cut := journal.Truncate(errText)
		switch {
		case !utf8.ValidString(cut) || strings.IndexByte(cut, 0) >= 0 || len(cut) > journal.MaxErrorLen:
			t.Fatalf("Truncate(%q) = %q (%d bytes): not storable", errText, cut, len(cut))
		case journal.Truncate(cut) != cut:
			t.Fatalf("Truncate(%q) = %q, then %q", errText, cut, journal.Truncate(cut))
		case journal.Text(errText) && len(errText) <= journal.MaxErrorLen && cut != errText:
			t.Fatalf("Truncate changed storable %q to %q", errText, cut)
		case journal.Text(errText) && cut != errText &&
			!(strings.HasSuffix(cut, " [truncated]") && strings.HasPrefix(errText, strings.TrimSuffix(cut, " [truncated]"))):
			t.Fatalf("Truncate(%q) = %q: not a prefix saying it was cut", errText, cut)
		}

		e := journal.Event{RunID: runID, Flow: flow, Key: key, Kind: journal.Kind(kind), Step: step, Outcome: outcome,
			Queue: queue, RunStep: runStep, DeadLetter: deadLetter, Status: journal.Status(status),
			Attempt: int(attempt), Replays: int(replays), Error: errText,
			StartedAt: time.Unix(0, startedAt).UTC(), EndedAt: time.Unix(0, startedAt/2).UTC()}
		valid := runID != "" && (status == "" || e.Status.Valid()) &&
			attempt == int64(int32(attempt)) && replays == int64(int32(replays))
		for _, s := range []string{runID, flow, key, kind, step, outcome, queue, runStep, deadLetter} {
			valid = valid && utf8.ValidString(s) && !strings.Contains(s, "\x00")
		}
		err := e.Validate()
		if valid != (err == nil) || err != nil && !errors.Is(err, journal.ErrInvalidEvent) {
			t.Fatalf("Validate(%#v) = %v, want valid %v", e, err, valid)
		}
		if !valid {
			return
		}
		e.Error = cut
		run := journal.Run{ID: runID, Flow: flow, Status: e.Status, Step: runStep, Error: cut,
			StartedAt: e.StartedAt, UpdatedAt: e.EndedAt, EndedAt: &e.EndedAt, DeadLetter: deadLetter, Replays: e.Replays}
		printed, err := show(fuzzShown{Run: run, Steps: []journal.Event{e}})
		if err != nil {
			t.Fatalf("%#v does not print: %v", e, err)
		}
		var back fuzzShown
		if err := json.Unmarshal(printed, &back); err != nil {
			t.Fatalf("printed %s does not parse: %v", printed, err)
		}
		// What the output leaves out (json:"-") is not expected back.
		wantRun, wantEvent := run, journal.Event{Kind: e.Kind, Step: e.Step, Attempt: e.Attempt, Outcome: e.Outcome,
			StartedAt: e.StartedAt, EndedAt: e.EndedAt, Error: e.Error, Queue: e.Queue}
		got := normalized(t, back)
		if want := normalized(t, fuzzShown{Run: wantRun, Steps: []journal.Event{wantEvent}}); !reflect.DeepEqual(want, got) {
			t.Fatalf("printed %s reads back as\n%#v\nnot\n%#v", printed, got, want)
		}
	})
}
