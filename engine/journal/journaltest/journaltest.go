// Package journaltest is the conformance suite every run journal passes:
// the in-memory one and the PostgreSQL one run the same tests, so that a
// run reads the same whichever records it.
package journaltest

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/acemq/acemq-flow/engine/journal"
)

// Open returns an empty journal for one test; the suite runs tests in
// parallel, each on a journal of its own.
type Open func(t *testing.T) journal.Journal

// Run runs the suite against the journals open returns.
func Run(t *testing.T, open Open) {
	tests := map[string]func(*testing.T, journal.Journal){
		"a run through its steps":        runThroughSteps,
		"late events do not go back":     lateEventsDoNotGoBack,
		"a key recorded twice is one":    keyRecordedTwice,
		"failed then replayed":           failedThenReplayed,
		"queries":                        queries,
		"unknown runs":                   unknownRuns,
		"error text is bounded":          errorTextBounded,
		"a run made by a later event":    runMadeByLaterEvent,
		"concurrent writers of one run":  concurrentWriters,
		"waiting and compensating":       waitingAndCompensating,
		"input kept from the start only": inputFromStart,
		"a batch touching a run twice":   batchTouchingRunTwice,
		"invalid events refused":         invalidEventsRefused,
		"run data":                       runData,
		"input of a run started again":   inputOfRunStartedAgain,
		"soonest due first":              soonestDueFirst,
		"runs by id prefix":              runsByIDPrefix,
		"resolving a shortened id":       resolvingShortenedID,
		"cancelled since":                cancelledSince,
		"the version a run started on":   versionOfRun,
		"step inputs":                    stepInputs,
		"search":                         search,
		"aggregates":                     aggregates,
		"a chart's edges":                chartEdges,
		"error patterns":                 errorPatterns,
		"workers' reports":               workers,
	}
	for name, test := range tests {
		t.Run(name, func(t *testing.T) {
			t.Parallel()
			test(t, open(t))
		})
	}
}

var t0 = time.Date(2026, 12, 1, 9, 0, 0, 0, time.UTC)

func at(s int) time.Time { return t0.Add(time.Duration(s) * time.Second) }

func ctxOf(t *testing.T) context.Context {
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	t.Cleanup(cancel)
	return ctx
}

// start is a run's start event.
func start(run, flow string, s int, input string) journal.Event {
	return journal.Event{RunID: run, Flow: flow, Key: "start", Seq: journal.Seq(0, 0, 1, 0), Kind: journal.KindStart,
		Outcome: "started", StartedAt: at(s), EndedAt: at(s), Status: journal.Running, RunStep: "validate",
		Input: json.RawMessage(input)}
}

// step is the settled attempt of the step at position pos.
func step(run, flow, name string, pos, attempt, s int, outcome string, status journal.Status, next string) journal.Event {
	return journal.Event{RunID: run, Flow: flow, Key: fmt.Sprintf("%s/%d", name, attempt), Seq: journal.Seq(0, pos+1, attempt, 2),
		Kind: journal.KindStep, Step: name, Attempt: attempt, Outcome: outcome, StartedAt: at(s), EndedAt: at(s + 1),
		Queue: flow + "." + name, Status: status, RunStep: next}
}

func record(t *testing.T, j journal.Journal, events ...journal.Event) {
	t.Helper()
	require.NoError(t, j.Record(ctxOf(t), events))
}

func runThroughSteps(t *testing.T, j journal.Journal) {
	ctx := ctxOf(t)
	record(t, j, start("r1", "orders", 0, `{"id":1}`))
	record(t, j,
		step("r1", "orders", "validate", 0, 1, 1, "completed", journal.Running, "charge"),
		step("r1", "orders", "charge", 1, 1, 2, "completed", journal.Running, "ship"))
	record(t, j, step("r1", "orders", "ship", 2, 1, 3, "completed", journal.Completed, "ship"))

	r, err := j.Run(ctx, "r1")
	require.NoError(t, err)
	require.Equal(t, "r1", r.ID)
	require.Equal(t, "orders", r.Flow)
	require.Equal(t, journal.Completed, r.Status)
	require.Equal(t, "ship", r.Step)
	require.JSONEq(t, `{"id":1}`, string(r.Input))
	require.True(t, r.StartedAt.Equal(at(0)), "started at %s", r.StartedAt)
	require.NotNil(t, r.EndedAt)
	require.True(t, r.EndedAt.Equal(at(4)), "ended at %s", r.EndedAt)
	require.Empty(t, r.Error)

	tl, err := j.Timeline(ctx, "r1")
	require.NoError(t, err)
	require.Len(t, tl, 4)
	var steps []string
	for _, e := range tl {
		steps = append(steps, string(e.Kind)+":"+e.Step)
	}
	require.Equal(t, []string{"start:", "step:validate", "step:charge", "step:ship"}, steps)
	require.Equal(t, "orders.charge", tl[2].Queue)
	require.Equal(t, 1, tl[2].Attempt)
	require.True(t, tl[2].StartedAt.Equal(at(2)))
	require.True(t, tl[2].EndedAt.Equal(at(3)))
}

