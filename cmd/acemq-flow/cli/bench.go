package cli

import (
	"errors"
	"fmt"
	"io"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/schollz/progressbar/v3"
	"github.com/spf13/cobra"

	"github.com/acemq/acemq-flow/broker/rabbitmq"
	"github.com/acemq/acemq-flow/engine/enginepg"
	"github.com/acemq/acemq-flow/internal/benchmark"
)

func (a *app) benchCommand() *cobra.Command {
	var (
		url         string
		n           int
		only        string
		ladderDelay time.Duration
		fanoutItems int
		output      outputFormat
	)
	cmd := &cobra.Command{
		Use:   "bench",
		Short: "Measure every figure of the project against its baseline on this broker",
		Long: "Measure, on the broker --url names (--url " + EmbeddedURL + ": the in-process one), each figure of the\n" +
			"project beside its baseline, in the same run:\n" +
			"  core     confirmed publish and acknowledged consume through the library vs the fastest\n" +
			"           plain amqp091-go (one confirm channel, 256 unconfirmed; one consumer acking each)\n" +
			"  flow     3-step flow runs/s and latency vs a plain consume-republish-ack chain (also\n" +
			"           carrying the AceMQ envelope); with --database-url, the journal (and the store) on PostgreSQL\n" +
			"           vs in memory\n" +
			"  ladder   how late delayed messages arrive through the scheduler ladder vs a TTL queue\n" +
			"  outbox   outbox relay records/s vs sending the same messages (needs --database-url)\n" +
			"  request  request/reply req/s, p50 and p99 at 16 callers vs amqp091-go\n" +
			"  fanout   one run's ForEach over --fanout-items items: items/s and the peak RSS vs as many\n" +
			"           runs of a one-step flow (needs --database-url)\n" +
			"  limits   runs/s of a step with a ConcurrencyKey over 100 keys vs the same step without\n" +
			"           one (needs --database-url)\n" +
			"with this process's CPU per message (user+sys) for each side. RATIO is value / baseline\n" +
			"(BETTER says which way is better), CPU RATIO is CPU / baseline CPU. The amqp091-go\n" +
			"baselines need RabbitMQ. Everything it declares (queues, exchanges, tables) has a name\n" +
			"of its own and is deleted when it ends, also on Ctrl-C. A terminal shows its progress.",
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			scenarios, err := benchmark.ParseOnly(only)
			if err != nil {
				return fmt.Errorf("--only: %w", err)
			}
			if n < 1 {
				return fmt.Errorf("--n %d: want at least 1", n)
			}
			if fanoutItems < 0 {
				return fmt.Errorf("--fanout-items %d: want at least 1", fanoutItems)
			}
			if ladderDelay < 0 {
				return fmt.Errorf("--ladder-delay %s: want a positive duration", ladderDelay)
			}
			if b := a.brokerTLS; b != (brokerTLS{}) {
				// The plain amqp091-go baselines dial the URL themselves:
				// TLS settings must be where both sides read them.
				return fmt.Errorf("bench takes no --broker-ca-file, --broker-cert-file, --broker-key-file or --broker-server-name: "+
					"put them in the amqps:// URL's query (%s, %s, %s, %s)",
					rabbitmq.QueryCACertFile, rabbitmq.QueryCertFile, rabbitmq.QueryKeyFile, rabbitmq.QueryServerName)
			}
			if url == "" {
				return fmt.Errorf("bench: %w", ErrNoBroker)
			}
			cfg := benchmark.Config{URL: url, N: n, FanoutItems: fanoutItems, LadderDelay: ladderDelay, Logger: a.logger(cmd)}
			if cfg.URL == EmbeddedURL {
				// A named in-process broker, so that the run's connections
				// share it.
				cfg.URL = EmbeddedURL + "acemq-bench"
				fmt.Fprintln(cmd.ErrOrStderr(), "measuring the embedded in-process broker (--url "+EmbeddedURL+")")
			}
			db, err := a.openStores(cmd, enginepg.Config{Migrations: enginepg.SkipMigrations})
			if err != nil {
				return err
			}
			defer db.Close()
			if db != nil {
				cfg.DB, cfg.DatabaseName = db.Pool(), db.Name()
			} else if only != "" {
				for _, needs := range []string{"outbox", "fanout", "limits"} {
					if slices.Contains(scenarios, needs) {
						return fmt.Errorf("--only %s: %w", needs, ErrNoDatabase)
					}
				}
			}
			var bar *progressbar.ProgressBar
			if isTerminal(cmd) {
				cfg.Progress = func(s benchmark.Step) {
					if bar == nil {
						bar = progressbar.NewOptions(s.Total, progressbar.OptionSetWriter(cmd.ErrOrStderr()),
							progressbar.OptionShowCount(), progressbar.OptionSetElapsedTime(true),
							progressbar.OptionSetPredictTime(false), progressbar.OptionClearOnFinish())
					}
					bar.Describe(s.Name)
					_ = bar.Set(s.Done)
				}
			}
			only := scenarios
			if len(only) == len(benchmark.Scenarios) {
				only = nil // all: those that cannot run here are skipped, not refused
			}
			rep, err := benchmark.Run(cmd.Context(), cfg, only)
			if bar != nil {
				_ = bar.Finish()
			}
			if err != nil {
				if cmd.Context().Err() != nil && errors.Is(err, cmd.Context().Err()) {
					return fmt.Errorf("bench interrupted: %w", err)
				}
				return fmt.Errorf("bench: %w", err)
			}
			if output == outputJSON {
				return writeJSON(cmd.OutOrStdout(), rep)
			}
			return writeBench(cmd.OutOrStdout(), a.name, rep)
		},
	}
	addURLFlag(cmd, &url)
	cmd.Flags().IntVar(&n, "n", benchmark.DefaultN, "messages (runs, requests, records) per figure; the ladder delays n/5")
	cmd.Flags().StringVar(&only, "only", "", "measure only these scenarios, comma-separated: "+strings.Join(benchmark.Scenarios, ",")+" (default: all)")
	cmd.Flags().DurationVar(&ladderDelay, "ladder-delay", benchmark.DefaultLadderDelay, "mean delay of the ladder's messages (spread from half to one and a half of it), and the TTL of its baseline")
	cmd.Flags().IntVar(&fanoutItems, "fanout-items", 0, "items of the fan-out's one run, and one-step runs of its baseline (default: 10 times --n)")
	addOutputFlag(cmd, &output)
	return cmd
}

