package cli

import (
	"bytes"
	"context"
	"encoding/json"
	"regexp"
	"strings"
	"testing"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/spf13/cobra"
	"github.com/stretchr/testify/require"

	"github.com/acemq/acemq-flow/engine/journal"
	"github.com/acemq/acemq-flow/engine/timeline"
	"github.com/acemq/acemq-flow/engine/timeline/timelinetest"
	"github.com/acemq/acemq-flow/internal/testenv"
	"github.com/acemq/acemq-flow/persistence"
)

// showRun is what runs show prints for the run of events (the run's own
// fields left out: they hold the time now), each line without the spaces
// a table pads its last cells with.
func showRun(t *testing.T, events []journal.Event, mode string, only ...string) string {
	t.Helper()
	c, err := parseBranchChoice(mode, only)
	require.NoError(t, err)
	own, forks := timeline.Group(events)
	for _, f := range forks {
		c.choose(f)
	}
	var buf bytes.Buffer
	cmd := &cobra.Command{}
	cmd.SetOut(&buf)
	require.NoError(t, writeRun(cmd, journal.Run{ID: "r-1", Flow: "unit.shop", Status: journal.Compensated}, own, forks, c.mode == branchesAll))
	_, timeline, ok := strings.Cut(buf.String(), "\n\n")
	require.True(t, ok, buf.String())
	lines := strings.Split(timeline, "\n")
	for i, l := range lines {
		lines[i] = strings.TrimRight(l, " ")
	}
	return strings.Join(lines, "\n")
}

// TestRunsShowGroupsBranches: a run's own events come first (the fork
// and the join among them, the compensation of many items shortened), then
// each fork: what it is, how its branches stand, and, of a ForEach of more
// than a few items, its first and last branches and the one given up.
func TestRunsShowGroupsBranches(t *testing.T) {
	t.Parallel()
	events := timelinetest.ForkRun("r-1", "unit.shop", 20, 12, time.Time{})
	const cause = `step "square": fatal: no square for you`
	require.Equal(t, `KIND          STEP      ATTEMPT  OUTCOME                        STARTED  ENDED  QUEUE                         DUE  ERROR
start                            started
step          validate  1        completed                                      unit.shop.validate
step          fulfil    1        forked: 2 branches                             unit.shop.fulfil
step          fulfil    1        completed                                      unit.shop.fulfil
step          each      1        forked: 20 items, 4 in flight                  unit.shop.each
compensation  square    1        compensated                                    unit.shop.compensate.square        `+cause+`
compensation  square    1        compensated                                    unit.shop.compensate.square        `+cause+`
compensation  square    1        compensated                                    unit.shop.compensate.square        `+cause+`
compensation  square             … 7 more compensated
compensation  square    1        compensated                                    unit.shop.compensate.square        `+cause+`
compensation  square    1        compensated                                    unit.shop.compensate.square        `+cause+`
compensation  reserve   1        compensated                                    unit.shop.compensate.reserve       `+cause+`

fork fulfil: parallel, 2 branches
  2 handed out, 2 arrived, 0 failed, 0 stopped, 0 running
BRANCH  STATUS   KIND  STEP     ATTEMPT  OUTCOME           STARTED  ENDED  QUEUE              DUE  ERROR
0       arrived  step  pick     1        completed                         unit.shop.pick
                 step  reserve  1        completed                         unit.shop.reserve
                 step  fulfil            branch 0 arrived                  unit.shop.fulfil
1       arrived  step  book     1        completed                         unit.shop.book
                 step  fulfil            branch 1 arrived                  unit.shop.fulfil

fork each: for each of 20 items, at most 4 in flight
  16 handed out, 4 not handed out, 12 arrived, 1 failed, 3 stopped, 0 running
  showing 0-2, 12-15 of 16 branches; more with --branches all|failed or --branch N|A-B|each:N
BRANCH  STATUS   KIND  STEP    ATTEMPT  OUTCOME                               STARTED  ENDED  QUEUE             DUE  ERROR
0       arrived  step  square  1        completed                                             unit.shop.square
                 step  each             item 0 arrived                                        unit.shop.each
1       arrived  step  square  1        completed                                             unit.shop.square
                 step  each             item 1 arrived                                        unit.shop.each
2       arrived  step  square  1        completed                                             unit.shop.square
                 step  each             item 2 arrived                                        unit.shop.each
12      failed   step  square  1        failed                                                unit.shop.square       `+cause+`
13      stopped  step  square  1        stopped: another branch was given up                  unit.shop.square
14      stopped  step  square  1        stopped: another branch was given up                  unit.shop.square
15      stopped  step  square  1        stopped: another branch was given up                  unit.shop.square
`, showRun(t, events, branchesSome))

	all := showRun(t, events, branchesAll)
	require.Len(t, regexp.MustCompile(`(?m)^\d+\s+(arrived|failed|stopped)\s`).FindAllString(all, -1), 2+16, "every branch")
	require.Equal(t, 12, strings.Count(all, "compensation  square    1        compensated"), "every event of the run")
	require.NotContains(t, all, "… ")
	require.NotContains(t, all, "showing")

	failed := showRun(t, events, branchesFailed)
	require.Contains(t, failed, "showing 12-15 of 16 branches")
	require.Contains(t, failed, "showing none of 2 branches", "the Parallel's branches all arrived")
	require.Contains(t, failed, "\n12      failed   ")

	none := showRun(t, events, branchesNone)
	require.NotContains(t, none, "BRANCH")
	require.Contains(t, none, "16 handed out, 4 not handed out, 12 arrived, 1 failed, 3 stopped, 0 running\n  showing none of 16 branches")

	picked := showRun(t, events, branchesSome, "each:5-6", "1")
	require.Contains(t, picked, "showing 1 of 2 branches")
	require.Contains(t, picked, "showing 1, 5-6 of 16 branches")
	require.Contains(t, picked, "\n1       arrived  step  book ")
	require.Contains(t, picked, "\n5       arrived  step  square")
	require.NotContains(t, picked, "\n0  ")
}

