package cli

import (
	"errors"
	"fmt"
	"math"
	"strings"
	"testing"
	"time"

	tea "github.com/charmbracelet/bubbletea"
	"github.com/charmbracelet/x/ansi"
	"github.com/stretchr/testify/require"

	"github.com/acemq/acemq-flow/engine"
)

// exposition is /metrics as a worker serves it, cut down: two outcomes of
// a flow, a step's histogram in two outcomes, a step running, and queue
// depths of three roles.
const exposition = `# HELP acemq_pipeline_run_total Runs that left their flow.
# TYPE acemq_pipeline_run_total counter
acemq_pipeline_run_total{otel_scope_name="github.com/acemq/acemq-flow/engine",outcome="completed",pipeline="orders",step="ship"} 90
acemq_pipeline_run_total{otel_scope_name="github.com/acemq/acemq-flow/engine",outcome="failed",pipeline="orders",step="charge"} 10
# TYPE acemq_pipeline_run_duration_seconds histogram
acemq_pipeline_run_duration_seconds_bucket{pipeline="orders",le="0.1"} 0
acemq_pipeline_run_duration_seconds_bucket{pipeline="orders",le="1"} 50
acemq_pipeline_run_duration_seconds_bucket{pipeline="orders",le="10"} 100
acemq_pipeline_run_duration_seconds_bucket{pipeline="orders",le="+Inf"} 100
acemq_pipeline_run_duration_seconds_sum{pipeline="orders"} 150
acemq_pipeline_run_duration_seconds_count{pipeline="orders"} 100
# TYPE acemq_flow_step_duration_seconds histogram
acemq_flow_step_duration_seconds_bucket{flow="orders",outcome="completed",step="charge",le="0.01"} 20
acemq_flow_step_duration_seconds_bucket{flow="orders",outcome="completed",step="charge",le="0.1"} 80
acemq_flow_step_duration_seconds_bucket{flow="orders",outcome="completed",step="charge",le="1"} 90
acemq_flow_step_duration_seconds_bucket{flow="orders",outcome="completed",step="charge",le="+Inf"} 90
acemq_flow_step_duration_seconds_sum{flow="orders",outcome="completed",step="charge"} 4.5
acemq_flow_step_duration_seconds_count{flow="orders",outcome="completed",step="charge"} 90
acemq_flow_step_duration_seconds_bucket{flow="orders",outcome="failed",step="charge",le="0.01"} 0
acemq_flow_step_duration_seconds_bucket{flow="orders",outcome="failed",step="charge",le="0.1"} 5
acemq_flow_step_duration_seconds_bucket{flow="orders",outcome="failed",step="charge",le="1"} 10.5
acemq_flow_step_duration_seconds_bucket{flow="orders",outcome="failed",step="charge",le="+Inf"} 10.5
acemq_flow_step_duration_seconds_sum{flow="orders",outcome="failed",step="charge"} 3
acemq_flow_step_duration_seconds_count{flow="orders",outcome="failed",step="charge"} 10.5
# TYPE acemq_flow_steps_active gauge
acemq_flow_steps_active{flow="orders",step="charge"} 3
# TYPE acemq_queue_depth gauge
acemq_queue_depth{flow="orders",queue="orders.charge.dlq",role="dead_letter"} 4
acemq_queue_depth{flow="orders",queue="orders.charge",role="step"} 7
acemq_queue_depth{flow="orders",queue="orders.compensate.charge.dlq",role="compensation_dead_letter"} 2
# TYPE go_goroutines gauge
go_goroutines 42
`

