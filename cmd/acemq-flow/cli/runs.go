package cli

import (
	"errors"
	"fmt"
	"io"
	"strconv"
	"strings"
	"time"

	"github.com/spf13/cobra"

	"github.com/acemq/acemq-flow/engine"
	"github.com/acemq/acemq-flow/engine/journal"
	"github.com/acemq/acemq-flow/engine/timeline"
)

// errorColumnWidth is how much of a run's error the runs table shows: the
// rest is one `runs show` away.
const errorColumnWidth = 60

// ErrInvalidStatus: --status named something that is not a run status.
var ErrInvalidStatus = errors.New("invalid run status")

func (a *app) runsCommand() *cobra.Command {
	cmd := &cobra.Command{
		Use:   "runs",
		Short: "List runs from the run journal, or show one run's timeline",
		Long: "Read the run journal. The journal is shared through the database (--database-url):\n" +
			"without one, runs are kept only in the memory of the worker that ran them, and these\n" +
			"commands refuse, since they could see none.",
	}
	cmd.AddCommand(a.runsListCommand(), a.runsShowCommand(), a.runsExportCommand())
	return cmd
}

func (a *app) runsListCommand() *cobra.Command {
	var (
		output   outputFormat
		flow     string
		statuses []string
		since    sinceFlag
		limit    int
		errText  string
		version  string
		reveal   bool
		where    string
		key      string
		idPrefix string
		until    sinceFlag
	)
	cmd := &cobra.Command{
		Use:   "list",
		Short: "List runs, newest first",
		Args:  cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			q, err := runsQuery(flow, statuses, since.since(time.Now()), limit, errText)
			if err != nil {
				return fmt.Errorf("runs list: %w", err)
			}
			q.Version, q.BusinessKey, q.IDPrefix, q.Before = version, key, idPrefix, until.since(time.Now())
			var w *journal.Where
			if where != "" {
				if w, err = journal.ParseWhere(where); err != nil {
					return fmt.Errorf("runs list: --where: %w", err)
				}
			}
			j, done, err := a.openRunsJournal(cmd)
			if err != nil {
				return err
			}
			defer done()
			found, err := journal.Find(cmd.Context(), j, q, w)
			if err != nil {
				return fmt.Errorf("runs list: %w", hintMigrate(a.name, err))
			}
			runs := found.Runs
			if found.Partial {
				fmt.Fprintf(cmd.ErrOrStderr(), "read the newest %d runs the journal selected and matched the rest of --where on them: older runs may match too (narrow --flow, --since or --until)\n", found.Scanned)
			}
			if runs == nil {
				runs = []journal.Run{}
			}
			if output == outputJSON {
				if !reveal {
					runs = a.redactRuns(runs)
				}
				return writeJSON(cmd.OutOrStdout(), runs)
			}
			if len(runs) == 0 {
				fmt.Fprintln(cmd.ErrOrStderr(), "no runs match")
				return nil
			}
			return writeRuns(cmd, runs, time.Now())
		},
	}
	addOutputFlag(cmd, &output)
	cmd.Flags().StringVar(&flow, "flow", "", "only runs of this flow")
	cmd.Flags().StringSliceVar(&statuses, "status", nil, "only runs in these statuses, comma-separated: "+statusList())
	cmd.Flags().Var(&since, "since", "only runs started this long ago or later (24h), or since a time (RFC 3339)")
	cmd.Flags().IntVar(&limit, "limit", journal.DefaultLimit, "at most this many runs")
	cmd.Flags().StringVar(&errText, "error", "", "only runs whose error contains this text (case insensitive)")
	cmd.Flags().StringVar(&version, "version", "", "only runs started on this version of their flow (flows list shows each flow's)")
	cmd.Flags().StringVar(&where, "where", "", `only runs this expr-lang condition holds for, over payload (the input as JSON), flow, status, key, id and started_at: 'payload.customer == "Ada" && status == "failed"'`)
	cmd.Flags().StringVar(&key, "key", "", "only runs with this business key (the flow's dsl.Key)")
	cmd.Flags().StringVar(&idPrefix, "id-prefix", "", "only runs whose id begins with this")
	cmd.Flags().Var(&until, "until", "only runs started before this long ago (1h), or before a time (RFC 3339)")
	addRevealFlag(cmd, &reveal)
	return cmd
}

// runsQuery checks the flags of runs list and makes them a query.
func runsQuery(flow string, statuses []string, since time.Time, limit int, errText string) (journal.Query, error) {
	q := journal.Query{Flow: flow, Since: since, Limit: limit, ErrorContains: errText}
	if limit < 1 {
		return q, fmt.Errorf("--limit %d: want at least 1", limit)
	}
	for _, s := range statuses {
		st := journal.Status(strings.ToLower(strings.TrimSpace(s)))
		if !st.Valid() {
			return q, fmt.Errorf("%w %q: want one of %s", ErrInvalidStatus, s, statusList())
		}
		q.Statuses = append(q.Statuses, st)
	}
	return q, nil
}