func lateEventsDoNotGoBack(t *testing.T, j journal.Journal) {
	ctx := ctxOf(t)
	record(t, j, start("r2", "orders", 0, `{}`))
	// A later step's batch lands before an earlier one's.
	record(t, j, step("r2", "orders", "ship", 2, 1, 5, "completed", journal.Completed, "ship"))
	record(t, j, step("r2", "orders", "charge", 1, 1, 2, "completed", journal.Running, "ship"))
	r, err := j.Run(ctx, "r2")
	require.NoError(t, err)
	require.Equal(t, journal.Completed, r.Status, "an older event does not take the run back")
	tl, err := j.Timeline(ctx, "r2")
	require.NoError(t, err)
	require.Len(t, tl, 3, "it is still on the timeline")
	require.Equal(t, "charge", tl[1].Step, "the timeline is in run order, not arrival order")
}

func keyRecordedTwice(t *testing.T, j journal.Journal) {
	ctx := ctxOf(t)
	record(t, j, start("r3", "orders", 0, `{}`))
	e := step("r3", "orders", "charge", 1, 1, 1, "retried", journal.Running, "charge")
	e.Error = "gateway timeout"
	record(t, j, e)
	// The same attempt settled again after a redelivery: one entry, the later.
	e.Outcome, e.EndedAt = "completed", at(9)
	e.Error = ""
	record(t, j, e)
	tl, err := j.Timeline(ctx, "r3")
	require.NoError(t, err)
	require.Len(t, tl, 2)
	require.Equal(t, "completed", tl[1].Outcome)
	require.Empty(t, tl[1].Error)
	require.True(t, tl[1].EndedAt.Equal(at(9)))
}

func failedThenReplayed(t *testing.T, j journal.Journal) {
	ctx := ctxOf(t)
	record(t, j, start("r4", "orders", 0, `{}`))
	failed := step("r4", "orders", "ship", 2, 3, 10, "failed", journal.Failed, "ship")
	failed.Error = "courier down"
	failed.DeadLetter = "orders.ship.dlq"
	hold := at(600)
	failed.DueAt = &hold
	record(t, j, failed)
	r, err := j.Run(ctx, "r4")
	require.NoError(t, err)
	require.Equal(t, journal.Failed, r.Status)
	require.Equal(t, "courier down", r.Error)
	require.Equal(t, "orders.ship.dlq", r.DeadLetter)
	require.NotNil(t, r.EndedAt, "a failed run has stopped")
	require.NotNil(t, r.DueAt)
	require.True(t, r.DueAt.Equal(hold))

	replay := journal.Event{RunID: "r4", Flow: "orders", Key: "replay/1", Seq: journal.Seq(1, 0, 0, 0), Kind: journal.KindReplay,
		Step: "ship", Outcome: "replayed", StartedAt: at(20), EndedAt: at(20), Queue: "orders.ship.dlq",
		Status: journal.Running, RunStep: "ship", Replays: 1}
	record(t, j, replay)
	r, err = j.Run(ctx, "r4")
	require.NoError(t, err)
	require.Equal(t, journal.Running, r.Status)
	require.Equal(t, 1, r.Replays)
	require.Empty(t, r.Error, "a replayed run's old error is cleared")
	require.Empty(t, r.DeadLetter)
	require.Nil(t, r.EndedAt)
	require.Nil(t, r.DueAt)

	// The replayed attempt is attempt 1 again, but of replay 1: later.
	done := step("r4", "orders", "ship", 2, 1, 21, "completed", journal.Completed, "ship")
	done.Seq, done.Key, done.Replays = journal.Seq(1, 3, 1, 2), "ship/1/replay1", 1
	record(t, j, done)
	r, err = j.Run(ctx, "r4")
	require.NoError(t, err)
	require.Equal(t, journal.Completed, r.Status)
	tl, err := j.Timeline(ctx, "r4")
	require.NoError(t, err)
	require.Len(t, tl, 4)
	require.Equal(t, journal.KindReplay, tl[2].Kind)
	require.Equal(t, "completed", tl[3].Outcome)
}

