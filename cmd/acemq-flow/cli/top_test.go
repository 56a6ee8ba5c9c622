package cli

import (
	"context"
	"fmt"
	"net/http"
	"net/http/httptest"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/acemq/acemq-flow/engine"
	"github.com/acemq/acemq-flow/internal/testenv"
)

// steadyWorker serves /metrics as a worker in a steady state would: its
// counters grow at fixed rates from when it started, its histograms in
// fixed proportions, its gauges stay put. So whenever top reads it, the
// rates are the ones below and the percentiles exact:
//
//	orders         12 runs/s leave it, 2 of them failed; run p50 667 ms, p99 993 ms
//	  charge       10 done/s, 2 failed; p50 15 ms, p99 24.8 ms; 3 running; 5 dead letters
//	  ship         4 running
//	refunds
//	  refund       1 running; 2 dead letters
func steadyWorker(t *testing.T) *httptest.Server {
	t.Helper()
	start := time.Now()
	// The buckets the engine's histograms are served with.
	buckets := engine.DurationBuckets()
	// hist writes a histogram growing by perSecond observations, whose
	// cumulative share at each bound is share(bound).
	hist := func(b *strings.Builder, name, labels string, perSecond float64, share func(float64) float64, e float64) {
		n := perSecond * (e + 10)
		num := func(v float64) string { return strconv.FormatFloat(v, 'f', -1, 64) }
		for _, le := range buckets {
			fmt.Fprintf(b, "%s_bucket{%s,le=\"%s\"} %s\n", name, labels, num(le), num(n*share(le)))
		}
		fmt.Fprintf(b, "%s_bucket{%s,le=\"+Inf\"} %s\n%s_count{%s} %s\n", name, labels, num(n), name, labels, num(n))
	}
	// upTo is the share of observations at or below a bound: none below
	// mid, a quarter from mid, all from hi on (no percentile falls on a
	// bound, where rounding could tip it either way).
	upTo := func(mid, hi float64) func(float64) float64 {
		return func(le float64) float64 {
			switch {
			case le >= hi:
				return 1
			case le >= mid:
				return 0.25
			}
			return 0
		}
	}
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) {
		e := time.Since(start).Seconds()
		var b strings.Builder
		scope := `otel_scope_name="github.com/acemq/acemq-flow/engine"`
		b.WriteString("# TYPE acemq_pipeline_run_total counter\n")
		fmt.Fprintf(&b, "acemq_pipeline_run_total{%s,outcome=\"completed\",pipeline=\"orders\",step=\"ship\"} %f\n", scope, 10*(e+10))
		fmt.Fprintf(&b, "acemq_pipeline_run_total{%s,outcome=\"failed\",pipeline=\"orders\",step=\"charge\"} %f\n", scope, 2*(e+10))
		b.WriteString("# TYPE acemq_pipeline_run_duration_seconds histogram\n")
		hist(&b, "acemq_pipeline_run_duration_seconds", scope+`,pipeline="orders"`, 12, upTo(0.5, 1), e)
		b.WriteString("# TYPE acemq_flow_step_duration_seconds histogram\n")
		hist(&b, "acemq_flow_step_duration_seconds", scope+`,flow="orders",outcome="completed",step="charge"`, 8, upTo(0.01, 0.025), e)
		hist(&b, "acemq_flow_step_duration_seconds", scope+`,flow="orders",outcome="failed",step="charge"`, 2, upTo(0.01, 0.025), e)
		b.WriteString("# TYPE acemq_flow_steps_active gauge\n")
		for _, s := range []string{`flow="orders",step="charge"} 3`, `flow="orders",step="ship"} 4`, `flow="refunds",step="refund"} 1`} {
			fmt.Fprintf(&b, "acemq_flow_steps_active{%s,%s\n", scope, s)
		}
		b.WriteString("# TYPE acemq_queue_depth gauge\n")
		for _, s := range []string{
			`flow="orders",queue="orders.charge.dlq",role="dead_letter"} 5`, `flow="orders",queue="orders.charge",role="step"} 9`,
			`flow="orders",queue="orders.ship.dlq",role="dead_letter"} 0`, `flow="refunds",queue="refunds.refund.dlq",role="dead_letter"} 2`,
		} {
			fmt.Fprintf(&b, "acemq_queue_depth{%s\n", s)
		}
		w.Header().Set("Content-Type", "text/plain; version=0.0.4")
		fmt.Fprint(w, b.String())
	}))
	t.Cleanup(srv.Close)
	return srv
}

