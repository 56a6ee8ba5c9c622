package benchmark_test

import (
	"context"
	"os/exec"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/stretchr/testify/require"
	"go.uber.org/goleak"

	"github.com/acemq/acemq-flow/internal/benchmark"
	"github.com/acemq/acemq-flow/internal/testenv"
)

func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

// progress records the steps a run reports.
type progress struct {
	mu    sync.Mutex
	steps []benchmark.Step
}

func (p *progress) add(s benchmark.Step) {
	p.mu.Lock()
	p.steps = append(p.steps, s)
	p.mu.Unlock()
}

// requireConsistent checks what every report must be: each figure
// positive, ratios worked out from the values, and progress counted to its
// total.
func requireConsistent(t *testing.T, rep *benchmark.Report, p *progress) {
	t.Helper()
	require.NotEmpty(t, rep.Results)
	for _, r := range rep.Results {
		require.Positive(t, r.Value, r.Name)
		require.Positive(t, r.Messages, r.Name)
		require.Contains(t, []string{benchmark.HigherIsBetter, benchmark.LowerIsBetter}, r.Better, r.Name)
		if r.Baseline != "" {
			require.Positive(t, r.BaselineValue, r.Name)
			require.InDelta(t, r.Value/r.BaselineValue, r.Ratio, 1e-9, r.Name)
		} else {
			require.Zero(t, r.Ratio, r.Name)
		}
		if r.CPU > 0 && r.BaselineCPU > 0 {
			require.InDelta(t, r.CPU/r.BaselineCPU, r.CPURatio, 1e-9, r.Name)
		}
	}
	require.NotEmpty(t, p.steps)
	last := p.steps[len(p.steps)-1]
	require.Equal(t, "done", last.Name)
	require.Equal(t, last.Total, last.Done)
	require.Len(t, p.steps, last.Total+1, "one step per part, and done")
	for i, s := range p.steps {
		require.Equal(t, i, s.Done, s.Name)
	}
}

// names are the results' names, in order.
func names(rep *benchmark.Report) []string {
	var out []string
	for _, r := range rep.Results {
		out = append(out, r.Name)
	}
	return out
}

func TestRunOnTheEmbeddedBroker(t *testing.T) {
	t.Parallel()
	var p progress
	cfg := benchmark.Config{URL: "memory://" + testenv.Name(t, "bench"), N: 60, LadderDelay: 300 * time.Millisecond,
		Logger: testenv.Logger(t), Progress: p.add}
	rep, err := benchmark.Run(t.Context(), cfg, nil)
	require.NoError(t, err)
	require.Equal(t, "the embedded in-process broker", rep.Broker)
	require.Equal(t, []string{
		"confirmed publish", "acknowledged consume",
		"3-step flow", "3-step flow, run latency p50", "3-step flow, run latency p99",
		"ladder lateness p50", "ladder lateness p99",
		"request/reply, 16 callers", "request/reply, 16 callers, p50", "request/reply, 16 callers, p99",
	}, names(rep))
	require.Contains(t, rep.Skipped, "outbox: needs a database")
	require.Contains(t, rep.Skipped, "fanout: needs a database")
	require.Contains(t, rep.Skipped, "limits: needs a database")
	requireConsistent(t, rep, &p)
	for _, r := range rep.Results {
		if r.Scenario == "ladder" {
			require.NotEmpty(t, r.Baseline, "the TTL queue needs no RabbitMQ")
		} else {
			require.Empty(t, r.Baseline, "%s: amqp091-go needs RabbitMQ", r.Name)
		}
	}
}

func TestRunRefusesWhatItCannotDo(t *testing.T) {
	t.Parallel()
	url := "memory://" + testenv.Name(t, "bench")
	_, err := benchmark.Run(t.Context(), benchmark.Config{URL: url, N: 10}, []string{"outbox"})
	require.ErrorIs(t, err, benchmark.ErrNoDatabase)
	_, err = benchmark.Run(t.Context(), benchmark.Config{URL: url, N: 10}, []string{"fanout"})
	require.ErrorIs(t, err, benchmark.ErrNoDatabase)
	_, err = benchmark.Run(t.Context(), benchmark.Config{URL: url, FanoutItems: -1}, nil)
	require.ErrorContains(t, err, "fan-out items")
	_, err = benchmark.Run(t.Context(), benchmark.Config{URL: url, ID: "Not-Valid"}, nil)
	require.ErrorContains(t, err, "lower-case")
	_, err = benchmark.ParseOnly("core,nope")
	require.ErrorContains(t, err, `unknown scenario "nope", want some of core,flow,ladder,outbox,request,fanout,limits`)
	only, err := benchmark.ParseOnly(" request, core,core")
	require.NoError(t, err)
	require.Equal(t, []string{"core", "request"}, only)
}