// statusList is every run status, comma-separated.
func statusList() string {
	all := journal.Statuses()
	s := make([]string, len(all))
	for i, st := range all {
		s[i] = string(st)
	}
	return strings.Join(s, ", ")
}

// writeRuns shows runs as a table: started in local time, how long a run
// took (or, still moving, how long it has been going), and until when a
// run waits (at its STEP: a delay, a signal's timeout, a hold for replay).
func writeRuns(cmd *cobra.Command, runs []journal.Run, now time.Time) error {
	t := newTable(cmd.OutOrStdout())
	t.row("RUN ID", "FLOW", "STATUS", "STEP", "STARTED", "DURATION", "DUE", "ERROR")
	for _, r := range runs {
		due := ""
		if r.DueAt != nil && (!r.Status.Stopped() || r.Status == journal.Failed) {
			due = localTimePtr(r.DueAt, timeLayout)
		}
		t.row(r.ID, r.Flow, string(r.Status), r.Step, localTime(r.StartedAt, timeLayout), runDuration(r, now), due, truncate(r.Error, errorColumnWidth))
	}
	return t.flush()
}

// runDuration is how long a stopped run took, or how long a moving one has
// been going ("so far").
func runDuration(r journal.Run, now time.Time) string {
	if r.EndedAt != nil {
		return shortDuration(r.EndedAt.Sub(r.StartedAt))
	}
	return shortDuration(now.Sub(r.StartedAt)) + " so far"
}

// runJSON is what `runs show --output json` prints: the run, its whole
// timeline, and, for a run that forked, each fork with the branches
// --branches and --branch choose.
type runJSON struct {
	journal.Run
	Steps []journal.Event  `json:"steps"`
	Forks []*timeline.Fork `json:"forks,omitempty"`
}

func (a *app) runsShowCommand() *cobra.Command {
	var (
		output   outputFormat
		branches string
		only     []string
		reveal   bool
	)
	cmd := &cobra.Command{
		Use:   "show <run-id>",
		Short: "Show a run and its timeline: every step attempt, skip, delay, compensation and replay, and each branch of its forks",
		Long: "Show a run and its timeline: every step attempt, skip, delay, compensation and replay.\n\n" +
			"A run that forked (a Parallel, a ForEach) shows its own events first, then each fork: how\n" +
			"many branches it has and how they stand (handed out, arrived, failed, stopped, running),\n" +
			"then its branches, each with its steps. A fork of more than " + strconv.Itoa(smallFork) + " branches shows its first\n" +
			"and last " + strconv.Itoa(edgeBranches) + " and at most " + strconv.Itoa(failedBranches) + " of those given up, and the run's own events that repeat\n" +
			"(the compensation of every item) are shortened; --branches all shows everything, --branches\n" +
			"failed the branches given up or stopped, --branch N (or A-B, or <fork>:N) the ones named.\n" +
			"Branches are numbered from 0, as the journal's \"item 0 arrived\" says. With --output json,\n" +
			"\"steps\" is the whole timeline and \"forks\" the forks with the branches chosen.\n\n" + runIDHelp,
		Args: cobra.ExactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			choice, err := parseBranchChoice(branches, only)
			if err != nil {
				return fmt.Errorf("runs show: %w", err)
			}
			j, done, err := a.openRunsJournal(cmd)
			if err != nil {
				return err
			}
			defer done()
			run, err := journal.Resolve(cmd.Context(), j, args[0])
			if err != nil {
				return fmt.Errorf("runs show: %w", hintMigrate(a.name, err))
			}
			if !reveal {
				run = a.redactRuns([]journal.Run{run})[0]
			}
			if output == outputJSON {
				// "steps" is the whole timeline.
				events, err := j.Timeline(cmd.Context(), run.ID)
				if err != nil {
					return fmt.Errorf("runs show: timeline: %w", hintMigrate(a.name, err))
				}
				if events == nil {
					events = []journal.Event{}
				}
				_, forks := timeline.Group(events)
				if err := a.chooseBranches(cmd, j, run.ID, forks, choice); err != nil {
					return err
				}
				return writeJSON(cmd.OutOrStdout(), runJSON{Run: run, Steps: events, Forks: forks})
			}
			// A person sees a page of each fork's branches: only those are
			// read whole.
			own, forks, err := timeline.Read(cmd.Context(), j, run.ID)
			if err != nil {
				return fmt.Errorf("runs show: timeline: %w", hintMigrate(a.name, err))
			}
			if err := a.chooseBranches(cmd, j, run.ID, forks, choice); err != nil {
				return err
			}
			return writeRun(cmd, run, own, forks, choice.mode == branchesAll)
		},
	}
	addOutputFlag(cmd, &output)
	cmd.Flags().StringVar(&branches, "branches", branchesSome, "which branches of a fork to show: some (a few of a large fork, and those given up), all, failed (given up or stopped), none")
	cmd.Flags().StringSliceVar(&only, "branch", nil, "show only these branches: an index (57), a range (100-199), either for one fork (each:57); repeat or comma-separate")
	addRevealFlag(cmd, &reveal)
	return cmd
}

