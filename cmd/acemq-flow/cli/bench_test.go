package cli

import (
	"bytes"
	"encoding/json"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/acemq/acemq-flow/internal/benchmark"
	"github.com/acemq/acemq-flow/internal/testenv"
)

// fixedReport is a report with one figure of each kind: compared, with
// CPU; compared, lower is better, without CPU; and alone.
func fixedReport() *benchmark.Report {
	return &benchmark.Report{
		Broker: "RabbitMQ 3.10.8 at amqp://guest@127.0.0.1:5672/", Database: "postgres://postgres@127.0.0.1:5432/test",
		N: 10000, CPUs: 2, NumCPU: 2, GoVersion: "go1.26.8", Prefix: "acemq-bench.0123456789ab",
		Started: time.Date(2026, 12, 1, 9, 30, 0, 0, time.UTC), Seconds: 61.5,
		Results: []benchmark.Result{
			{Scenario: "core", Name: "confirmed publish", Unit: "msg/s", Better: "higher", Value: 21345.6,
				Baseline: "amqp091-go", BaselineValue: 28000, Ratio: 21345.6 / 28000,
				CPU: 45.25, BaselineCPU: 25, CPURatio: 45.25 / 25, Messages: 10000, Note: "256 B"},
			{Scenario: "ladder", Name: "ladder lateness p99", Unit: "ms", Better: "lower", Value: 1002.4,
				Baseline: "2s TTL queue", BaselineValue: 4.5, Ratio: 1002.4 / 4.5, Messages: 2000},
			{Scenario: "flow", Name: "3-step flow", Unit: "runs/s", Better: "higher", Value: 1850.2, CPU: 140.4, Messages: 10000,
				Note: "no baseline: amqp091-go needs RabbitMQ (set --url)"},
		},
		Skipped: []string{"outbox: needs a database"},
	}
}

func TestBenchRendering(t *testing.T) {
	t.Parallel()
	rep := fixedReport()
	var out bytes.Buffer
	require.NoError(t, writeBench(&out, testName, rep))
	want := "acemq-flow bench on RabbitMQ 3.10.8 at amqp://guest@127.0.0.1:5672/\n" +
		"database: postgres://postgres@127.0.0.1:5432/test\n" +
		"10000 messages per figure, GOMAXPROCS 2 of 2 CPUs, go1.26.8, " + rep.Started.Local().Format(time.DateTime) + ", took 1m2s\n" +
		"\n" +
		"FIGURE               VALUE         BASELINE      BASELINE VALUE  RATIO   BETTER  CPU µs/MSG  BASELINE CPU  CPU RATIO\n" +
		"confirmed publish    21,346 msg/s  amqp091-go    28,000 msg/s    0.76    higher  45.2        25.0          1.81\n" +
		"ladder lateness p99  1,002 ms      2s TTL queue  4.50 ms         222.76  lower   -           -             -\n" +
		"3-step flow          1,850 runs/s  -             -               -       higher  140         -             -\n" +
		"\n" +
		"RATIO = value / baseline; CPU = this process's user+sys time per message moved; CPU RATIO = CPU / baseline CPU.\n" +
		"Notes:\n" +
		"  confirmed publish vs amqp091-go: 256 B\n" +
		"  3-step flow vs -: no baseline: amqp091-go needs RabbitMQ (set --url)\n" +
		"Not measured: outbox: needs a database\n"
	require.Equal(t, want, out.String())

	out.Reset()
	require.NoError(t, writeJSON(&out, rep))
	var doc map[string]any
	require.NoError(t, json.Unmarshal(out.Bytes(), &doc))
	require.Equal(t, "RabbitMQ 3.10.8 at amqp://guest@127.0.0.1:5672/", doc["broker"])
	require.EqualValues(t, 10000, doc["n"])
	require.Equal(t, "acemq-bench.0123456789ab", doc["prefix"])
	require.Equal(t, "2026-12-01T09:30:00Z", doc["started"])
	require.Equal(t, []any{"outbox: needs a database"}, doc["skipped"])
	results := doc["results"].([]any)
	require.Len(t, results, 3)
	require.Equal(t, map[string]any{
		"scenario": "core", "name": "confirmed publish", "unit": "msg/s", "better": "higher", "value": 21345.6,
		"baseline": "amqp091-go", "baseline_value": 28000.0, "ratio": 21345.6 / 28000,
		"cpu_us_per_msg": 45.25, "baseline_cpu_us_per_msg": 25.0, "cpu_ratio": 45.25 / 25, "messages": 10000.0, "note": "256 B",
	}, results[0])
	require.Equal(t, map[string]any{
		"scenario": "flow", "name": "3-step flow", "unit": "runs/s", "better": "higher", "value": 1850.2,
		"cpu_us_per_msg": 140.4, "messages": 10000.0, "note": "no baseline: amqp091-go needs RabbitMQ (set --url)",
	}, results[2], "what was not measured is left out, not zero")
}

