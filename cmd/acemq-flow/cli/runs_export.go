package cli

import (
	"bufio"
	"context"
	"encoding/csv"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"strconv"
	"time"

	"github.com/schollz/progressbar/v3"
	"github.com/spf13/cobra"

	"github.com/acemq/acemq-flow/engine"
	"github.com/acemq/acemq-flow/engine/journal"
)

// exportPage is how many runs runs export reads from the journal at a
// time: it holds no more than a page in memory, however many it exports.
const exportPage = 1000

// Export formats.
const (
	exportCSV   = "csv"
	exportJSONL = "jsonl"
)

// ErrInvalidExportFormat: runs export was asked for a format it does not
// write.
var ErrInvalidExportFormat = errors.New("invalid export format")

// csvHeader is the header row of runs export --format csv.
var csvHeader = []string{"run_id", "flow", "status", "step", "business_key", "version", "error",
	"started_at", "updated_at", "ended_at", "due_at", "dead_letter", "replays", "input"}

func (a *app) runsExportCommand() *cobra.Command {
	var (
		format   string
		out      string
		flow     string
		statuses []string
		since    sinceFlag
		until    sinceFlag
		limit    int
		errText  string
		version  string
		where    string
		key      string
		idPrefix string
		reveal   bool
	)
	cmd := &cobra.Command{
		Use:   "export [--format csv|jsonl] [--out FILE] [selection flags of runs list]",
		Short: "Write every run the selection flags choose, as CSV or JSON lines, newest first",
		Long: "Write the runs the flags choose (those of runs list; --limit 0, the default, is every run)\n" +
			"to stdout or --out FILE: --format csv (a header row, then a row a run: " + fmt.Sprint(len(csvHeader)) + " columns, the input\n" +
			"as JSON) or jsonl (one JSON document a run, as runs list -o json gives them). The journal is\n" +
			"read a page at a time, so a million runs take no more memory than a thousand. The secret\n" +
			"fields of inputs are masked as runs show masks them, unless --reveal. A terminal shows the\n" +
			"runs written as they go; the count is said on stderr at the end.",
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) (err error) {
			if format != exportCSV && format != exportJSONL {
				return fmt.Errorf("runs export: %w %q: want csv or jsonl", ErrInvalidExportFormat, format)
			}
			if limit < 0 {
				return fmt.Errorf("runs export: --limit %d: want 0 (every run) or more", limit)
			}
			now := time.Now()
			q, err := runsQuery(flow, statuses, since.since(now), exportPage, errText)
			if err != nil {
				return fmt.Errorf("runs export: %w", err)
			}
			q.Version, q.BusinessKey, q.IDPrefix, q.Before = version, key, idPrefix, until.since(now)
			var w *journal.Where
			if where != "" {
				if w, err = journal.ParseWhere(where); err != nil {
					return fmt.Errorf("runs export: --where: %w", err)
				}
			}
			j, done, err := a.openRunsJournal(cmd)
			if err != nil {
				return err
			}
			defer done()
			dst := cmd.OutOrStdout()
			if out != "" {
				f, err := os.Create(out)
				if err != nil {
					return fmt.Errorf("runs export: %w", err)
				}
				defer func() {
					if cerr := f.Close(); cerr != nil && err == nil {
						err = fmt.Errorf("runs export: %w", cerr)
					}
				}()
				dst = f
			}
			var secrets map[string][]string
			if !reveal {
				secrets = a.flowSecrets()
			}
			var bar *progressbar.ProgressBar
			if isTerminal(cmd) {
				bar = progressbar.NewOptions(-1, progressbar.OptionSetWriter(cmd.ErrOrStderr()), progressbar.OptionSetDescription("exporting runs"),
					progressbar.OptionShowCount(), progressbar.OptionShowIts(), progressbar.OptionSetItsString("runs"), progressbar.OptionClearOnFinish())
			}
			n, err := exportRuns(cmd.Context(), j, q, w, limit, format, secrets, dst, func(n int) {
				if bar != nil {
					_ = bar.Set(n)
				}
			})
			if bar != nil {
				_ = bar.Finish()
			}
			to := "stdout"
			if out != "" {
				to = out
			}
			fmt.Fprintf(cmd.ErrOrStderr(), "exported %s to %s\n", count(n, "run"), to)
			if err != nil {
				return fmt.Errorf("runs export: %w", hintMigrate(a.name, err))
			}
			return nil
		},
	}
	cmd.Flags().StringVar(&format, "format", exportCSV, "what to write: csv or jsonl (JSON lines)")
	cmd.Flags().StringVar(&out, "out", "", "write to this file instead of stdout")
	cmd.Flags().StringVar(&flow, "flow", "", "only runs of this flow")
	cmd.Flags().StringSliceVar(&statuses, "status", nil, "only runs in these statuses, comma-separated: "+statusList())
	cmd.Flags().Var(&since, "since", "only runs started this long ago or later (24h), or since a time (RFC 3339)")
	cmd.Flags().Var(&until, "until", "only runs started before this long ago (1h), or before a time (RFC 3339)")
	cmd.Flags().IntVar(&limit, "limit", 0, "at most this many runs, the newest (0: every run)")
	cmd.Flags().StringVar(&errText, "error", "", "only runs whose error contains this text (case insensitive)")
	cmd.Flags().StringVar(&version, "version", "", "only runs started on this version of their flow")
	cmd.Flags().StringVar(&where, "where", "", `only runs this expr-lang condition holds for (as runs list --where): 'payload.customer == "Ada"'`)
	cmd.Flags().StringVar(&key, "key", "", "only runs with this business key (the flow's dsl.Key)")
	cmd.Flags().StringVar(&idPrefix, "id-prefix", "", "only runs whose id begins with this")
	addRevealFlag(cmd, &reveal)
	return cmd
}