func queries(t *testing.T, j journal.Journal) {
	ctx := ctxOf(t)
	for i := range 12 {
		flow := "orders"
		if i%3 == 0 {
			flow = "refunds"
		}
		id := fmt.Sprintf("q%02d", i)
		record(t, j, start(id, flow, i*10, `{}`))
		if i%2 == 0 {
			f := step(id, flow, "charge", 1, 1, i*10+1, "failed", journal.Failed, "charge")
			f.Error = fmt.Sprintf("Card DECLINED (%d)", i)
			record(t, j, f)
		}
	}
	ids := func(runs []journal.Run) []string {
		var out []string
		for _, r := range runs {
			out = append(out, r.ID)
		}
		return out
	}
	all, err := j.Runs(ctx, journal.Query{})
	require.NoError(t, err)
	require.Equal(t, []string{"q11", "q10", "q09", "q08", "q07", "q06", "q05", "q04", "q03", "q02", "q01", "q00"}, ids(all), "newest first")

	got, err := j.Runs(ctx, journal.Query{Flow: "refunds"})
	require.NoError(t, err)
	require.Equal(t, []string{"q09", "q06", "q03", "q00"}, ids(got))

	got, err = j.Runs(ctx, journal.Query{Flow: "orders", Statuses: []journal.Status{journal.Failed}})
	require.NoError(t, err)
	require.Equal(t, []string{"q10", "q08", "q04", "q02"}, ids(got))

	got, err = j.Runs(ctx, journal.Query{Statuses: []journal.Status{journal.Failed, journal.Running}, Since: at(60), Limit: 3})
	require.NoError(t, err)
	require.Equal(t, []string{"q11", "q10", "q09"}, ids(got))

	got, err = j.Runs(ctx, journal.Query{Before: at(60), Limit: 2})
	require.NoError(t, err)
	require.Equal(t, []string{"q05", "q04"}, ids(got), "Before pages back from a run")

	got, err = j.Runs(ctx, journal.Query{ErrorContains: "card declined (1"})
	require.NoError(t, err)
	require.Equal(t, []string{"q10"}, ids(got), "error text is matched without case")

	got, err = j.Runs(ctx, journal.Query{Flow: "nothing"})
	require.NoError(t, err)
	require.Empty(t, got)
}

func unknownRuns(t *testing.T, j journal.Journal) {
	ctx := ctxOf(t)
	_, err := j.Run(ctx, "nobody")
	require.ErrorIs(t, err, journal.ErrRunNotFound)
	_, err = j.Timeline(ctx, "nobody")
	require.ErrorIs(t, err, journal.ErrRunNotFound)
	require.True(t, errors.Is(err, journal.ErrRunNotFound))
}

func errorTextBounded(t *testing.T, j journal.Journal) {
	ctx := ctxOf(t)
	record(t, j, start("r5", "orders", 0, `{}`))
	f := step("r5", "orders", "charge", 1, 1, 1, "failed", journal.Failed, "charge")
	f.Error = strings.Repeat("é", journal.MaxErrorLen)
	record(t, j, f)
	r, err := j.Run(ctx, "r5")
	require.NoError(t, err)
	require.LessOrEqual(t, len(r.Error), journal.MaxErrorLen)
	require.True(t, strings.HasSuffix(r.Error, "[truncated]"))
	tl, err := j.Timeline(ctx, "r5")
	require.NoError(t, err)
	require.LessOrEqual(t, len(tl[1].Error), journal.MaxErrorLen)
}

func runMadeByLaterEvent(t *testing.T, j journal.Journal) {
	ctx := ctxOf(t)
	// A worker whose start event was lost (or a run started elsewhere)
	// still shows up from its first step.
	record(t, j, step("r6", "orders", "charge", 1, 1, 5, "completed", journal.Running, "ship"))
	r, err := j.Run(ctx, "r6")
	require.NoError(t, err)
	require.Equal(t, "orders", r.Flow)
	require.Equal(t, journal.Running, r.Status)
	require.Equal(t, "ship", r.Step)
	record(t, j, start("r6", "orders", 0, `{"late":true}`))
	r, err = j.Run(ctx, "r6")
	require.NoError(t, err)
	require.Equal(t, "ship", r.Step, "the start does not take the run back")
	require.True(t, r.StartedAt.Equal(at(0)))
	require.JSONEq(t, `{"late":true}`, string(r.Input))
}

func concurrentWriters(t *testing.T, j journal.Journal) {
	ctx := ctxOf(t)
	record(t, j, start("r7", "orders", 0, `{}`))
	var wg sync.WaitGroup
	for w := range 4 {
		wg.Go(func() {
			for a := 1; a <= 5; a++ {
				e := step("r7", "orders", "charge", 1, a, a, "retried", journal.Running, "charge")
				if a == 5 {
					e.Outcome, e.Status = "completed", journal.Completed
				}
				if !assertNoError(t, j.Record(ctx, []journal.Event{e}), w) {
					return
				}
			}
		})
	}
	wg.Wait()
	tl, err := j.Timeline(ctx, "r7")
	require.NoError(t, err)
	require.Len(t, tl, 6, "four workers recording the same five attempts give five entries")
	r, err := j.Run(ctx, "r7")
	require.NoError(t, err)
	require.Equal(t, journal.Completed, r.Status)
}