// tmuxScreen is a program running in a detached tmux session of its own,
// on a terminal of a given size, whose screen the test reads.
type tmuxScreen struct {
	t      *testing.T
	socket string
	status string
}

// runInTmux runs the command line in a new tmux server of the test's own
// on an 80x24 terminal; its exit status is written to a file when it
// exits, also when Ctrl-C stopped it. The server is killed when the test ends.
func runInTmux(t *testing.T, args ...string) *tmuxScreen {
	t.Helper()
	if _, err := exec.LookPath("tmux"); err != nil {
		if testenv.Required() {
			t.Fatalf("tmux is not installed and ACEMQ_REQUIRE_SERVICES=1: %v", err)
		}
		t.Skipf("tmux drives the terminal UI test: %v", err)
	}
	s := &tmuxScreen{t: t, socket: testenv.Name(t, "tmux"), status: filepath.Join(t.TempDir(), "status")}
	quoted := make([]string, len(args))
	for i, a := range args {
		quoted[i] = shellQuote(a)
	}
	// The shell outlives a Ctrl-C sent to the program (its trap is not
	// inherited), to write the program's status.
	script := "trap : INT; " + strings.Join(quoted, " ") + "; echo $? > " + shellQuote(s.status)
	// The pane stays once the program exited, for its last screen to be
	// read.
	s.tmux("new-session", "-d", "-x", "80", "-y", "24", "-s", "top", "sh", "-c", script, ";", "set-option", "-t", "top", "remain-on-exit", "on")
	t.Cleanup(func() {
		// The server exits with its last session; kill it if the
		// program is still running.
		_ = exec.Command("tmux", "-L", s.socket, "kill-server").Run()
	})
	return s
}

// tmux runs a tmux command on the test's server.
func (s *tmuxScreen) tmux(args ...string) string {
	s.t.Helper()
	out, err := s.try(args...)
	require.NoError(s.t, err)
	return out
}

// try runs a tmux command on the test's server, failing with what it
// said.
func (s *tmuxScreen) try(args ...string) (string, error) {
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	cmd := exec.CommandContext(ctx, "tmux", append([]string{"-L", s.socket}, args...)...)
	cmd.Env = append(cleanEnviron(), "TERM=xterm-256color")
	out, err := cmd.CombinedOutput()
	if err != nil {
		return "", fmt.Errorf("tmux %v: %w: %s", args, err, out)
	}
	return string(out), nil
}

// waitFor reads the screen until every pattern matches it, and returns
// it.
func (s *tmuxScreen) waitFor(patterns ...string) string {
	s.t.Helper()
	var screen string
	require.EventuallyWithT(s.t, func(c *assert.CollectT) {
		out, err := s.try("capture-pane", "-p", "-t", "top")
		require.NoError(c, err)
		screen = out
		for _, p := range patterns {
			assert.Regexp(c, p, screen)
		}
	}, 15*time.Second, 50*time.Millisecond)
	return screen
}

// exitStatus waits for the program to exit and returns its status.
func (s *tmuxScreen) exitStatus() int {
	s.t.Helper()
	var out []byte
	require.Eventually(s.t, func() bool {
		b, err := os.ReadFile(s.status)
		out = b
		return err == nil && strings.HasSuffix(string(b), "\n")
	}, 10*time.Second, 20*time.Millisecond, "the program did not exit")
	code, err := strconv.Atoi(strings.TrimSpace(string(out)))
	require.NoError(s.t, err)
	return code
}

// columns are the figures of the screen's row for name (a flow, or
// "  step"): runs/s, fail/s, in flight, p50, p99, queue, dlq.
func columns(t *testing.T, screen, name string) []string {
	t.Helper()
	for line := range strings.Lines(screen) {
		if rest, ok := strings.CutPrefix(line, name+" "); ok {
			f := strings.Fields(rest)
			require.Len(t, f, 7, line)
			return f
		}
	}
	t.Fatalf("no row %q on the screen:\n%s", name, screen)
	return nil
}

// near requires a rate shown on the screen to be within 5% of want, plus
// the half of its last digit that rounding to one decimal may add (a rate
// of 2.06 shows as 2.1).
func near(t *testing.T, want float64, shown string) {
	t.Helper()
	v, err := strconv.ParseFloat(shown, 64)
	require.NoError(t, err, shown)
	require.InDelta(t, want, v, 0.05*want+0.05, shown)
}