func TestParseSnapshot(t *testing.T) {
	t.Parallel()
	at := time.Date(2026, 12, 24, 9, 0, 0, 0, time.UTC)
	s, err := parseSnapshot(strings.NewReader(exposition), at)
	require.NoError(t, err)
	flow, charge := stepKey{flow: "orders"}, stepKey{flow: "orders", step: "charge"}
	require.Equal(t, at, s.at)
	require.Equal(t, map[stepKey]float64{flow: 100, charge: 100.5}, s.done, "runs leaving the flow, and steps done in any outcome")
	require.Equal(t, map[stepKey]float64{flow: 10, charge: 10.5}, s.failed)
	require.Equal(t, hist{bounds: []float64{0.1, 1, 10, math.Inf(1)}, counts: []float64{0, 50, 100, 100}}, s.durations[flow])
	require.Equal(t, hist{bounds: []float64{0.01, 0.1, 1, math.Inf(1)}, counts: []float64{20, 85, 100.5, 100.5}}, s.durations[charge],
		"the outcomes summed, integer and float counts alike")
	require.Equal(t, map[stepKey]float64{charge: 3}, s.active)
	require.Equal(t, map[string]deadLetters{"orders.charge.dlq": {key: charge, depth: 4}}, s.dlq, "dead-letter queues of steps only")

	_, err = parseSnapshot(strings.NewReader("acemq_flow_steps_active{flow=\"x\" 1\n"), at)
	require.ErrorContains(t, err, "read the metrics:")
	s, err = parseSnapshot(strings.NewReader(""), at)
	require.NoError(t, err)
	require.Empty(t, s.done)
}

func TestQuantile(t *testing.T) {
	t.Parallel()
	inf := math.Inf(1)
	micro := hist{bounds: append(engine.DurationBuckets(), inf)}
	for _, b := range micro.bounds {
		switch {
		case b >= 0.0005:
			micro.counts = append(micro.counts, 100)
		case b >= 0.00025:
			micro.counts = append(micro.counts, 90)
		default:
			micro.counts = append(micro.counts, 0)
		}
	}
	h := hist{bounds: []float64{1, 2, 4, inf}, counts: []float64{10, 20, 40, 40}}
	for _, tc := range []struct {
		name string
		h    hist
		q    float64
		want float64
	}{
		{"median at a bucket's top", h, 0.5, 2},
		{"first bucket starts at zero", h, 0.25, 1},
		{"interpolated", h, 0.99, 2 + 2*19.6/20},
		{"beyond the last finite bound", hist{bounds: []float64{1, 2, 4, inf}, counts: []float64{0, 0, 0, 10}}, 0.5, 4},
		{"empty buckets below", hist{bounds: []float64{1, 2, 4, inf}, counts: []float64{0, 0, 8, 8}}, 0.5, 3},
		// Steps of 100-250 µs and a few of up to 500 µs, on the engine's
		// buckets.
		{"the engine's buckets, median", micro, 0.5, 0.0001 + 0.00015*50.0/90},
		{"the engine's buckets, p99", micro, 0.99, 0.00025 + 0.00025*9.0/10},
	} {
		require.InDelta(t, tc.want, tc.h.quantile(tc.q), 1e-9, tc.name)
	}
	require.True(t, math.IsNaN(hist{}.quantile(0.5)), "empty")
	require.True(t, math.IsNaN(hist{bounds: []float64{1, inf}, counts: []float64{0, 0}}.quantile(0.5)), "nothing observed")
	require.True(t, math.IsNaN(hist{bounds: []float64{inf}, counts: []float64{5}}.quantile(0.5)), "no finite bound")
}

// TestHistAdd: histograms on the same bounds add bucket by bucket; on
// other bounds (a worker of another version) on the bounds both have.
func TestHistAdd(t *testing.T) {
	t.Parallel()
	inf := math.Inf(1)
	var h hist
	h.add(hist{bounds: []float64{1, inf}, counts: []float64{1, 2}})
	h.add(hist{bounds: []float64{1, inf}, counts: []float64{3, 5}})
	require.Equal(t, []float64{4, 7}, h.counts)
	require.Equal(t, 7.0, h.total())

	// The engine's step buckets before (from 5 ms) and now (from 100 µs).
	old := hist{bounds: []float64{0.005, 0.01, 0.075, 1, inf}, counts: []float64{6, 8, 9, 10, 10}}
	now := hist{bounds: []float64{0.0001, 0.00025, 0.005, 0.01, 0.05, 1, inf}, counts: []float64{1, 3, 4, 5, 5, 6, 6}}
	h = hist{}
	h.add(now)
	h.add(old)
	require.Equal(t, hist{bounds: []float64{0.005, 0.01, 1, inf}, counts: []float64{10, 13, 16, 16}}, h)
	require.Equal(t, 16.0, h.total(), "every observation of both counts")
	require.Equal(t, []float64{1, 3, 4, 5, 5, 6, 6}, now.counts, "what was added is left as it was")
}

