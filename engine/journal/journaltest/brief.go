package journaltest

import (
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/acemq/acemq-flow/engine/journal"
)

// Brief runs the journal.BriefTimeline suite against the journals open
// returns, which must implement it: a run with two forks (one named with
// LIKE's wildcards), branches numbered 1 and 12 (one key's prefix of the
// other's), branch compensations and the run's own. BriefTimeline has
// every event Timeline has, the run's own whole and in order and the
// branches' brief; BranchEvents has exactly the named branches' events,
// whole, in Timeline's order.
func Brief(t *testing.T, open Open) {
	t.Parallel()
	j := open(t)
	bt, ok := j.(journal.BriefTimeline)
	require.True(t, ok, "%T is a journal.BriefTimeline", j)
	ctx := ctxOf(t)
	const run, flow = "brief-1", "orders"
	ev := func(key string, seq int64, kind journal.Kind, step, outcome string) journal.Event {
		return journal.Event{RunID: run, Flow: flow, Key: key, Seq: seq, Kind: kind, Step: step, Outcome: outcome,
			StartedAt: at(int(seq % 50)), EndedAt: at(int(seq%50) + 1), Queue: flow + "." + step, Attempt: 1}
	}
	own := []journal.Event{
		ev("start", 1, journal.KindStart, "", "started"),
		ev("step/0/1/1", 2, journal.KindStep, "each", "forked: 13 items, 2 in flight"),
		ev("join/0/1/each/step/0/1/1", 40, journal.KindStep, "each", "completed"),
		ev("step/0/2/1", 41, journal.KindStep, "a_b", "forked: 2 branches"),
		ev("compensation/0/0/1", 60, journal.KindCompensation, "charge", "compensated"),
	}
	own[0].Status, own[0].Input = journal.Running, []byte(`{"n":13}`)
	branch := map[journal.BranchRef][]journal.Event{
		{Join: "0/1/each", Branch: 1}: {
			ev("branch/0/1/each/1/step/0/0/1", 10, journal.KindStep, "item", "completed"),
			ev("arrived/0/1/each/1", 20, journal.KindStep, "each", "item 1 arrived"),
		},
		{Join: "0/1/each", Branch: 12}: {
			ev("branch/0/1/each/12/step/0/0/1", 11, journal.KindStep, "item", "failed"),
			ev("compensation/0/0/1/each/12/0/1", 21, journal.KindCompensation, "item", "compensated"),
		},
		{Join: "0/2/a_b", Branch: 1}: {
			ev("branch/0/2/a_b/1/step/0/0/1", 42, journal.KindStep, "x", "completed"),
			ev("compensation/0/0/2/a_b/1/0/1", 50, journal.KindCompensation, "x", "compensated"),
		},
		{Join: "0/2/aXb", Branch: 1}: {
			ev("branch/0/2/aXb/1/step/0/0/1", 43, journal.KindStep, "x", "completed"),
			ev("compensation/0/0/2/aXb/1/0/1", 51, journal.KindCompensation, "x", "compensated"),
		},
	}
	all := append([]journal.Event{}, own...)
	for _, es := range branch {
		all = append(all, es...)
	}
	record(t, j, all...)
	whole, err := j.Timeline(ctx, run)
	require.NoError(t, err)
	require.Len(t, whole, len(all))

	brief, err := bt.BriefTimeline(ctx, run)
	require.NoError(t, err)
	require.Len(t, brief, len(whole), "every event, briefly or whole")
	var ownWhole, ownBrief []journal.Event
	briefOf := map[string]journal.Event{}
	for _, e := range brief {
		briefOf[e.Key] = e
	}
	for _, e := range whole {
		b, ok := briefOf[e.Key]
		require.True(t, ok, "event %q is in the brief timeline", e.Key)
		if isBranchStep(e.Key) {
			require.Equal(t, journal.Event{RunID: run, Key: e.Key, Kind: e.Kind, Step: e.Step, Outcome: e.Outcome, Seq: e.Seq}, b,
				"a branch's event is brief")
			continue
		}
		ownWhole = append(ownWhole, e)
	}
	for _, e := range brief {
		if !isBranchStep(e.Key) {
			ownBrief = append(ownBrief, e)
		}
	}
	require.Equal(t, ownWhole, ownBrief, "the rest whole, in order")

	inOrder := func(refs ...journal.BranchRef) []journal.Event {
		keys := map[string]bool{}
		for _, r := range refs {
			for _, e := range branch[r] {
				keys[e.Key] = true
			}
		}
		out := []journal.Event{}
		for _, e := range whole {
			if keys[e.Key] {
				out = append(out, e)
			}
		}
		return out
	}
	for _, refs := range [][]journal.BranchRef{
		{{Join: "0/1/each", Branch: 1}},
		{{Join: "0/1/each", Branch: 12}},
		{{Join: "0/1/each", Branch: 12}, {Join: "0/1/each", Branch: 1}},
		{{Join: "0/2/a_b", Branch: 1}},
		{{Join: "0/1/each", Branch: 1}, {Join: "0/2/a_b", Branch: 1}, {Join: "0/2/aXb", Branch: 1}},
		{{Join: "0/1/each", Branch: 5}},
		{},
	} {
		got, err := bt.BranchEvents(ctx, run, refs)
		require.NoError(t, err)
		require.Equal(t, inOrder(refs...), got, "the events of %v", refs)
	}

	_, err = bt.BriefTimeline(ctx, "no-such-run")
	require.ErrorIs(t, err, journal.ErrRunNotFound)
	got, err := bt.BranchEvents(ctx, "no-such-run", []journal.BranchRef{{Join: "0/1/each", Branch: 1}})
	require.NoError(t, err)
	require.Empty(t, got, "no events of a run that is not there")
}

// isBranchStep says whether key is one BriefTimeline gives briefly.
func isBranchStep(key string) bool {
	return len(key) > 7 && (key[:7] == "branch/" || key[:8] == "arrived/")
}