// TestTopInATerminal drives `acemq-flow top` in tmux on an 80x24 terminal,
// against a worker serving steady metrics, one that answers 500 and an
// address nothing listens on: the screen shows the rates, running steps,
// percentiles and dead letters computed from what was served, names each
// worker that does not answer with its error, sorts on s, and q exits 0.
func TestTopInATerminal(t *testing.T) {
	t.Parallel()
	worker := steadyWorker(t)
	broken := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) {
		http.Error(w, "boom", http.StatusInternalServerError)
	}))
	t.Cleanup(broken.Close)
	s := runInTmux(t, testBinary(t), "top", "--from", worker.URL+","+broken.URL+",127.0.0.1:1")

	screen := s.waitFor(`(?m)^  charge\s+\d+\.\d\s`, `(?m)^orders\s+\d+\.\d\s`)
	lines := strings.Split(strings.TrimRight(screen, "\n"), "\n")
	require.Len(t, lines, 24, screen)
	require.Contains(t, lines[0], "acemq-flow top · endpoints 1 up, 2 down · sort: name ↑ · last 10s", "those that do not answer are down, not workers")
	require.Contains(t, screen, "down: "+shortSource(broken.URL+"/metrics")+": HTTP 500 Internal Server Error\n")
	require.Contains(t, screen, "down: 127.0.0.1:1: dial tcp 127.0.0.1:1: connect: connection refused\n")
	require.Regexp(t, `(?m)^FLOW / STEP\s+RUNS/S\s+FAIL/S\s+IN FLIGHT\s+P50\s+P99\s+QUEUE\s+DLQ$`, screen)
	require.Regexp(t, `(?m)^s/S sort · r reverse · ↑↓ PgUp PgDn scroll · q quit · rows 1-5 of 5$`, lines[23])

	orders := columns(t, screen, "orders")
	near(t, 12, orders[0])
	near(t, 2, orders[1])
	require.Equal(t, []string{"7", "667ms", "993ms", "-", "5"}, orders[2:], "no broker: no queue depth")
	charge := columns(t, screen, "  charge")
	near(t, 10, charge[0])
	near(t, 2, charge[1])
	require.Equal(t, []string{"3", "15ms", "25ms", "-", "5"}, charge[2:])
	require.Equal(t, []string{"-", "-", "4", "-", "-", "-", "0"}, columns(t, screen, "  ship"))
	require.Equal(t, []string{"-", "-", "1", "-", "-", "-", "2"}, columns(t, screen, "refunds"))
	require.Equal(t, []string{"-", "-", "1", "-", "-", "-", "2"}, columns(t, screen, "  refund"))
	// Flows A to Z, each followed by its steps.
	require.Regexp(t, `(?s)\norders .*\n  charge .*\n  ship .*\nrefunds .*\n  refund `, screen)

	s.tmux("send-keys", "-t", "top", "sss") // read as one input: each key still counts
	screen = s.waitFor(`sort: in flight ↓`)
	require.Regexp(t, `(?s)\norders .*\n  ship .*\n  charge .*\nrefunds `, screen, "ship runs more than charge")

	s.tmux("send-keys", "-t", "top", "q")
	require.Zero(t, s.exitStatus())
}

func TestTopRefusesBadFlags(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		args []string
		want string
	}{
		{[]string{"top", "--from", "ftp://x"}, `--from "ftp://x": want a metrics endpoint such as http://127.0.0.1:9464`},
		{[]string{"top", "--sort", "speed"}, `unknown sort key "speed"`},
		{[]string{"top", "--interval", "1ms"}, "--interval 1ms: want at least 100ms"},
		{[]string{"top", "--from", ""}, "--from: name at least one metrics endpoint"},
	} {
		r := execute(t, nil, tc.args...)
		require.Equal(t, 1, r.code, "%v", tc.args)
		require.Contains(t, r.stderr, tc.want, "%v", tc.args)
	}
	r := execute(t, nil, "top", "--help")
	require.Zero(t, r.code)
	for _, env := range []string{"$ACEMQ_FROM", "$ACEMQ_SORT", "$ACEMQ_INTERVAL"} {
		require.NotContains(t, r.stdout, env, "top's flags are per call")
	}
}