func TestBenchNumbers(t *testing.T) {
	t.Parallel()
	for v, want := range map[float64]string{0: "0.00", 0.523: "0.52", 9.999: "10.00", 12.34: "12.3", 99.96: "100.0", 100.4: "100",
		999.5: "1,000", 21345.6: "21,346", 1234567: "1,234,567"} {
		require.Equal(t, want, benchNumber(v), "%v", v)
	}
	require.Equal(t, "-", benchCPU(0))
	require.Equal(t, "-", benchRatio(0))
}

func TestBenchRefusesBadFlags(t *testing.T) {
	t.Parallel()
	r := execute(t, nil, "bench", "--only", "core,nope")
	require.Equal(t, 1, r.code)
	require.Contains(t, r.stderr, `--only: unknown scenario "nope", want some of core,flow,ladder,outbox,request,fanout,limits`)
	r = execute(t, nil, "bench", "--n", "0")
	require.Equal(t, 1, r.code)
	require.Contains(t, r.stderr, "--n 0: want at least 1")
	r = execute(t, nil, "bench", "--broker-ca-file", "/etc/ca.pem")
	require.Equal(t, 1, r.code)
	require.Contains(t, r.stderr, "bench takes no --broker-ca-file")
	r = execute(t, nil, "bench", "--only", "outbox", "--url", "memory://")
	require.Equal(t, 1, r.code)
	require.Contains(t, r.stderr, "--only outbox: no database: set --database-url / ACEMQ_DATABASE_URL")
	r = execute(t, nil, "bench", "--only", "core,fanout", "--url", "memory://")
	require.NotZero(t, r.code)
	require.Contains(t, r.stderr, "--only fanout: no database: set --database-url / ACEMQ_DATABASE_URL")
	r = execute(t, nil, "bench", "--fanout-items", "-3", "--url", "memory://")
	require.NotZero(t, r.code)
	require.Contains(t, r.stderr, "--fanout-items -3: want at least 1")
}

// benchRow is one row of the bench table, its cells by column.
type benchRow map[string]string

// parseBenchTable reads the rows of the bench table in out: the header
// line starts with FIGURE, the rows end at the first empty line; columns
// are at least two spaces apart and a cell holds single spaces only.
func parseBenchTable(t *testing.T, out string) []benchRow {
	t.Helper()
	lines := strings.Split(out, "\n")
	start := -1
	for i, l := range lines {
		if strings.HasPrefix(l, "FIGURE ") {
			start = i
			break
		}
	}
	require.NotEqual(t, -1, start, "no table in:\n%s", out)
	sep := regexp.MustCompile(`\s{2,}`)
	header := sep.Split(strings.TrimSpace(lines[start]), -1)
	require.Equal(t, []string{"FIGURE", "VALUE", "BASELINE", "BASELINE VALUE", "RATIO", "BETTER", "CPU µs/MSG", "BASELINE CPU", "CPU RATIO"}, header)
	var rows []benchRow
	for _, l := range lines[start+1:] {
		if strings.TrimSpace(l) == "" {
			break
		}
		cells := sep.Split(strings.TrimSpace(l), -1)
		require.Len(t, cells, len(header), "row %q", l)
		row := benchRow{}
		for i, h := range header {
			row[h] = cells[i]
		}
		rows = append(rows, row)
	}
	return rows
}

// number reads a number the table wrote, with its unit or not.
func number(t *testing.T, cell string) float64 {
	t.Helper()
	f, _, _ := strings.Cut(cell, " ")
	v, err := strconv.ParseFloat(strings.ReplaceAll(f, ",", ""), 64)
	require.NoError(t, err, "cell %q", cell)
	return v
}

// requireRatio checks that the printed ratio is the printed value over
// the printed baseline, give or take their rounding (three significant
// digits each, the ratio to two decimals).
func requireRatio(t *testing.T, ratio, value, baseline float64, what string) {
	t.Helper()
	require.Positive(t, ratio, what)
	want := value / baseline
	require.InDelta(t, want, ratio, 0.006+0.015*want, "%s: %v / %v", what, value, baseline)
}