// TestRunsShowPagesALargeForEach: a ForEach of 100,000 items, given up at
// item 50,000, prints a screenful, not 200,000 lines: its summary, its
// edges and the item given up, the compensation of 50,000 items in a few
// lines; --branch shows any item.
func TestRunsShowPagesALargeForEach(t *testing.T) {
	t.Parallel()
	events := timelinetest.ForkRun("r-1", "unit.shop", 100_000, 50_000, time.Time{})
	require.Greater(t, len(events), 150_000)
	began := time.Now()
	out := showRun(t, events, branchesSome)
	require.Less(t, time.Since(began), 10*time.Second)
	require.Less(t, len(strings.Split(out, "\n")), 60, out)
	require.Contains(t, out, "… 49995 more compensated")
	require.Contains(t, out, "fork each: for each of 100000 items, at most 4 in flight\n"+
		"  50004 handed out, 49996 not handed out, 50000 arrived, 1 failed, 3 stopped, 0 running\n"+
		"  showing 0-2, 50000-50003 of 50004 branches;")
	require.Regexp(t, `(?m)^50000\s+failed\s+step\s+square\s+1\s+failed\s`, out)

	out = showRun(t, events, branchesSome, "each:70000", "49999")
	require.Contains(t, out, "showing 49999 of 50004 branches", "item 70000 was never handed out")
	require.Contains(t, out, "showing none of 2 branches", "the Parallel has no branch 49999")
	require.Regexp(t, `(?m)^49999\s+arrived\s+step\s+square\s`, out)
	require.Contains(t, out, "item 49999 arrived")
}

func TestParseBranchChoice(t *testing.T) {
	t.Parallel()
	c, err := parseBranchChoice(" ALL ", []string{"5", "each:100-199", "fulfil:0"})
	require.NoError(t, err)
	require.Equal(t, branchChoice{mode: branchesAll, ranges: []branchRange{{"", 5, 5}, {"each", 100, 199}, {"fulfil", 0, 0}}}, c)
	for _, bad := range []struct{ mode, branch, want string }{
		{"most", "", `--branches "most": want some, all, failed or none`},
		{"some", "-1", `--branch "-1": want a branch's index`},
		{"some", "9-3", `--branch "9-3"`},
		{"some", "each:", `--branch "each:"`},
		{"some", "x", `--branch "x"`},
		{"some", "99999999999999999999", `--branch "99999999999999999999"`},
	} {
		var specs []string
		if bad.branch != "" {
			specs = []string{bad.branch}
		}
		_, err := parseBranchChoice(bad.mode, specs)
		require.ErrorIs(t, err, ErrInvalidBranches, bad.want)
		require.ErrorContains(t, err, bad.want)
	}
}