// chooseBranches shows the branches of each fork that choice picks, with
// their whole events, and where each fork's join stands.
func (a *app) chooseBranches(cmd *cobra.Command, j journal.Journal, runID string, forks []*timeline.Fork, choice branchChoice) error {
	for _, f := range forks {
		choice.choose(f)
	}
	if err := timeline.Fill(cmd.Context(), j, runID, forks); err != nil {
		return fmt.Errorf("runs show: %w", hintMigrate(a.name, err))
	}
	if err := timeline.HandedOut(cmd.Context(), j, runID, forks); err != nil {
		return fmt.Errorf("runs show: %w", err)
	}
	return nil
}

// writeRun shows a run for a person: its fields, then its own timeline,
// then each of its forks (forks, from timeline.Group) with its branches
// chosen. Unless full, a run of alike events in the timeline (the
// compensation of every item of a large ForEach) is shortened.
func writeRun(cmd *cobra.Command, r journal.Run, own []journal.Event, forks []*timeline.Fork, full bool) error {
	out := cmd.OutOrStdout()
	t := newTable(out)
	t.row("run", r.ID)
	t.row("flow", r.Flow)
	t.row("status", string(r.Status))
	t.row("step", r.Step)
	if r.Version != "" {
		t.row("version", r.Version)
	}
	t.row("started", localTime(r.StartedAt, timeLayoutMillis))
	if r.EndedAt != nil {
		t.row("ended", localTimePtr(r.EndedAt, timeLayoutMillis)+" (took "+runDuration(r, time.Now())+")")
	} else {
		t.row("updated", localTime(r.UpdatedAt, timeLayoutMillis)+" ("+runDuration(r, time.Now())+")")
	}
	if r.DueAt != nil {
		t.row("due", localTimePtr(r.DueAt, timeLayoutMillis))
	}
	if r.Error != "" {
		t.row("error", r.Error)
	}
	if r.DeadLetter != "" {
		t.row("dead letter", r.DeadLetter)
	}
	if r.Replays > 0 {
		t.row("replays", strconv.Itoa(r.Replays))
	}
	if len(r.Input) > 0 {
		t.row("input", string(r.Input))
	}
	if err := t.flush(); err != nil {
		return err
	}
	if _, err := fmt.Fprintln(out); err != nil {
		return err
	}
	t = newTable(out)
	t.row("KIND", "STEP", "ATTEMPT", "OUTCOME", "STARTED", "ENDED", "QUEUE", "DUE", "ERROR")
	if !full {
		own = timeline.Shorten(own)
	}
	for _, e := range own {
		t.row(eventCells(e)...)
	}
	if err := t.flush(); err != nil {
		return err
	}
	for _, f := range forks {
		if err := writeFork(out, f); err != nil {
			return err
		}
	}
	return nil
}

// eventCells are an event's cells in a timeline table.
func eventCells(e journal.Event) []string {
	attempt := ""
	if e.Attempt > 0 {
		attempt = strconv.Itoa(e.Attempt)
	}
	return []string{string(e.Kind), e.Step, attempt, e.Outcome, localTime(e.StartedAt, timeLayoutMillis), localTime(e.EndedAt, timeLayoutMillis),
		e.Queue, localTimePtr(e.DueAt, timeLayoutMillis), truncate(e.Error, errorColumnWidth)}
}