func TestIncrease(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		vals []float64
		want float64
	}{
		{nil, 0},
		{[]float64{5}, 0},
		{[]float64{1, 3, 6}, 5},
		{[]float64{10, 12, 2, 5}, 7}, // restarted at 2: counted from zero
		{[]float64{4, 4, 4}, 0},
	} {
		require.Equal(t, tc.want, increase(tc.vals), "%v", tc.vals)
	}
}

// snap is a snapshot of one flow, "orders": runs done and failed, its
// charge step's done count, what runs now, and its dead letters.
func snap(at time.Time, runs, failed, charged float64, active map[string]float64, dlq float64) snapshot {
	flow, charge := stepKey{flow: "orders"}, stepKey{flow: "orders", step: "charge"}
	inf := math.Inf(1)
	s := snapshot{at: at,
		done:      map[stepKey]float64{flow: runs, charge: charged},
		failed:    map[stepKey]float64{flow: failed},
		durations: map[stepKey]hist{charge: {bounds: []float64{0.01, 0.1, inf}, counts: []float64{charged / 2, charged, charged}}},
		active:    map[stepKey]float64{},
		dlq:       map[string]deadLetters{"orders.charge.dlq": {key: charge, depth: dlq}},
	}
	for step, n := range active {
		s.active[stepKey{flow: "orders", step: step}] = n
	}
	return s
}

func TestAggregate(t *testing.T) {
	t.Parallel()
	t0 := time.Date(2026, 12, 24, 9, 0, 0, 0, time.UTC)
	at := func(s int) time.Time { return t0.Add(time.Duration(s) * time.Second) }
	rows := aggregate([][]snapshot{
		// A: 10 runs/s, 2 failed/s, 5 charges/s over 2 s.
		{snap(at(0), 100, 10, 100, nil, 4), snap(at(1), 110, 12, 105, nil, 4), snap(at(2), 120, 14, 110, map[string]float64{"charge": 3}, 4)},
		// B: restarted (its counters fell), 5 runs/s over 4 s.
		{snap(at(0), 50, 0, 0, nil, 4), snap(at(4), 20, 0, 0, map[string]float64{"charge": 2, "validate": 1}, 3)},
		// C: one scrape so far: no rate, but what runs now counts.
		{snap(at(4), 1000, 1000, 1000, map[string]float64{"ship": 1}, 0)},
	})
	byKey := map[stepKey]row{}
	for _, r := range rows {
		byKey[stepKey{r.flow, r.step}] = r
	}
	require.Len(t, byKey, 4, "orders, and its charge, validate and ship")

	flow := byKey[stepKey{flow: "orders"}]
	require.InDelta(t, 15, flow.rate, 1e-9)
	require.InDelta(t, 2, flow.failRate, 1e-9)
	require.Equal(t, 7.0, flow.inFlight, "3 + 2 + 1 + 1")
	require.Equal(t, 4.0, flow.dlq, "one broker's queue, read by three workers, counted once (the deepest)")
	require.True(t, math.IsNaN(flow.p50), "no run durations served")

	charge := byKey[stepKey{flow: "orders", step: "charge"}]
	require.InDelta(t, 5, charge.rate, 1e-9)
	require.InDelta(t, 0, charge.failRate, 1e-9)
	require.Equal(t, 5.0, charge.inFlight)
	require.Equal(t, 4.0, charge.dlq)
	require.InDelta(t, 0.01, charge.p50, 1e-9, "half the window's charges took at most 10 ms")
	require.InDelta(t, 0.01+0.09*0.98, charge.p99, 1e-9)

	validate := byKey[stepKey{flow: "orders", step: "validate"}]
	require.Equal(t, 1.0, validate.inFlight)
	require.True(t, math.IsNaN(validate.rate), "nothing done: no rate")
	require.True(t, math.IsNaN(validate.p99))

	require.Empty(t, aggregate(nil))
}