// TestRunsShowBranchesOnTheDatabase: runs show reads a forked run's
// timeline from PostgreSQL and groups it by branch; its JSON keeps the
// whole timeline in "steps" and gives the forks with the branches asked
// for; a run that never forked has no "forks".
func TestRunsShowBranchesOnTheDatabase(t *testing.T) {
	t.Parallel()
	dbURL := testSchema(t)
	env := map[string]string{"ACEMQ_DATABASE_URL": dbURL}
	r := execute(t, env, "migrate")
	require.Zero(t, r.code, r.stderr)
	flow := testenv.Name(t, "flow")
	id := testenv.Name(t, "run")
	events := timelinetest.ForkRun(id, flow, 20, 12, time.Now().Add(-time.Minute))
	ctx, cancel := context.WithTimeout(t.Context(), 10*time.Second)
	defer cancel()
	pool, err := pgxpool.New(ctx, dbURL)
	require.NoError(t, err)
	defer pool.Close()
	j, err := persistence.NewSQLJournal(pool, persistence.SQLJournalConfig{})
	require.NoError(t, err)
	require.NoError(t, j.Record(ctx, events))
	plain := testenv.Name(t, "run")
	seedFailedRunID(t, dbURL, plain, flow, "card declined")

	r = execute(t, env, "runs", "show", id)
	require.Zero(t, r.code, r.stderr)
	require.Regexp(t, `(?m)^status\s+compensated$`, r.stdout)
	require.Contains(t, r.stdout, "\nfork fulfil: parallel, 2 branches\n  2 handed out, 2 arrived, 0 failed, 0 stopped, 0 running\n")
	require.Contains(t, r.stdout, "\nfork each: for each of 20 items, at most 4 in flight\n"+
		"  16 handed out, 4 not handed out, 12 arrived, 1 failed, 3 stopped, 0 running\n"+
		"  showing 0-2, 12-15 of 16 branches; more with --branches all|failed or --branch N|A-B|each:N\n")
	require.Regexp(t, `(?m)^12\s+failed\s+step\s+square\s+1\s+failed\s.*no square for you$`, r.stdout)
	require.Contains(t, r.stdout, "… 7 more compensated")

	r = execute(t, env, "runs", "show", id, "--branches", "all")
	require.Zero(t, r.code, r.stderr)
	require.Len(t, regexp.MustCompile(`(?m)^\d+\s+(arrived|failed|stopped)\s`).FindAllString(r.stdout, -1), 2+16)

	r = execute(t, env, "runs", "show", id, "-o", "json", "--branch", "each:12")
	require.Zero(t, r.code, r.stderr)
	var got struct {
		RunID string            `json:"run_id"`
		Steps []json.RawMessage `json:"steps"`
		Forks []struct {
			Step      string `json:"step"`
			Join      string `json:"join"`
			Kind      string `json:"kind"`
			Total     int    `json:"total"`
			InFlight  int    `json:"in_flight"`
			HandedOut int    `json:"handed_out"`
			Arrived   int    `json:"arrived"`
			Failed    int    `json:"failed"`
			Stopped   int    `json:"stopped"`
			Hidden    int    `json:"hidden"`
			Branches  []struct {
				Branch int `json:"branch"`
				Status string
				Steps  []struct {
					Step    string `json:"step"`
					Outcome string `json:"outcome"`
					Error   string `json:"error"`
				} `json:"steps"`
			} `json:"branches"`
		} `json:"forks"`
	}
	require.NoError(t, json.Unmarshal([]byte(r.stdout), &got), r.stdout)
	require.Equal(t, id, got.RunID)
	require.Len(t, got.Steps, len(events), "steps is the whole timeline")
	require.Len(t, got.Forks, 2)
	require.Equal(t, "fulfil", got.Forks[0].Step)
	require.Empty(t, got.Forks[0].Branches)
	require.NotNil(t, got.Forks[0].Branches, "an empty list, not null")
	require.Equal(t, 2, got.Forks[0].Hidden)
	each := got.Forks[1]
	require.Equal(t, []any{"each", "0/2/each", "foreach", 20, 4, 16, 12, 1, 3, 15},
		[]any{each.Step, each.Join, each.Kind, each.Total, each.InFlight, each.HandedOut, each.Arrived, each.Failed, each.Stopped, each.Hidden})
	require.Len(t, each.Branches, 1)
	require.Equal(t, 12, each.Branches[0].Branch)
	require.Equal(t, "failed", each.Branches[0].Status)
	require.Len(t, each.Branches[0].Steps, 1)
	require.Equal(t, "square", each.Branches[0].Steps[0].Step)
	require.Contains(t, each.Branches[0].Steps[0].Error, "no square for you")

	r = execute(t, env, "runs", "show", plain, "-o", "json")
	require.Zero(t, r.code, r.stderr)
	require.NotContains(t, r.stdout, `"forks"`)
	r = execute(t, env, "runs", "show", plain)
	require.Zero(t, r.code, r.stderr)
	require.NotContains(t, r.stdout, "fork ")

	r = execute(t, env, "runs", "show", id, "--branches", "most")
	require.Equal(t, 1, r.code)
	require.Empty(t, r.stdout)
	require.Contains(t, r.stderr, `runs show: invalid branch selection: --branches "most": want some, all, failed or none`)
}