func assertNoError(t *testing.T, err error, w int) bool {
	if err != nil {
		t.Errorf("writer %d: %v", w, err)
		return false
	}
	return true
}

func waitingAndCompensating(t *testing.T, j journal.Journal) {
	ctx := ctxOf(t)
	record(t, j, start("r8", "orders", 0, `{}`))
	due := at(1800)
	record(t, j, journal.Event{RunID: "r8", Flow: "orders", Key: "delay/ship", Seq: journal.Seq(0, 3, 0, 0), Kind: journal.KindDelay,
		Step: "ship", Outcome: "waiting", StartedAt: at(1), EndedAt: at(1), DueAt: &due, Status: journal.Waiting, RunStep: "ship"})
	r, err := j.Run(ctx, "r8")
	require.NoError(t, err)
	require.Equal(t, journal.Waiting, r.Status)
	require.NotNil(t, r.DueAt)
	require.True(t, r.DueAt.Equal(due))
	require.Nil(t, r.EndedAt)

	failed := step("r8", "orders", "ship", 2, 1, 1801, "failed", journal.Compensating, "ship")
	failed.Error = "no courier"
	record(t, j, failed,
		journal.Event{RunID: "r8", Flow: "orders", Key: "compensate/charge", Seq: journal.Seq(0, journal.CompensationStage, 1, 2),
			Kind: journal.KindCompensation, Step: "charge", Attempt: 1, Outcome: "compensated", StartedAt: at(1802), EndedAt: at(1803),
			Status: journal.Compensated, RunStep: "charge", Error: "no courier"})
	r, err = j.Run(ctx, "r8")
	require.NoError(t, err)
	require.Equal(t, journal.Compensated, r.Status)
	require.Equal(t, "no courier", r.Error, "a compensated run says why it was undone")
	require.NotNil(t, r.EndedAt)
	tl, err := j.Timeline(ctx, "r8")
	require.NoError(t, err)
	require.Equal(t, journal.KindCompensation, tl[len(tl)-1].Kind)
	require.NotNil(t, tl[1].DueAt)
}

func inputFromStart(t *testing.T, j journal.Journal) {
	ctx := ctxOf(t)
	record(t, j, start("r9", "orders", 0, `{"n":1}`))
	again := start("r9", "orders", 3, `{"n":2}`)
	record(t, j, again)
	r, err := j.Run(ctx, "r9")
	require.NoError(t, err)
	require.JSONEq(t, `{"n":1}`, string(r.Input), "starting a run twice keeps its first input")
}

func batchTouchingRunTwice(t *testing.T, j journal.Journal) {
	ctx := ctxOf(t)
	a := step("r10", "orders", "charge", 1, 1, 5, "retried", journal.Running, "charge")
	a.Error = "first"
	b := a
	b.Outcome, b.Error = "failed", "second"
	b.Status = journal.Failed
	late := start("r10", "orders", 0, `{"n":10}`)
	record(t, j, a, late, b)
	r, err := j.Run(ctx, "r10")
	require.NoError(t, err)
	require.Equal(t, journal.Failed, r.Status, "a tie at the highest Seq goes to the later event")
	require.Equal(t, "second", r.Error)
	require.True(t, r.StartedAt.Equal(at(0)), "a start in the same batch lowers started_at")
	require.JSONEq(t, `{"n":10}`, string(r.Input))
	tl, err := j.Timeline(ctx, "r10")
	require.NoError(t, err)
	require.Len(t, tl, 2, "the key recorded twice in one batch is one entry, the later")
	require.Equal(t, "failed", tl[1].Outcome)
	require.Nil(t, tl[0].Input, "the input is the run's, not the timeline's")
}

func invalidEventsRefused(t *testing.T, j journal.Journal) {
	ctx := ctxOf(t)
	good := start("r11", "orders", 0, `{}`)
	for name, bad := range map[string]journal.Event{
		"no run id":      {Flow: "orders", Key: "k"},
		"unknown status": {RunID: "r11", Key: "k", Status: "sleeping"},
		"NUL in a step":  {RunID: "r11", Key: "k", Step: "a\x00b"},
		"not UTF-8 id":   {RunID: "r\xff", Key: "k"},
	} {
		err := j.Record(ctx, []journal.Event{good, bad})
		require.ErrorIs(t, err, journal.ErrInvalidEvent, name)
	}
	_, err := j.Run(ctx, "r11")
	require.ErrorIs(t, err, journal.ErrRunNotFound, "a refused batch writes nothing")

	// An error text is whatever a step returned: repaired, not refused.
	f := step("r11", "orders", "charge", 1, 1, 1, "failed", journal.Failed, "charge")
	f.Error = "bad \xff byte and \x00 NUL"
	record(t, j, good, f)
	r, err := j.Run(ctx, "r11")
	require.NoError(t, err)
	require.Equal(t, "bad \uFFFD byte and \uFFFD NUL", r.Error)

	runs, err := j.Runs(ctx, journal.Query{Flow: "no such flow"})
	require.NoError(t, err)
	require.NotNil(t, runs, "no runs is an empty list, not nil (JSON [] rather than null)")
	require.Empty(t, runs)
}

