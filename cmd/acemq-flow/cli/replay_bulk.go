package cli

import (
	"errors"
	"fmt"
	"io"
	"os"
	"strconv"
	"strings"
	"time"

	"github.com/schollz/progressbar/v3"
	"github.com/spf13/cobra"
	"golang.org/x/term"

	"github.com/acemq/acemq-flow/engine"
	"github.com/acemq/acemq-flow/engine/journal"
)

// bulkFlags choose many failed runs to replay.
type bulkFlags struct {
	flow, status, where, rate string
	since                     sinceFlag
	limit                     int
	dryRun                    bool
	// from and reason are --from and --reason (a replay from a step).
	from, reason string
}

var bulkFlagNames = []string{"flow", "status", "where", "rate", "since", "limit", "dry-run"}

func (f *bulkFlags) add(cmd *cobra.Command) {
	fs := cmd.Flags()
	fs.StringVar(&f.flow, "flow", "", "replay failed runs of this flow")
	fs.StringVar(&f.status, "status", "", "the status of the runs to replay: failed (the only one a replay applies to); with --from, completed, ended, failed or compensated (comma-separated)")
	fs.Var(&f.since, "since", "only runs started this long ago or later (24h), or since a time (RFC 3339)")
	fs.StringVar(&f.where, "where", "", "an expr-lang condition on run and payload, checked against --flow's input type before anything is read (payload needs --flow)")
	fs.IntVar(&f.limit, "limit", 100, "at most this many runs, of those --where accepts (the journal is read, newest first, until it has them)")
	fs.StringVar(&f.rate, "rate", "", "at most this many replays a second (100/s, or 100)")
	fs.BoolVar(&f.dryRun, "dry-run", false, "print what would be replayed, and move nothing")
}

// given reports whether any flag of a bulk replay was set.
func (f *bulkFlags) given(cmd *cobra.Command) bool {
	for _, n := range bulkFlagNames {
		if fl := cmd.Flags().Lookup(n); fl != nil && fl.Changed {
			return true
		}
	}
	return false
}

func (f *bulkFlags) check(from fromFlags) error {
	if from.step != "" {
		if _, err := f.statuses(); err != nil {
			return err
		}
	} else if f.status != "failed" {
		return errors.New("give a run id, or --status failed (and --flow, --where, ...) to replay many failed runs")
	}
	if f.limit < 1 {
		return fmt.Errorf("--limit %d, want at least 1", f.limit)
	}
	_, err := parseRate(f.rate)
	return err
}

// statuses reads --status for a replay from a step: completed, ended,
// failed or compensated, comma-separated.
func (f *bulkFlags) statuses() ([]journal.Status, error) {
	if f.status == "" {
		return nil, errors.New("give a run id, or --status (completed, ended, failed or compensated) and --flow, --where, ... to replay many runs from a step")
	}
	var out []journal.Status
	for _, s := range strings.Split(f.status, ",") {
		st := journal.Status(strings.TrimSpace(s))
		if !engine.ReplayableFrom(st) {
			return nil, fmt.Errorf("--status %q: a replay from a step takes completed, ended, failed or compensated runs", s)
		}
		out = append(out, st)
	}
	return out, nil
}

// parseRate reads "100/s" or "100" as replays a second ("" is no limit).
func parseRate(s string) (float64, error) {
	if s == "" {
		return 0, nil
	}
	n, err := strconv.ParseFloat(strings.TrimSuffix(s, "/s"), 64)
	if err != nil || n <= 0 {
		return 0, fmt.Errorf("--rate %q: want a positive number of replays a second, such as 100/s", s)
	}
	return n, nil
}