func TestSortRows(t *testing.T) {
	t.Parallel()
	nan := math.NaN()
	r := func(flow, step string, rate, dlq float64) row {
		return row{flow: flow, step: step, rate: rate, failRate: nan, p50: nan, p99: nan, dlq: dlq}
	}
	rows := []row{
		r("b", "", 1, 0), r("b", "x", 1, 0),
		r("a", "", 5, 3), r("a", "ship", nan, 1), r("a", "charge", 3, 2), r("a", "validate", 5, 0),
	}
	names := func(rows []row) string {
		var out []string
		for _, r := range rows {
			out = append(out, strings.TrimSuffix(r.flow+"/"+r.step, "/"))
		}
		return strings.Join(out, " ")
	}
	require.Equal(t, "a a/charge a/ship a/validate b b/x", names(sortRows(rows, sortName, false)))
	require.Equal(t, "b b/x a a/validate a/ship a/charge", names(sortRows(rows, sortName, true)))
	require.Equal(t, "a a/validate a/charge a/ship b b/x", names(sortRows(rows, sortRate, false)), "largest first, unknown last")
	require.Equal(t, "b b/x a a/charge a/validate a/ship", names(sortRows(rows, sortRate, true)), "unknown last either way")
	require.Equal(t, "a a/charge a/ship a/validate b b/x", names(sortRows(rows, sortDLQ, false)))
}

func TestSortKeyFlag(t *testing.T) {
	t.Parallel()
	var k sortKey
	require.Equal(t, "name", k.String())
	for i, sk := range sortKeys {
		require.NoError(t, k.Set(sk.flag))
		require.Equal(t, sortKey(i), k)
	}
	require.EqualError(t, k.Set("speed"), `unknown sort key "speed", want one of name, runs, failures, in-flight, p50, p99, queue, dlq`)
}

func TestMetricsURL(t *testing.T) {
	t.Parallel()
	for in, want := range map[string]string{
		"http://127.0.0.1:9464":           "http://127.0.0.1:9464/metrics",
		"127.0.0.1:9464":                  "http://127.0.0.1:9464/metrics",
		" worker-1:9464/ ":                "http://worker-1:9464/metrics",
		"https://w.example/acemq/metrics": "https://w.example/acemq/metrics",
	} {
		got, err := metricsURL(in)
		require.NoError(t, err, in)
		require.Equal(t, want, got, in)
	}
	for _, bad := range []string{"", "ftp://x:1", "http://", "http://[::1"} {
		_, err := metricsURL(bad)
		require.ErrorContains(t, err, "want a metrics endpoint such as http://127.0.0.1:9464", bad)
	}
	require.Equal(t, "127.0.0.1:9464", shortSource("http://127.0.0.1:9464/metrics"))
	require.Equal(t, "https://w.example/acemq/metrics", shortSource("https://w.example/acemq/metrics"))
}

func TestTopFormatting(t *testing.T) {
	t.Parallel()
	for v, want := range map[float64]string{math.NaN(): "-", 0: "0.0", 12.34: "12.3", 9999.9: "9999.9", 12345: "12.3k"} {
		require.Equal(t, want, rate(v), "%v", v)
	}
	for v, want := range map[float64]string{
		math.NaN(): "-", 0.0004: "400µs", 0.0025: "2.5ms", 0.0247: "25ms", 0.5: "500ms", 1.234: "1.23s", 90: "1m30s",
	} {
		require.Equal(t, want, seconds(v), "%v", v)
	}
}