// runData: a journal keeps a run's data by (run, key), a later put
// replacing an earlier one, bytes exactly as given (not text), apart from
// other runs and keys; what was never put is ErrDataNotFound; a key no
// journal can keep is refused.
func runData(t *testing.T, j journal.Journal) {
	ctx := ctxOf(t)
	ds, ok := j.(journal.DataStore)
	require.True(t, ok, "%T keeps no run data (journal.DataStore)", j)
	_, err := ds.Data(ctx, "d1", "compensate/0/1/charge")
	require.ErrorIs(t, err, journal.ErrDataNotFound)

	blob := []byte{0xff, 0x00, 0xfe, 'x'}
	require.NoError(t, ds.PutData(ctx, "d1", "compensate/0/1/charge", blob))
	require.NoError(t, ds.PutData(ctx, "d2", "compensate/0/1/charge", []byte("other run")))
	require.NoError(t, ds.PutData(ctx, "d1", "compensate/0/2/ship", []byte("other key")))
	got, err := ds.Data(ctx, "d1", "compensate/0/1/charge")
	require.NoError(t, err)
	require.Equal(t, blob, got)

	big := []byte(strings.Repeat("a", 300_000))
	require.NoError(t, ds.PutData(ctx, "d1", "compensate/0/1/charge", big))
	got, err = ds.Data(ctx, "d1", "compensate/0/1/charge")
	require.NoError(t, err)
	require.Equal(t, big, got, "a later put replaces the earlier")
	got, err = ds.Data(ctx, "d2", "compensate/0/1/charge")
	require.NoError(t, err)
	require.Equal(t, "other run", string(got))

	for _, bad := range [][2]string{{"", "k"}, {"d1", ""}, {"d1", "k\x00"}, {"d\xff", "k"}} {
		require.ErrorIs(t, ds.PutData(ctx, bad[0], bad[1], nil), journal.ErrInvalidEvent, "%q", bad)
	}
}

// inputOfRunStartedAgain: a start of a later replay (the run started
// again) replaces the run's input; a late copy of the first start does not
// take it back.
func inputOfRunStartedAgain(t *testing.T, j journal.Journal) {
	ctx := ctxOf(t)
	first := start("a1", "orders", 0, `{"id":1}`)
	record(t, j, first, step("a1", "orders", "validate", 0, 1, 1, "completed", journal.Completed, "validate"))
	again := start("a1", "orders", 10, `{"id":2}`)
	again.Key, again.Seq, again.Replays = "start/1", journal.Seq(1, 0, 1, 0), 1
	record(t, j, again)
	r, err := j.Run(ctx, "a1")
	require.NoError(t, err)
	require.JSONEq(t, `{"id":2}`, string(r.Input))
	require.Equal(t, journal.Running, r.Status)
	require.Equal(t, 1, r.Replays)
	record(t, j, first)
	r, err = j.Run(ctx, "a1")
	require.NoError(t, err)
	require.JSONEq(t, `{"id":2}`, string(r.Input), "the first start, recorded late, does not take the input back")
	tl, err := j.Timeline(ctx, "a1")
	require.NoError(t, err)
	require.Len(t, tl, 3, "the timeline keeps both starts")
}

// versionOfRun: a run has the version of its start, a run started again
// the version of its later start (whichever order the starts arrive in),
// a run of an event with none has none, and a query by version keeps the
// runs started on it.
func versionOfRun(t *testing.T, j journal.Journal) {
	ctx := ctxOf(t)
	first := start("v1", "orders", 0, `{"id":1}`)
	first.Version = "aaa"
	record(t, j, first, step("v1", "orders", "validate", 0, 1, 1, "completed", journal.Running, "charge"))
	r, err := j.Run(ctx, "v1")
	require.NoError(t, err)
	require.Equal(t, "aaa", r.Version)
	again := start("v1", "orders", 10, `{"id":2}`)
	again.Key, again.Seq, again.Replays, again.Version = "start/1", journal.Seq(1, 0, 1, 0), 1, "bbb"
	record(t, j, again)
	record(t, j, first)
	r, err = j.Run(ctx, "v1")
	require.NoError(t, err)
	require.Equal(t, "bbb", r.Version, "started again on bbb; the first start, recorded late, does not take it back")
	other := start("v2", "orders", 20, `{"id":3}`)
	other.Version = "aaa"
	record(t, j, other, step("v3", "orders", "validate", 0, 1, 21, "completed", journal.Running, "charge"))
	r, err = j.Run(ctx, "v3")
	require.NoError(t, err)
	require.Empty(t, r.Version, "a run known only from a step has no version")
	for version, want := range map[string][]string{"aaa": {"v2"}, "bbb": {"v1"}, "ccc": {}} {
		runs, err := j.Runs(ctx, journal.Query{Flow: "orders", Version: version})
		require.NoError(t, err)
		require.Equal(t, want, runIDs(runs), version)
		runs, err = j.Runs(ctx, journal.Query{Version: version, Statuses: []journal.Status{journal.Running}, ErrorContains: ""})
		require.NoError(t, err)
		require.Equal(t, want, runIDs(runs), "%s, by status", version)
	}
}

