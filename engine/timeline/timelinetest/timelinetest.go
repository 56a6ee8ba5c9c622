// Package timelinetest builds the timelines the engine records for runs
// that fork, for the tests of what shows them (package timeline, `runs
// show`, the dashboard) without running the engine: a hundred thousand
// items' timeline takes a second, not a benchmark's run.
package timelinetest

import (
	"fmt"
	"time"

	"github.com/acemq/acemq-flow/engine/journal"
)

// ForkRun returns the timeline the engine records for run runID of flow
// (keys, order and outcomes as engine/fork.go writes them): validate;
// fulfil, a Parallel of two branches (pick and reserve; book) that both
// arrived and whose join fired; each, a ForEach of items items, 4 in
// flight, of which those before failAt arrived, item failAt was given up
// and the 3 in flight with it stopped (the rest never handed out); and the
// run compensated: every arrived item's square, then reserve. at is when
// the run started (zero: every event at the zero time). With failAt at
// items or beyond, every item arrives, the join fires and the run
// completes at notify. It refuses nothing: any counts give a timeline.
func ForkRun(runID, flow string, items, failAt int, at time.Time) []journal.Event {
	clock := at
	tick := func() time.Time {
		if at.IsZero() {
			return at
		}
		clock = clock.Add(time.Millisecond)
		return clock
	}
	q := func(step string) string { return flow + "." + step }
	ev := func(e journal.Event) journal.Event {
		e.RunID, e.Flow = runID, flow
		e.StartedAt = tick()
		e.EndedAt = e.StartedAt
		return e
	}
	step := func(key string, seq int64, name, outcome string) journal.Event {
		return ev(journal.Event{Key: key, Seq: seq, Kind: journal.KindStep, Step: name, Attempt: 1, Outcome: outcome, Queue: q(name)})
	}
	inBranch := func(join string, stage, b, pos int, name, outcome string) journal.Event {
		return step(fmt.Sprintf("branch/%s/%d/step/0/%d/1", join, b, pos), journal.Seq(0, stage, (pos+1)<<10|1, 2), name, outcome)
	}
	arrived := func(join string, stage, b int, fork, outcome string, last bool) journal.Event {
		e := step(fmt.Sprintf("branch/%s/%d/arrived/%s/%d", join, b, join, b), journal.Seq(0, stage, 0xbff, 3), fork, outcome)
		if last {
			e.Key, e.Seq = fmt.Sprintf("arrived/%s/%d", join, b), journal.Seq(0, stage, 0xffffe, 3)
		}
		e.Attempt = 0
		return e
	}
	running := func(e journal.Event, next string) journal.Event {
		e.Status, e.RunStep = journal.Running, next
		return e
	}
	start := ev(journal.Event{Key: "start", Seq: journal.Seq(0, 0, 1, 0), Kind: journal.KindStart, Outcome: "started",
		Status: journal.Running, RunStep: "validate", Input: []byte(fmt.Sprintf(`{"id":"o-1","amount":%d}`, items))})
	out := []journal.Event{
		start,
		running(step("step/0/0/1", journal.Seq(0, 1, 1, 2), "validate", "completed"), "fulfil"),
		running(step("step/0/1/1", journal.Seq(0, 2, 0, 1), "fulfil", "forked: 2 branches"), "fulfil"),
		inBranch("0/1/fulfil", 2, 1, 0, "book", "completed"),
		inBranch("0/1/fulfil", 2, 0, 0, "pick", "completed"),
		inBranch("0/1/fulfil", 2, 0, 1, "reserve", "completed"),
		arrived("0/1/fulfil", 2, 1, "fulfil", "branch 1 arrived", false),
		arrived("0/1/fulfil", 2, 0, "fulfil", "branch 0 arrived", true),
		running(step("join/0/1/fulfil/step/0/1/1", journal.Seq(0, 2, 0xfffff, 2), "fulfil", "completed"), "each"),
		running(step("step/0/2/1", journal.Seq(0, 3, 0, 1), "each", fmt.Sprintf("forked: %d items, %d in flight", items, min(4, items))), "each"),
	}
	last := min(items, failAt+4)
	for i := range last {
		switch {
		case i < failAt:
			out = append(out, inBranch("0/2/each", 3, i, 0, "square", "completed"))
		case i == failAt:
			e := inBranch("0/2/each", 3, i, 0, "square", "failed")
			e.Error, e.Status, e.RunStep = `step "square": fatal: no square for you`, journal.Compensating, "square"
			out = append(out, e)
		default:
			out = append(out, inBranch("0/2/each", 3, i, 0, "square", "stopped: another branch was given up"))
		}
	}
	for i := range min(items, failAt) {
		outcome := fmt.Sprintf("item %d arrived", i)
		out = append(out, arrived("0/2/each", 3, i, "each", outcome, failAt >= items && i == items-1))
	}
	if failAt >= items {
		return append(out,
			running(step("join/0/2/each/step/0/2/1", journal.Seq(0, 3, 0xfffff, 2), "each", "completed"), "notify"),
			func() journal.Event {
				e := step("step/0/3/1", journal.Seq(0, 4, 1, 2), "notify", "completed")
				e.Status, e.RunStep = journal.Completed, "notify"
				return e
			}())
	}
	comp := func(k int, name string, st journal.Status) journal.Event {
		e := ev(journal.Event{Key: fmt.Sprintf("compensation/0/%d/1", k), Seq: journal.Seq(0, journal.CompensationStage+k, 1, 2),
			Kind: journal.KindCompensation, Step: name, Attempt: 1, Outcome: "compensated", Queue: flow + ".compensate." + name,
			Status: st, RunStep: name, Error: `step "square": fatal: no square for you`})
		return e
	}
	for k := range failAt {
		out = append(out, comp(k, "square", journal.Compensating))
	}
	return append(out, comp(failAt, "reserve", journal.Compensated))
}