// TestBenchOnRabbitMQ runs the command, small, against RabbitMQ and
// PostgreSQL, as a table and as JSON, and checks every figure's row.
func TestBenchOnRabbitMQ(t *testing.T) {
	t.Parallel()
	env := map[string]string{"ACEMQ_URL": testenv.RabbitURL(t), "ACEMQ_DATABASE_URL": testenv.DatabaseURL(t)}
	args := []string{"bench", "--n", "150", "--ladder-delay", "500ms"}
	figures := []string{
		"confirmed publish", "acknowledged consume",
		"3-step flow", "3-step flow", "3-step flow, run latency p50", "3-step flow, run latency p99",
		"3-step flow, journal on PostgreSQL",
		"3-step flow, on PostgreSQL",
		"ladder lateness p50", "ladder lateness p99",
		"outbox relay",
		"request/reply, 16 callers", "request/reply, 16 callers, p50", "request/reply, 16 callers, p99",
		"ForEach in one run", "ForEach in one run, peak RSS",
		"a step with a ConcurrencyKey",
	}
	// The rows that show CPU for both sides: the throughput of each pair,
	// and the ladder's (which has none).
	withCPU := map[string]bool{"confirmed publish": true, "acknowledged consume": true, "3-step flow": true,
		"3-step flow, journal on PostgreSQL": true, "3-step flow, on PostgreSQL": true, "ladder lateness p50": true, "outbox relay": true, "request/reply, 16 callers": true,
		"ForEach in one run": true, "a step with a ConcurrencyKey": true}

	t.Run("table", func(t *testing.T) {
		t.Parallel()
		r := execute(t, env, args...)
		require.Zero(t, r.code, r.stderr)
		require.NotContains(t, r.stdout+r.stderr, "guest:guest", "no password")
		require.Regexp(t, `^acemq-flow bench on RabbitMQ \S+ at amqp://guest@\S+\n`+
			`database: postgres://\S+\n150 messages per figure, GOMAXPROCS \d+ of \d+ CPUs, `, r.stdout)
		rows := parseBenchTable(t, r.stdout)
		var got []string
		for _, row := range rows {
			got = append(got, row["FIGURE"])
			what := row["FIGURE"] + " vs " + row["BASELINE"]
			value, base := number(t, row["VALUE"]), number(t, row["BASELINE VALUE"])
			require.Positive(t, value, what)
			require.Positive(t, base, what)
			unit := strings.SplitN(row["VALUE"], " ", 2)[1]
			require.Equal(t, unit, strings.SplitN(row["BASELINE VALUE"], " ", 2)[1], what)
			requireRatio(t, number(t, row["RATIO"]), value, base, what)
			if unit == "ms" || unit == "MB" {
				require.Equal(t, "lower", row["BETTER"], what)
			} else {
				require.Equal(t, "higher", row["BETTER"], what)
			}
			if withCPU[row["FIGURE"]] {
				requireRatio(t, number(t, row["CPU RATIO"]), number(t, row["CPU µs/MSG"]), number(t, row["BASELINE CPU"]), what+" (CPU)")
			} else {
				require.Equal(t, "-", row["CPU RATIO"], what)
			}
		}
		require.Equal(t, figures, got)
		require.Contains(t, r.stdout, "\nRATIO = value / baseline;")
		require.NotContains(t, r.stdout, "Not measured")
	})

	t.Run("json", func(t *testing.T) {
		t.Parallel()
		r := execute(t, env, append(args, "-o", "json")...)
		require.Zero(t, r.code, r.stderr)
		var rep benchmark.Report
		require.NoError(t, json.Unmarshal([]byte(r.stdout), &rep))
		require.Regexp(t, `^RabbitMQ \S+ at amqp://guest@`, rep.Broker)
		require.Regexp(t, `^postgres://postgres@`, rep.Database)
		require.Equal(t, 150, rep.N)
		require.Positive(t, rep.CPUs)
		require.Positive(t, rep.Seconds)
		require.Regexp(t, `^acemq-bench\.[0-9a-f]{12}$`, rep.Prefix)
		require.WithinDuration(t, time.Now(), rep.Started, 10*time.Minute)
		require.Empty(t, rep.Skipped)
		var got []string
		for _, res := range rep.Results {
			got = append(got, res.Name)
			require.Contains(t, benchmark.Scenarios, res.Scenario, res.Name)
			require.Positive(t, res.Value, res.Name)
			require.NotEmpty(t, res.Baseline, res.Name)
			require.Positive(t, res.BaselineValue, res.Name)
			require.InDelta(t, res.Value/res.BaselineValue, res.Ratio, 1e-9, res.Name)
			require.Positive(t, res.Messages, res.Name)
			if withCPU[res.Name] {
				require.Positive(t, res.CPU, res.Name)
				require.Positive(t, res.BaselineCPU, res.Name)
				require.InDelta(t, res.CPU/res.BaselineCPU, res.CPURatio, 1e-9, res.Name)
			} else {
				require.Zero(t, res.CPURatio, res.Name)
			}
		}
		require.Equal(t, figures, got)
		ladder := slices.IndexFunc(rep.Results, func(r benchmark.Result) bool { return r.Name == "ladder lateness p50" })
		require.Equal(t, 30, rep.Results[ladder].Messages, "the ladder delays n/5")
	})
}

func TestBenchOnTheEmbeddedBroker(t *testing.T) {
	t.Parallel()
	r := execute(t, nil, "bench", "--n", "40", "--only", "request,core", "-o", "json", "--url", "memory://")
	require.Zero(t, r.code, r.stderr)
	require.Contains(t, r.stderr, "measuring the embedded in-process broker (--url memory://)")
	var rep benchmark.Report
	require.NoError(t, json.Unmarshal([]byte(r.stdout), &rep))
	require.Equal(t, "the embedded in-process broker", rep.Broker)
	require.Equal(t, []string{"the amqp091-go baselines: need RabbitMQ"}, rep.Skipped)
	var got []string
	for _, res := range rep.Results {
		got = append(got, res.Name)
		require.Positive(t, res.Value, res.Name)
		require.Empty(t, res.Baseline, res.Name)
	}
	require.Equal(t, []string{"confirmed publish", "acknowledged consume",
		"request/reply, 16 callers", "request/reply, 16 callers, p50", "request/reply, 16 callers, p99"}, got)
}