// wait is an event holding the run on the ladder until due.
func wait(run, flow string, s, due int) journal.Event {
	d := at(due)
	return journal.Event{RunID: run, Flow: flow, Key: "delay/ship", Seq: journal.Seq(0, 3, 0, 0), Kind: journal.KindDelay,
		Step: "ship", Outcome: "waiting", StartedAt: at(s), EndedAt: at(s), DueAt: &d, Status: journal.Waiting, RunStep: "ship"}
}

func soonestDueFirst(t *testing.T, j journal.Journal) {
	ctx := ctxOf(t)
	// Started in one order, due in another: the runs started last are not
	// the ones due first.
	record(t, j, start("d-a", "orders", 0, `{}`), wait("d-a", "orders", 1, 500))
	record(t, j, start("d-b", "orders", 10, `{}`), wait("d-b", "orders", 11, 100))
	held := step("d-c", "orders", "ship", 2, 1, 21, "failed", journal.Failed, "ship")
	held.Error, held.DeadLetter = "no courier", "orders.ship.dlq"
	hold := at(300)
	held.DueAt = &hold
	record(t, j, start("d-c", "orders", 20, `{}`), held)
	record(t, j, start("d-d", "orders", 30, `{}`), step("d-d", "orders", "ship", 2, 1, 31, "completed", journal.Completed, "ship"))
	record(t, j, start("d-e", "orders", 40, `{}`), wait("d-e", "orders", 41, 100))
	record(t, j, start("d-f", "refunds", 50, `{}`), wait("d-f", "refunds", 51, 50))
	waitingOrHeld := []journal.Status{journal.Waiting, journal.Failed}
	for _, c := range []struct {
		name string
		q    journal.Query
		want []string
	}{
		{"every run with a due time; a tie by id", journal.Query{Order: journal.SoonestDue}, []string{"d-f", "d-b", "d-e", "d-c", "d-a"}},
		{"the limit keeps the soonest", journal.Query{Order: journal.SoonestDue, Statuses: waitingOrHeld, Limit: 3}, []string{"d-f", "d-b", "d-e"}},
		{"of a flow", journal.Query{Order: journal.SoonestDue, Flow: "orders", Statuses: waitingOrHeld, Limit: 2}, []string{"d-b", "d-e"}},
		{"held only", journal.Query{Order: journal.SoonestDue, Statuses: []journal.Status{journal.Failed}}, []string{"d-c"}},
		{"with an error", journal.Query{Order: journal.SoonestDue, ErrorContains: "COURIER"}, []string{"d-c"}},
		{"started since", journal.Query{Order: journal.SoonestDue, Since: at(15)}, []string{"d-f", "d-e", "d-c"}},
		{"started before", journal.Query{Order: journal.SoonestDue, Flow: "orders", Before: at(15)}, []string{"d-b", "d-a"}},
		{"newest first is still the default", journal.Query{Statuses: waitingOrHeld, Limit: 2}, []string{"d-f", "d-e"}},
	} {
		got, err := j.Runs(ctx, c.q)
		require.NoError(t, err, c.name)
		require.Equal(t, c.want, runIDs(got), c.name)
		if c.q.Order == journal.SoonestDue {
			for _, r := range got {
				require.NotNil(t, r.DueAt, "%s: %s", c.name, r.ID)
			}
		}
	}
}

// runIDs are the ids of runs, in order.
func runIDs(runs []journal.Run) []string {
	out := make([]string, len(runs))
	for i, r := range runs {
		out[i] = r.ID
	}
	return out
}

// prefixRuns are the ids runsByIDPrefix and resolvingShortenedID record:
// prefixes of each other, and runes whose successor is a boundary case of
// byte order (the last two-byte rune, the rune before the surrogates, the
// last rune).
var prefixRuns = []string{"ab", "abc", "abd", "b", "a\u00ff", "a\u0100", "é1", "é2", "ê", "\ud7ffx", "\ue000", "z\U0010ffff1", "{"}

func recordPrefixRuns(t *testing.T, j journal.Journal) {
	for i, id := range prefixRuns {
		record(t, j, start(id, "orders", i, `{}`))
	}
}