// bulkReplay replays the failed runs f chooses: a progress bar on a
// terminal once the runs are chosen (their number and the time left), a
// summary at the end (one JSON document with -o json), and on Ctrl-C what
// was done so far, then ErrInterrupted (exit status ExitInterrupted).
func (a *app) bulkReplay(cmd *cobra.Command, s *session, f bulkFlags, output outputFormat) error {
	if !s.shared() {
		return fmt.Errorf("replay: %w", errors.New("choosing failed runs needs the run journal every worker writes: give "+databaseFlag))
	}
	rate, err := parseRate(f.rate)
	if err != nil {
		return fmt.Errorf("replay: %w", err)
	}
	req := engine.BulkReplay{Flow: f.flow, Since: f.since.since(time.Now()), Where: f.where, Limit: f.limit, Rate: rate, DryRun: f.dryRun,
		From: f.from, Reason: f.reason}
	if f.from != "" {
		if req.Statuses, err = f.statuses(); err != nil {
			return fmt.Errorf("replay: %w", err)
		}
	}
	var bar *progressbar.ProgressBar
	if output != outputJSON && !f.dryRun && isTerminal(cmd) {
		// A spinner while the journal is read, then a bar of the runs
		// chosen.
		bar = progressbar.NewOptions(-1, progressbar.OptionSetWriter(cmd.ErrOrStderr()), progressbar.OptionSetDescription("choosing runs"),
			progressbar.OptionShowCount(), progressbar.OptionThrottle(100*time.Millisecond), progressbar.OptionClearOnFinish())
		choosing := true
		req.Selected = func(r engine.BulkResult) {
			_ = bar.Finish()
			bar, choosing = newReplayBar(cmd.ErrOrStderr(), r.Matched), false
		}
		req.Progress = func(r engine.BulkResult) {
			if choosing {
				bar.Describe(fmt.Sprintf("choosing runs (%d skipped by --where)", r.Skipped))
				_ = bar.Set(r.Selected)
				return
			}
			if len(r.NotFound) > 0 {
				bar.Describe(fmt.Sprintf("replaying (%d not found)", len(r.NotFound)))
			}
			_ = bar.Set(len(r.Replayed) + len(r.NotFound) + len(r.Refused))
		}
	}
	res, err := s.eng.ReplayBulk(cmd.Context(), req)
	if bar != nil {
		if res.Interrupted {
			// Left as it stood, on a line of its own.
			_ = bar.Exit()
			fmt.Fprintln(cmd.ErrOrStderr())
		} else {
			_ = bar.Finish()
		}
	}
	if err != nil {
		return fmt.Errorf("replay: %w", err)
	}
	if output == outputJSON {
		if err := writeJSON(cmd.OutOrStdout(), res); err != nil {
			return err
		}
		return interrupted(res)
	}
	w := cmd.OutOrStdout()
	if f.dryRun {
		fmt.Fprintf(w, "dry run: %s would be replayed (%d selected, %d skipped by --where, %d not replayable)\n",
			count(len(res.Replayed), "run"), res.Selected, res.Skipped, len(res.NotFound))
		for _, id := range res.Replayed {
			fmt.Fprintln(w, id)
		}
		return interrupted(res)
	}
	state := "done"
	if res.Interrupted {
		state = "interrupted: the rest was not touched"
	}
	if f.from != "" {
		fmt.Fprintf(w, "replayed from %s %d, refused %d, skipped %d, of %d selected (%s)\n",
			f.from, len(res.Replayed), len(res.Refused), res.Skipped, res.Selected, state)
		t := newTable(w)
		t.row("RUN", "REPLAYED FROM "+f.from)
		for _, id := range res.Replayed {
			t.row(id, "yes")
		}
		for _, r := range res.Refused {
			t.row(r.RunID, "refused: "+r.Reason)
		}
		if err := t.flush(); err != nil {
			return err
		}
		return interrupted(res)
	}
	fmt.Fprintf(w, "replayed %d, skipped %d, not found %d, of %d selected (%s)\n",
		len(res.Replayed), res.Skipped, len(res.NotFound), res.Selected, state)
	for _, id := range res.NotFound {
		fmt.Fprintf(w, "not found: %s\n", id)
	}
	return interrupted(res)
}

// interrupted is ErrInterrupted, saying what was done, when the replay was
// stopped part way (its summary already written).
func interrupted(res engine.BulkResult) error {
	if !res.Interrupted {
		return nil
	}
	return fmt.Errorf("replay: %w before it finished: %d of %d chosen runs replayed, the rest not touched",
		ErrInterrupted, len(res.Replayed), res.Matched)
}

// newReplayBar is the progress bar of a bulk replay of total runs, on w:
// runs done of the total, the rate, the time taken and the time left.
func newReplayBar(w io.Writer, total int) *progressbar.ProgressBar {
	return progressbar.NewOptions(total, progressbar.OptionSetWriter(w), progressbar.OptionSetDescription("replaying"),
		progressbar.OptionSetWidth(20), progressbar.OptionShowCount(), progressbar.OptionShowIts(), progressbar.OptionSetItsString("runs"),
		progressbar.OptionSetPredictTime(true), progressbar.OptionSetElapsedTime(true),
		progressbar.OptionThrottle(100*time.Millisecond), progressbar.OptionClearOnFinish())
}

// isTerminal reports whether the command's stderr is a terminal.
func isTerminal(cmd *cobra.Command) bool {
	f, ok := cmd.ErrOrStderr().(*os.File)
	return ok && term.IsTerminal(int(f.Fd()))
}