// writeBench prints a bench report of the binary program for people:
// what was measured where, one row per figure, and the notes.
func writeBench(w io.Writer, program string, rep *benchmark.Report) error {
	fmt.Fprintf(w, "%s bench on %s\n", program, rep.Broker)
	if rep.Database != "" {
		fmt.Fprintf(w, "database: %s\n", rep.Database)
	}
	fmt.Fprintf(w, "%s per figure, GOMAXPROCS %d of %d CPUs, %s, %s, took %s\n\n",
		count(rep.N, "message"), rep.CPUs, rep.NumCPU, rep.GoVersion, localTime(rep.Started, time.DateTime),
		shortDuration(time.Duration(rep.Seconds*float64(time.Second))))
	t := newTable(w)
	t.row("FIGURE", "VALUE", "BASELINE", "BASELINE VALUE", "RATIO", "BETTER", "CPU µs/MSG", "BASELINE CPU", "CPU RATIO")
	for _, r := range rep.Results {
		baseline, baseValue, ratio := "-", "-", "-"
		if r.Baseline != "" {
			baseline, baseValue, ratio = r.Baseline, benchValue(r.BaselineValue, r.Unit), strconv.FormatFloat(r.Ratio, 'f', 2, 64)
		}
		t.row(r.Name, benchValue(r.Value, r.Unit), baseline, baseValue, ratio, r.Better,
			benchCPU(r.CPU), benchCPU(r.BaselineCPU), benchRatio(r.CPURatio))
	}
	if err := t.flush(); err != nil {
		return err
	}
	fmt.Fprintln(w, "\nRATIO = value / baseline; CPU = this process's user+sys time per message moved; CPU RATIO = CPU / baseline CPU.")
	var notes []string
	for _, r := range rep.Results {
		if r.Note != "" {
			notes = append(notes, fmt.Sprintf("  %s vs %s: %s", r.Name, orDash(r.Baseline), r.Note))
		}
	}
	if len(notes) > 0 {
		fmt.Fprintln(w, "Notes:")
		fmt.Fprintln(w, strings.Join(notes, "\n"))
	}
	for _, s := range rep.Skipped {
		fmt.Fprintf(w, "Not measured: %s\n", s)
	}
	return nil
}

// benchValue is a figure with its unit, rounded for reading.
func benchValue(v float64, unit string) string { return benchNumber(v) + " " + unit }

// benchNumber rounds v for reading: whole numbers with thousands
// separators from 100 up, one decimal from 10, two below.
func benchNumber(v float64) string {
	switch {
	case v >= 100:
		s := strconv.FormatInt(int64(v+0.5), 10)
		var b strings.Builder
		for i, c := range s {
			if i > 0 && (len(s)-i)%3 == 0 {
				b.WriteByte(',')
			}
			b.WriteRune(c)
		}
		return b.String()
	case v >= 10:
		return strconv.FormatFloat(v, 'f', 1, 64)
	default:
		return strconv.FormatFloat(v, 'f', 2, 64)
	}
}

// benchCPU is a CPU time per message in µs, "-" when not measured.
func benchCPU(us float64) string {
	if us <= 0 {
		return "-"
	}
	return benchNumber(us)
}

// benchRatio is a ratio to two decimals, "-" when there is none.
func benchRatio(r float64) string {
	if r <= 0 {
		return "-"
	}
	return strconv.FormatFloat(r, 'f', 2, 64)
}

// orDash is s, or "-" when empty.
func orDash(s string) string {
	if s == "" {
		return "-"
	}
	return s
}