func runsByIDPrefix(t *testing.T, j journal.Journal) {
	ctx := ctxOf(t)
	recordPrefixRuns(t, j)
	for _, c := range []struct {
		prefix string
		limit  int
		want   []string
	}{
		{"ab", 0, []string{"ab", "abc", "abd"}},
		{"ab", 2, []string{"ab", "abc"}},
		{"abc", 0, []string{"abc"}},
		{"a", 0, []string{"ab", "abc", "abd", "a\u00ff", "a\u0100"}},
		{"a\u00ff", 0, []string{"a\u00ff"}},
		{"é", 0, []string{"é1", "é2"}},
		{"\ud7ff", 0, []string{"\ud7ffx"}},
		{"z\U0010ffff", 0, []string{"z\U0010ffff1"}},
		{"x", 0, []string{}},
		{"", 3, []string{"ab", "abc", "abd"}},
	} {
		got, err := j.RunsByIDPrefix(ctx, c.prefix, c.limit)
		require.NoError(t, err, "%q", c.prefix)
		require.NotNil(t, got, "%q: no runs is an empty list, not nil", c.prefix)
		require.Equal(t, c.want, runIDs(got), "prefix %q limit %d", c.prefix, c.limit)
	}
	got, err := j.RunsByIDPrefix(ctx, "abc", 0)
	require.NoError(t, err)
	require.Equal(t, "orders", got[0].Flow, "the whole run")
	require.Equal(t, journal.Running, got[0].Status)
}

func resolvingShortenedID(t *testing.T, j journal.Journal) {
	ctx := ctxOf(t)
	recordPrefixRuns(t, j)
	for id, want := range map[string]string{
		"abc": "abc", "ab": "ab", "abd": "abd", "b": "b", "é1": "é1", "\ud7ff": "\ud7ffx", "z": "z\U0010ffff1",
	} {
		r, err := journal.Resolve(ctx, j, id)
		require.NoError(t, err, "%q", id)
		require.Equal(t, want, r.ID, "%q: a full id is that run even when it begins others; a prefix of one run is that run", id)
		require.Equal(t, "orders", r.Flow)
	}
	for _, id := range []string{"nope", "", "abcd"} {
		_, err := journal.Resolve(ctx, j, id)
		require.ErrorIs(t, err, journal.ErrRunNotFound, "%q", id)
	}
	_, err := journal.Resolve(ctx, j, "é")
	require.ErrorIs(t, err, journal.ErrAmbiguousID)
	require.ErrorContains(t, err, `"é" begins the ids of 2 runs: é1, é2 (give more of the id)`)
	_, err = journal.Resolve(ctx, j, "a")
	require.ErrorIs(t, err, journal.ErrAmbiguousID)
	require.ErrorContains(t, err, `"a" begins the ids of 5 runs: ab, abc, abd, aÿ, aĀ (give more of the id)`)
	record(t, j, start("a9", "orders", 99, `{}`))
	_, err = journal.Resolve(ctx, j, "a")
	require.ErrorContains(t, err, `"a" begins the ids of more than 5 runs, among them a9, ab, abc, abd, aÿ (give more of the id)`)
}

// cancelledSince: a CancelFeed gives the runs cancelled at or after a
// time, those that ended first first, at most the limit; runs that ended
// otherwise, or are still running, are not among them.
func cancelledSince(t *testing.T, j journal.Journal) {
	feed, ok := j.(journal.CancelFeed)
	if !ok {
		t.Skipf("%T is no CancelFeed", j)
	}
	ctx := ctxOf(t)
	cancel := func(run string, s int) journal.Event {
		return journal.Event{RunID: run, Flow: "orders", Key: "cancel/0", Kind: journal.KindCancel, Outcome: "cancelled by ops",
			Error: "cancelled by ops", StartedAt: at(s), EndedAt: at(s), Status: journal.Cancelled, RunStep: "validate",
			Seq: journal.Seq(0, journal.CancelledStage, 0, 0)}
	}
	record(t, j, start("c1", "orders", 0, `{}`), start("c2", "orders", 0, `{}`), start("c3", "orders", 0, `{}`), start("c4", "orders", 0, `{}`))
	record(t, j, cancel("c2", 20), cancel("c1", 10),
		step("c3", "orders", "validate", 0, 1, 15, "completed", journal.Completed, "validate"))
	// A step that was in flight, recorded after the cancellation, leaves
	// the run cancelled.
	record(t, j, step("c1", "orders", "validate", 0, 1, 30, "completed", journal.Running, "charge"))
	ids := func(runs []journal.Run) []string {
		out := []string{}
		for _, r := range runs {
			out = append(out, r.ID)
		}
		return out
	}
	got, err := feed.CancelledSince(ctx, at(10), 10)
	require.NoError(t, err)
	require.Equal(t, []string{"c1", "c2"}, ids(got), "the cancelled runs, those that ended first first")
	require.Equal(t, "cancelled by ops", got[0].Error)
	got, err = feed.CancelledSince(ctx, at(11), 10)
	require.NoError(t, err)
	require.Equal(t, []string{"c2"}, ids(got))
	got, err = feed.CancelledSince(ctx, at(0), 1)
	require.NoError(t, err)
	require.Equal(t, []string{"c1"}, ids(got), "at most the limit")
	r, err := j.Run(ctx, "c1")
	require.NoError(t, err)
	require.Equal(t, journal.Cancelled, r.Status)
}