// exportRuns writes the runs q and w select (at most limit, 0 for all),
// newest first, to dst in format, their inputs masked by secrets (nil:
// as they are), reading the journal a page of q.Limit runs at a time;
// progress is told how many were written after each page. It returns how
// many it wrote.
//
// Pages follow one another by start time: a page asks for the runs
// started before a microsecond after the last one of the page before (the
// journal's precision), and skips those it wrote already, so that runs
// started in the same instant as a page's last are neither lost nor
// written twice.
func exportRuns(ctx context.Context, j journal.Journal, q journal.Query, w *journal.Where, limit int, format string,
	secrets map[string][]string, dst io.Writer, progress func(int)) (int, error) {
	if w != nil && w.Cond() != nil {
		if q.Where != nil {
			q.Where = &journal.Cond{Op: journal.CondAnd, Args: []journal.Cond{*q.Where, *w.Cond()}}
		} else {
			q.Where = w.Cond()
		}
	}
	buf := bufio.NewWriterSize(dst, 64<<10)
	var (
		cw  *csv.Writer
		enc *json.Encoder
	)
	if format == exportCSV {
		cw = csv.NewWriter(buf)
		if err := cw.Write(csvHeader); err != nil {
			return 0, fmt.Errorf("write: %w", err)
		}
	} else {
		enc = json.NewEncoder(buf)
	}
	n := 0
	seen := map[string]time.Time{}
	for {
		page, err := j.Runs(ctx, q)
		if err != nil {
			return n, err
		}
		fresh := 0
		for _, r := range page {
			if _, ok := seen[r.ID]; ok {
				continue
			}
			fresh++
			if w != nil && !w.Exact() && !w.Match(r) {
				continue
			}
			if secrets != nil {
				r.Input = engine.Redact(r.Input, secrets[r.Flow])
			}
			if cw != nil {
				err = cw.Write(csvRow(r))
			} else {
				err = enc.Encode(r)
			}
			if err != nil {
				return n, fmt.Errorf("write: %w", err)
			}
			n++
			if limit > 0 && n == limit {
				break
			}
		}
		if cw != nil {
			cw.Flush()
			err = cw.Error()
		}
		if err == nil {
			err = buf.Flush()
		}
		if err != nil {
			return n, fmt.Errorf("write: %w", err)
		}
		progress(n)
		if len(page) < q.Limit || (limit > 0 && n == limit) {
			return n, nil
		}
		last := page[len(page)-1].StartedAt
		next := last.Add(time.Microsecond)
		if fresh == 0 {
			// A whole page started within a microsecond: go on past it.
			next = last
		}
		for id, at := range seen {
			if !at.Before(next) {
				delete(seen, id)
			}
		}
		for _, r := range page {
			if r.StartedAt.Before(next) && !r.StartedAt.Before(last) {
				seen[r.ID] = r.StartedAt
			}
		}
		q.Before = next
	}
}

// csvRow is a run as a row under csvHeader: times in RFC 3339 (UTC), ""
// for none; the input as its JSON.
func csvRow(r journal.Run) []string {
	at := func(t *time.Time) string {
		if t == nil || t.IsZero() {
			return ""
		}
		return t.UTC().Format(time.RFC3339Nano)
	}
	return []string{r.ID, r.Flow, string(r.Status), r.Step, r.BusinessKey, r.Version, r.Error,
		at(&r.StartedAt), at(&r.UpdatedAt), at(r.EndedAt), at(r.DueAt), r.DeadLetter, strconv.Itoa(r.Replays), string(r.Input)}
}