// writeFork shows one fork of a run: what it is, how its branches stand,
// which of them follow, then those branches' events, branch by branch.
func writeFork(out io.Writer, f *timeline.Fork) error {
	title := "fork " + f.Step
	if f.Replay > 0 {
		title += fmt.Sprintf(" (replay %d)", f.Replay)
	}
	switch {
	case f.Kind == timeline.KindForEach && f.Total > 0:
		title += fmt.Sprintf(": for each of %d items, at most %d in flight", f.Total, f.InFlight)
	case f.Kind == timeline.KindForEach:
		title += ": for each item"
	case f.Kind == timeline.KindParallel:
		title += fmt.Sprintf(": parallel, %d branches", f.Total)
	}
	counts := []string{fmt.Sprintf("%d handed out", f.HandedOut)}
	if f.Total > f.HandedOut {
		counts = append(counts, fmt.Sprintf("%d not handed out", f.Total-f.HandedOut))
	}
	counts = append(counts, fmt.Sprintf("%d arrived", f.Arrived), fmt.Sprintf("%d failed", f.Failed))
	if f.Unresolved > 0 {
		counts = append(counts, fmt.Sprintf("%d unresolved", f.Unresolved))
	}
	counts = append(counts, fmt.Sprintf("%d stopped", f.Stopped), fmt.Sprintf("%d running", f.Running))
	if _, err := fmt.Fprintf(out, "\n%s\n  %s\n", title, strings.Join(counts, ", ")); err != nil {
		return err
	}
	if f.Hidden > 0 {
		if _, err := fmt.Fprintf(out, "  showing %s of %d branches; more with --branches all|failed or --branch N|A-B|%s:N\n",
			branchList(f.Branches), f.Seen(), f.Step); err != nil {
			return err
		}
	}
	if len(f.Branches) == 0 {
		return nil
	}
	t := newTable(out)
	t.row("BRANCH", "STATUS", "KIND", "STEP", "ATTEMPT", "OUTCOME", "STARTED", "ENDED", "QUEUE", "DUE", "ERROR")
	for _, b := range f.Branches {
		for k, e := range b.Steps {
			branch, status := "", ""
			if k == 0 {
				branch, status = strconv.Itoa(b.Branch), b.Status
			}
			t.row(append([]string{branch, status}, eventCells(e)...)...)
		}
	}
	return t.flush()
}

// branchList names branches by index, consecutive ones as a range:
// "0-2, 57, 99997-99999" ("none" for none).
func branchList(bs []timeline.Branch) string {
	if len(bs) == 0 {
		return "none"
	}
	var parts []string
	for i := 0; i < len(bs); {
		j := i
		for j+1 < len(bs) && bs[j+1].Branch == bs[j].Branch+1 {
			j++
		}
		if j == i {
			parts = append(parts, strconv.Itoa(bs[i].Branch))
		} else {
			parts = append(parts, fmt.Sprintf("%d-%d", bs[i].Branch, bs[j].Branch))
		}
		i = j + 1
	}
	return strings.Join(parts, ", ")
}

// sinceFlag is --since: a duration back from now, or a time.
type sinceFlag struct {
	ago time.Duration
	at  time.Time
}

// since is the time the flag selects from, relative to now; zero when not
// given.
func (f *sinceFlag) since(now time.Time) time.Time {
	if f.ago > 0 {
		return now.Add(-f.ago)
	}
	return f.at
}

func (f *sinceFlag) String() string {
	switch {
	case f.ago > 0:
		return f.ago.String()
	case !f.at.IsZero():
		return f.at.Format(time.RFC3339)
	}
	return ""
}

func (f *sinceFlag) Set(s string) error {
	if d, err := time.ParseDuration(s); err == nil {
		if d <= 0 {
			return fmt.Errorf("%q: want a positive duration", s)
		}
		f.ago, f.at = d, time.Time{}
		return nil
	}
	t, err := time.Parse(time.RFC3339, s)
	if err != nil {
		return fmt.Errorf("%q is neither a duration (24h) nor an RFC 3339 time (2026-12-24T09:00:00Z)", s)
	}
	f.ago, f.at = 0, t
	return nil
}

func (f *sinceFlag) Type() string { return "duration|time" }

// addRevealFlag registers --reveal on cmd: payloads as the journal keeps
// them, their secret fields unmasked.
func addRevealFlag(cmd *cobra.Command, reveal *bool) {
	cmd.Flags().BoolVar(reveal, "reveal", false, "show the secret fields of payloads (the flows' dsl.Secret paths and fields tagged acemq:\"secret\") as the journal keeps them, in text and json output, instead of masked")
}

// redactRuns is runs with the secret fields of their inputs masked
// (engine.Redact), by the secrets of this binary's flows; a run of a flow
// the binary lacks is shown as it is, its secrets unknown here. The runs
// given are not changed.
func (a *app) redactRuns(runs []journal.Run) []journal.Run {
	secrets := a.flowSecrets()
	out := make([]journal.Run, len(runs))
	for i, r := range runs {
		r.Input = engine.Redact(r.Input, secrets[r.Flow])
		out[i] = r
	}
	return out
}

// flowSecrets are the secret paths of the binary's flows that were
// built, by flow name (engine.Secrets).
func (a *app) flowSecrets() map[string][]string {
	secrets := map[string][]string{}
	for _, f := range a.flows {
		if f != nil && f.Err() == nil {
			secrets[f.Name()] = engine.Secrets(f)
		}
	}
	return secrets
}