func TestACancelledRunDeletesWhatItDeclared(t *testing.T) {
	t.Parallel()
	url := testenv.RabbitURL(t)
	if _, err := exec.LookPath("rabbitmqctl"); err != nil {
		t.Skip("rabbitmqctl is not installed")
	}
	ctx, cancel := context.WithCancel(t.Context())
	defer cancel()
	cfg := benchmark.Config{URL: url, N: 1_000_000, ID: randomID(t), Logger: testenv.Logger(t),
		Progress: func(s benchmark.Step) {
			if s.Name == "flow: engine, journal in memory" {
				// Cancelled while runs are under way.
				time.AfterFunc(time.Second, cancel)
			}
		}}
	_, err := benchmark.Run(ctx, cfg, []string{"flow"})
	require.ErrorIs(t, err, context.Canceled)
	require.Empty(t, leftQueues(t, cfg.ID))
}

func TestRunOnRabbitMQAndPostgreSQL(t *testing.T) {
	t.Parallel()
	url := testenv.RabbitURL(t)
	db, err := pgxpool.New(t.Context(), testenv.DatabaseURL(t))
	require.NoError(t, err)
	t.Cleanup(db.Close)
	var p progress
	cfg := benchmark.Config{URL: url, DB: db, DatabaseName: "test", N: 200, LadderDelay: 500 * time.Millisecond,
		ID: randomID(t), Logger: testenv.Logger(t), Progress: p.add}
	rep, err := benchmark.Run(t.Context(), cfg, nil)
	require.NoError(t, err)
	require.Regexp(t, `^RabbitMQ \S+ at amqp://guest@`, rep.Broker, "no password")
	require.Equal(t, []string{
		"confirmed publish", "acknowledged consume",
		"3-step flow", "3-step flow", "3-step flow, run latency p50", "3-step flow, run latency p99",
		"3-step flow, journal on PostgreSQL", "3-step flow, on PostgreSQL",
		"ladder lateness p50", "ladder lateness p99",
		"outbox relay",
		"request/reply, 16 callers", "request/reply, 16 callers, p50", "request/reply, 16 callers, p99",
		"ForEach in one run", "ForEach in one run, peak RSS",
		"a step with a ConcurrencyKey",
	}, names(rep))
	require.Empty(t, rep.Skipped)
	requireConsistent(t, rep, &p)
	for _, r := range rep.Results {
		require.NotEmpty(t, r.Baseline, r.Name)
		if r.Scenario == "fanout" {
			require.Equal(t, 10*cfg.N, r.Messages, "%s: 10 N items, and as many runs", r.Name)
		}
		if (r.Unit != "ms" && r.Unit != "MB") || r.Name == "ladder lateness p50" {
			require.Positive(t, r.CPU, r.Name)
			require.Positive(t, r.BaselineCPU, r.Name)
		}
	}
	if _, err := exec.LookPath("rabbitmqctl"); err == nil {
		require.Empty(t, leftQueues(t, cfg.ID))
	}
	var tables int
	require.NoError(t, db.QueryRow(t.Context(), "SELECT count(*) FROM pg_tables WHERE tablename LIKE $1",
		benchmark.TablePrefix(cfg.ID)+"%").Scan(&tables))
	require.Zero(t, tables, "every table dropped")
}

// randomID is an ID of the test's own.
func randomID(t *testing.T) string {
	name := testenv.Name(t, "x")
	return name[len(name)-12:]
}

// leftQueues lists the queues of the run with this ID still on the
// broker.
func leftQueues(t *testing.T, id string) []string {
	t.Helper()
	out, err := exec.CommandContext(t.Context(), "rabbitmqctl", "-q", "list_queues", "name").CombinedOutput()
	require.NoError(t, err, string(out))
	var left []string
	for _, q := range strings.Fields(string(out)) {
		if strings.HasPrefix(q, benchmark.Prefix(id)) {
			left = append(left, q)
		}
	}
	return left
}