// manyFlows is a refresh of one worker serving flows f0..f(n-1) of four
// steps each, and of a worker that does not answer.
func manyFlows(n int, at time.Time) scrapedMsg {
	s := snapshot{at: at, done: map[stepKey]float64{}, failed: map[stepKey]float64{}, durations: map[stepKey]hist{},
		active: map[stepKey]float64{}, dlq: map[string]deadLetters{}}
	for i := range n {
		flow := fmt.Sprintf("f%d-with-a-name-long-enough-to-be-cut-short", i)
		s.done[stepKey{flow: flow}] = float64(i)
		for _, step := range []string{"validate", "charge", "reserve", "ship"} {
			s.active[stepKey{flow: flow, step: step}] = float64(i)
		}
	}
	return scrapedMsg{results: []scrapeResult{{snap: s}, {err: errors.New("dial tcp 127.0.0.1:1: connect: connection refused")}}}
}

// TestTopScreenFitsAndScrolls: at 80x24 the screen is 24 lines of at most
// 80 cells, names the worker that does not answer, and scrolls through
// more rows than fit; the keys sort and quit.
func TestTopScreenFitsAndScrolls(t *testing.T) {
	t.Parallel()
	m := newTopModel(t.Context(), []string{"http://127.0.0.1:9464/metrics", "http://127.0.0.1:1/metrics"}, sortName, time.Second)
	screen := func() []string {
		lines := strings.Split(m.View(), "\n")
		require.Len(t, lines, 24)
		for _, l := range lines {
			require.LessOrEqual(t, ansi.StringWidth(l), 80, l)
		}
		return lines
	}
	lines := screen()
	require.Contains(t, lines[0], "acemq-flow top · 2 endpoints · sort: name ↑ · last 10s")
	require.Contains(t, strings.Join(lines, "\n"), "reading http://127.0.0.1:9464/metrics, http://127.0.0.1:1/metrics …")

	m.record(manyFlows(6, time.Now()), time.Now())
	lines = screen()
	require.Contains(t, lines[0], "acemq-flow top · endpoints 1 up, 1 down · sort: name ↑", "the endpoint that refuses is down, not a worker")
	require.Equal(t, "down: 127.0.0.1:1: dial tcp 127.0.0.1:1: connect: connection refused", ansi.Strip(lines[1]))
	require.Regexp(t, `^FLOW / STEP\s+RUNS/S\s+FAIL/S\s+IN FLIGHT\s+P50\s+P99\s+QUEUE\s+DLQ$`, ansi.Strip(lines[2]))
	require.Regexp(t, `^f0-with-a-name-long-en…\s+-\s+-\s+0\s+-\s+-\s+-\s+0$`, ansi.Strip(lines[3]))
	require.Regexp(t, `^  charge\s+`, ansi.Strip(lines[4]))
	require.Contains(t, lines[23], "rows 1-20 of 30")

	m.press("end")
	lines = screen()
	require.Contains(t, lines[23], "rows 11-30 of 30")
	require.Regexp(t, `^  validate\s+-\s+-\s+5\s+`, ansi.Strip(lines[22]), "the last flow's last step")
	m.press("pgup")
	require.Contains(t, screen()[23], "rows 1-20 of 30")
	m.press("down")
	require.Contains(t, screen()[23], "rows 2-21 of 30")
	m.press("pgdown")
	require.Contains(t, screen()[23], "rows 11-30 of 30", "no further than the last row")
	m.press("home")
	require.Contains(t, screen()[23], "rows 1-20 of 30")

	m.press("s")
	require.Contains(t, screen()[0], "sort: runs/s ↓")
	m.press("tab")
	m.press("s")
	lines = screen()
	require.Contains(t, lines[0], "sort: in flight ↓")
	require.Regexp(t, `^f5-`, ansi.Strip(lines[3]), "the busiest flow first")
	m.press("r")
	require.Contains(t, screen()[0], "sort: in flight ↑")
	m.press("S")
	m.press("shift+tab")
	m.press("S")
	require.Contains(t, screen()[0], "sort: name ↓")

	_, _ = m.Update(tea.WindowSizeMsg{Width: 100, Height: 10})
	lines = strings.Split(m.View(), "\n")
	require.Len(t, lines, 10)
	require.Contains(t, lines[9], "rows 1-6 of 30")

	require.Nil(t, m.press("x"), "other keys do nothing")
	require.Equal(t, tea.QuitMsg{}, m.press("q")())
	require.Equal(t, tea.QuitMsg{}, m.press("ctrl+c")())
}