// stepInputs: a journal that keeps steps' inputs (journal.StepInputs)
// gives, per step, the input of its latest event that had one (a later
// replay's over an earlier attempt's), the size of one too large to keep
// without it, and none of a step whose events had none; the timeline does
// not carry them; a key recorded again replaces its input; an input over
// MaxStepInput is refused.
func stepInputs(t *testing.T, j journal.Journal) {
	si, ok := j.(journal.StepInputs)
	if !ok {
		t.Skipf("%T keeps no step inputs", j)
	}
	ctx := ctxOf(t)
	with := func(e journal.Event, input, state string) journal.Event {
		e.StepInput, e.StepState, e.InputSize = []byte(input), state, len(input)+len(state)
		return e
	}
	_, err := si.StepInputs(ctx, "nobody")
	require.ErrorIs(t, err, journal.ErrRunNotFound)

	record(t, j, start("in1", "orders", 0, `{"id":1}`))
	validate := with(step("in1", "orders", "validate", 0, 1, 1, "completed", journal.Running, "charge"), `{"id":1}`, "")
	chargeRetried := with(step("in1", "orders", "charge", 1, 1, 2, "retried", journal.Running, "charge"), `{"id":1,"n":1}`, `{"run":"s1"}`)
	charge := with(step("in1", "orders", "charge", 1, 2, 3, "completed", journal.Running, "ship"), `{"id":1,"n":2}`, `{"run":"s2"}`)
	big := step("in1", "orders", "ship", 2, 1, 4, "completed", journal.Completed, "ship")
	big.InputSize = journal.MaxStepInput + 1
	skip := journal.Event{RunID: "in1", Flow: "orders", Key: "skip/0/3", Seq: journal.Seq(0, 4, 0, 1), Kind: journal.KindSkip,
		Step: "notify", Outcome: "skipped", StartedAt: at(5), EndedAt: at(5)}
	record(t, j, validate, chargeRetried, charge, big, skip)

	got, err := si.StepInputs(ctx, "in1")
	require.NoError(t, err)
	require.Len(t, got, 3, "validate, charge and ship have inputs; the skipped step none")
	require.Equal(t, []string{"validate", "charge", "ship"}, []string{got[0].Step, got[1].Step, got[2].Step})
	require.JSONEq(t, `{"id":1}`, string(got[0].Input))
	require.True(t, got[0].Kept())
	require.Equal(t, `{"id":1,"n":2}`, string(got[1].Input), "the latest attempt's")
	require.Equal(t, `{"run":"s2"}`, got[1].State)
	require.Equal(t, charge.Key, got[1].Key)
	require.Equal(t, 2, got[1].Attempt)
	require.True(t, got[1].At.Equal(at(3)), "at %s", got[1].At)
	require.False(t, got[2].Kept(), "an input too large is not kept")
	require.Equal(t, journal.MaxStepInput+1, got[2].Size)

	tl, err := j.Timeline(ctx, "in1")
	require.NoError(t, err)
	for _, e := range tl {
		require.Nil(t, e.StepInput, "the timeline does not carry inputs (%s)", e.Key)
		require.Empty(t, e.StepState)
	}

	// A later replay's input of a step is the one; a key recorded again
	// replaces its input.
	again := with(step("in1", "orders", "charge", 1, 1, 10, "completed", journal.Running, "ship"), `{"id":1,"n":3}`, "")
	again.Key, again.Seq, again.Replays = "charge/r1/1", journal.Seq(1, 2, 1, 2), 1
	record(t, j, again)
	record(t, j, with(validate, `{"id":1,"v":2}`, ""))
	got, err = si.StepInputs(ctx, "in1")
	require.NoError(t, err)
	require.Len(t, got, 3)
	require.Equal(t, []string{"validate", "ship", "charge"}, []string{got[0].Step, got[1].Step, got[2].Step}, "in Seq order")
	require.Equal(t, `{"id":1,"v":2}`, string(got[0].Input))
	require.Equal(t, `{"id":1,"n":3}`, string(got[2].Input))
	require.Equal(t, 1, got[2].Replays)

	tooBig := with(step("in1", "orders", "ship", 2, 2, 11, "completed", journal.Completed, "ship"), strings.Repeat("x", journal.MaxStepInput+1), "")
	require.ErrorIs(t, j.Record(ctx, []journal.Event{tooBig}), journal.ErrInvalidEvent)
}
