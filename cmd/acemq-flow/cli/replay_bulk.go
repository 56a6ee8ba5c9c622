package cli

import (
	"context"
	"errors"
	"fmt"
	"os"
	"strconv"
	"strings"
	"time"

	"github.com/schollz/progressbar/v3"
	"github.com/spf13/cobra"
	"golang.org/x/term"

	"github.com/acemq/acemq-flow/engine"
)

// bulkFlags choose many failed runs to replay.
type bulkFlags struct {
	flow, status, where, rate string
	since                     sinceFlag
	limit                     int
	dryRun                    bool
}

var bulkFlagNames = []string{"flow", "status", "where", "rate", "since", "limit", "dry-run"}

func (f *bulkFlags) add(cmd *cobra.Command) {
	fs := cmd.Flags()
	fs.StringVar(&f.flow, "flow", "", "replay failed runs of this flow")
	fs.StringVar(&f.status, "status", "", "the status of the runs to replay: failed (the only one a replay applies to)")
	fs.Var(&f.since, "since", "only runs started this long ago or later (24h), or since a time (RFC 3339)")
	fs.StringVar(&f.where, "where", "", "an expr-lang condition on run and payload")
	fs.IntVar(&f.limit, "limit", 100, "at most this many runs")
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

func (f *bulkFlags) check() error {
	if f.status != "failed" {
		return errors.New("give a run id, or --status failed (and --flow, --where, ...) to replay many failed runs")
	}
	if f.limit < 1 {
		return fmt.Errorf("--limit %d, want at least 1", f.limit)
	}
	_, err := parseRate(f.rate)
	return err
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
// terminal, a summary at the end (one JSON document with -o json), and on
// Ctrl-C what was done so far.
func (a *app) bulkReplay(cmd *cobra.Command, s *session, f bulkFlags, output outputFormat) error {
	if !s.shared {
		return fmt.Errorf("replay: %w", errors.New("choosing failed runs needs the run journal every worker writes: give "+databaseFlag))
	}
	rate, err := parseRate(f.rate)
	if err != nil {
		return fmt.Errorf("replay: %w", err)
	}
	req := engine.BulkReplay{Flow: f.flow, Since: f.since.since(time.Now()), Where: f.where, Limit: f.limit, Rate: rate, DryRun: f.dryRun}
	var bar *progressbar.ProgressBar
	if output != outputJSON && !f.dryRun && isTerminal(cmd) {
		bar = progressbar.NewOptions(-1, progressbar.OptionSetWriter(cmd.ErrOrStderr()), progressbar.OptionSetDescription("replaying"),
			progressbar.OptionShowCount(), progressbar.OptionShowIts(), progressbar.OptionSetItsString("runs"),
			progressbar.OptionThrottle(100*time.Millisecond), progressbar.OptionClearOnFinish())
		req.Progress = func(r engine.BulkResult) {
			bar.Describe(fmt.Sprintf("replaying (%d skipped, %d not found)", r.Skipped, len(r.NotFound)))
			_ = bar.Set(len(r.Replayed))
		}
	}
	res, err := s.eng.ReplayBulk(cmd.Context(), req)
	if bar != nil {
		_ = bar.Finish()
	}
	if err != nil {
		return fmt.Errorf("replay: %w", err)
	}
	if output == outputJSON {
		return writeJSON(cmd.OutOrStdout(), res)
	}
	w := cmd.OutOrStdout()
	if f.dryRun {
		fmt.Fprintf(w, "dry run: %s would be replayed (%d selected, %d skipped by --where, %d not replayable)\n",
			count(len(res.Replayed), "run"), res.Selected, res.Skipped, len(res.NotFound))
		for _, id := range res.Replayed {
			fmt.Fprintln(w, id)
		}
		return nil
	}
	state := "done"
	if res.Interrupted {
		state = "interrupted: the rest was not touched"
	}
	fmt.Fprintf(w, "replayed %d, skipped %d, not found %d, of %d selected (%s)\n",
		len(res.Replayed), res.Skipped, len(res.NotFound), res.Selected, state)
	for _, id := range res.NotFound {
		fmt.Fprintf(w, "not found: %s\n", id)
	}
	if res.Interrupted {
		return fmt.Errorf("replay: %w", context.Canceled)
	}
	return nil
}

// isTerminal reports whether the command's stderr is a terminal.
func isTerminal(cmd *cobra.Command) bool {
	f, ok := cmd.ErrOrStderr().(*os.File)
	return ok && term.IsTerminal(int(f.Fd()))
}
