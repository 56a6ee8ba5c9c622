package cli

import (
	"bytes"
	"context"
	"crypto/rand"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"net/url"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/stretchr/testify/require"
	"go.uber.org/goleak"

	"github.com/acemq/acemq-flow/broker"
	"github.com/acemq/acemq-flow/engine"
	"github.com/acemq/acemq-flow/engine/journal"
	"github.com/acemq/acemq-flow/internal/brokertest"
	"github.com/acemq/acemq-flow/internal/testenv"
)

// The integration tests run the command line as operators do: a binary,
// built once from testdata/testflows (acemq-flow with flows of the tests'
// own, through cli.Main), run as separate processes against RabbitMQ
// and PostgreSQL. Each test stays apart from every other on a shared
// broker and database: its flows are named after a prefix of its own
// (CLITEST_FLOW_PREFIX), it has a scheduler ladder of its own (--ladder),
// and its tables live in a PostgreSQL schema of its own, selected with
// search_path in the database URL, so that the binary's fixed table names
// never meet. Queues, exchanges, ladder and schema are deleted at the end.

// binDir holds the test binary for the life of the test process.
var binDir string

// TestMain makes the directory the test binary is built into, and fails
// the package if any test leaves a goroutine behind (a worker command not
// drained, a connection not closed).
func TestMain(m *testing.M) {
	dir, err := os.MkdirTemp("", "acemq-flow-cli-test")
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		os.Exit(1)
	}
	binDir = dir
	code := m.Run()
	os.RemoveAll(dir)
	if code == 0 {
		if err := goleak.Find(); err != nil {
			fmt.Fprintln(os.Stderr, err)
			code = 1
		}
	}
	os.Exit(code)
}

var (
	buildOnce sync.Once
	buildPath string
	buildErr  error
)

// testBinary builds testdata/testflows the first time a test needs it.
func testBinary(t *testing.T) string {
	t.Helper()
	buildOnce.Do(func() {
		path := filepath.Join(binDir, "acemq-flow")
		out, err := exec.Command("go", "build", "-o", path, "./testdata/testflows").CombinedOutput()
		if err != nil {
			buildErr = fmt.Errorf("go build ./testdata/testflows: %w\n%s", err, out)
			return
		}
		buildPath = path
	})
	require.NoError(t, buildErr)
	return buildPath
}

// commandTimeout bounds one command; a worker is stopped by the test.
const commandTimeout = 30 * time.Second

// cliFixture runs the test binary with an environment of the test's own.
type cliFixture struct {
	t      *testing.T
	bin    string
	h      *brokertest.Harness
	prefix string
	env    []string
	// dbURL is the database URL with the test's schema ("" without one).
	dbURL string
}

// newCLIFixture gates the test on RabbitMQ (and PostgreSQL when withDB),
// and arranges for everything the test's flows declare to be deleted.
func newCLIFixture(t *testing.T, withDB bool) *cliFixture {
	t.Helper()
	h := brokertest.New(t, testenv.RabbitURL(t), true)
	fx := &cliFixture{t: t, h: h, prefix: testenv.Name(t, "cli")}
	if withDB {
		fx.dbURL = testSchema(t)
	}
	fx.bin = testBinary(t)
	fx.env = append(cleanEnviron(), "CLITEST_FLOW_PREFIX="+fx.prefix, "ACEMQ_URL="+h.URL, "ACEMQ_LADDER="+h.Ladder)
	if fx.dbURL != "" {
		fx.env = append(fx.env, "ACEMQ_DATABASE_URL="+fx.dbURL)
	}
	var infos []engine.FlowInfo
	fx.runJSON(&infos, "flows", "list")
	require.NotEmpty(t, infos)
	for _, fi := range infos {
		for _, s := range fi.Steps {
			h.DeleteLater(s.Queue, s.Queue+broker.DeadLetterSuffix, s.Queue+broker.ParkedSuffix)
			if s.Compensation != "" {
				h.DeleteLater(s.Compensation, s.Compensation+broker.DeadLetterSuffix, s.Compensation+broker.ParkedSuffix)
			}
		}
		h.DeleteLater(fi.CompensateQueue, fi.CompensateQueue+broker.DeadLetterSuffix, fi.CompensateQueue+broker.ParkedSuffix)
		h.DeleteExchangeLater(fi.Name)
	}
	return fx
}

// cleanEnviron is the test process's environment without any ACEMQ_
// variable, which the binary would read as a flag.
func cleanEnviron() []string {
	var out []string
	for _, kv := range os.Environ() {
		if !strings.HasPrefix(kv, envPrefix) {
			out = append(out, kv)
		}
	}
	return out
}

// testSchema creates a schema of the test's own in the test database and
// returns the database URL that selects it; the schema is dropped, with
// every table in it, when the test ends.
func testSchema(t *testing.T) string {
	t.Helper()
	raw := testenv.DatabaseURL(t)
	var b [6]byte
	_, err := rand.Read(b[:])
	require.NoError(t, err)
	schema := "acemq_clitest_" + hex.EncodeToString(b[:])
	ctx, cancel := context.WithTimeout(t.Context(), 10*time.Second)
	defer cancel()
	conn, err := pgx.Connect(ctx, raw)
	require.NoError(t, err)
	defer conn.Close(context.Background())
	_, err = conn.Exec(ctx, "CREATE SCHEMA "+pgx.Identifier{schema}.Sanitize())
	require.NoError(t, err)
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer cancel()
		conn, err := pgx.Connect(ctx, raw)
		require.NoError(t, err)
		defer conn.Close(ctx)
		_, err = conn.Exec(ctx, "DROP SCHEMA "+pgx.Identifier{schema}.Sanitize()+" CASCADE")
		require.NoError(t, err)
	})
	u, err := url.Parse(raw)
	require.NoError(t, err)
	q := u.Query()
	q.Set("search_path", schema)
	u.RawQuery = q.Encode()
	return u.String()
}

// flow is the full name of one of testflows' flows.
func (fx *cliFixture) flow(name string) string { return fx.prefix + "." + name }

// command is the binary with the fixture's environment and extra
// variables.
func (fx *cliFixture) command(ctx context.Context, extraEnv []string, args ...string) *exec.Cmd {
	cmd := exec.CommandContext(ctx, fx.bin, args...)
	cmd.Env = append(append([]string(nil), fx.env...), extraEnv...)
	return cmd
}

// run runs one command to its end.
func (fx *cliFixture) run(args ...string) result {
	fx.t.Helper()
	return fx.runEnv(nil, args...)
}

// runEnv is run with extra environment variables.
func (fx *cliFixture) runEnv(extraEnv []string, args ...string) result {
	fx.t.Helper()
	ctx, cancel := context.WithTimeout(fx.t.Context(), commandTimeout)
	defer cancel()
	var stdout, stderr bytes.Buffer
	cmd := fx.command(ctx, extraEnv, args...)
	cmd.Stdout, cmd.Stderr = &stdout, &stderr
	err := cmd.Run()
	r := result{stdout: stdout.String(), stderr: stderr.String()}
	var ee *exec.ExitError
	switch {
	case errors.As(err, &ee):
		r.code = ee.ExitCode()
	case err != nil:
		fx.t.Fatalf("run %v: %v", args, err)
	}
	return r
}

// runJSON runs a command with -o json, requires it to succeed, and reads
// its one JSON document into v.
func (fx *cliFixture) runJSON(v any, args ...string) result {
	fx.t.Helper()
	r := fx.run(append(args, "-o", "json")...)
	require.Zero(fx.t, r.code, "%v: %s", args, r.stderr)
	dec := json.NewDecoder(strings.NewReader(r.stdout))
	require.NoError(fx.t, dec.Decode(v), r.stdout)
	require.False(fx.t, dec.More(), "one JSON document: %s", r.stdout)
	return r
}

// shownRun is what `runs show -o json` prints.
type shownRun struct {
	RunID      string         `json:"run_id"`
	Flow       string         `json:"flow"`
	Status     journal.Status `json:"status"`
	Step       string         `json:"step"`
	Error      string         `json:"error"`
	StartedAt  time.Time      `json:"started_at"`
	EndedAt    *time.Time     `json:"ended_at"`
	DeadLetter string         `json:"dead_letter"`
	Replays    int            `json:"replays"`
	Steps      []struct {
		Kind      journal.Kind `json:"kind"`
		Step      string       `json:"step"`
		Attempt   int          `json:"attempt"`
		Outcome   string       `json:"outcome"`
		StartedAt time.Time    `json:"started_at"`
		EndedAt   time.Time    `json:"ended_at"`
		Error     string       `json:"error"`
		Queue     string       `json:"queue"`
	} `json:"steps"`
}

// outcomes is the run's timeline as kind:step:outcome.
func (r shownRun) outcomes() []string {
	out := make([]string, len(r.Steps))
	for i, s := range r.Steps {
		out[i] = fmt.Sprintf("%s:%s:%s", s.Kind, s.Step, s.Outcome)
	}
	return out
}

// waitStatus polls `runs show` until the run has status.
func (fx *cliFixture) waitStatus(runID string, status journal.Status, within time.Duration) shownRun {
	fx.t.Helper()
	var last shownRun
	require.Eventually(fx.t, func() bool {
		r := fx.run("runs", "show", runID, "-o", "json")
		if r.code != 0 {
			return false
		}
		last = shownRun{}
		return json.Unmarshal([]byte(r.stdout), &last) == nil && last.Status == status
	}, within, 100*time.Millisecond, "run %s never became %s (last: %+v)", runID, status, last)
	return last
}

// start starts a run of flow and returns its id.
func (fx *cliFixture) start(flow, payload string) string {
	fx.t.Helper()
	var started engine.Started
	fx.runJSON(&started, "start", fx.flow(flow), "--payload", payload)
	require.NotEmpty(fx.t, started.RunID)
	require.Equal(fx.t, fx.flow(flow), started.Flow)
	return started.RunID
}

// workerProc is a worker running as a process of its own.
type workerProc struct {
	cmd    *exec.Cmd
	stderr *syncBuffer
	done   chan struct{}
	code   int
}

// startWorker starts a worker and waits until it works; it is stopped
// (SIGTERM, then waited for) when the test ends, if not before.
func (fx *cliFixture) startWorker() *workerProc {
	fx.t.Helper()
	// Not exec.CommandContext: the worker outlives this call, and is
	// stopped by a signal it drains on, not killed.
	cmd := fx.command(context.Background(), nil, "worker")
	w := &workerProc{cmd: cmd, stderr: &syncBuffer{}, done: make(chan struct{})}
	cmd.Stdout, cmd.Stderr = &bytes.Buffer{}, w.stderr
	require.NoError(fx.t, cmd.Start())
	go func() {
		defer close(w.done)
		err := cmd.Wait()
		var ee *exec.ExitError
		if errors.As(err, &ee) {
			w.code = ee.ExitCode()
		} else if err != nil {
			w.code = -1
		}
	}()
	fx.t.Cleanup(func() { w.stop(fx.t) })
	require.Eventually(fx.t, func() bool {
		select {
		case <-w.done:
			return true
		default:
			return strings.Contains(w.stderr.String(), `msg="worker started"`)
		}
	}, 20*time.Second, 20*time.Millisecond)
	require.Contains(fx.t, w.stderr.String(), `msg="worker started"`, "the worker exited: %s", w.stderr.String())
	return w
}

// stop sends SIGTERM and waits for the worker to drain and exit; it
// kills a worker that does not exit within the drain's deadline.
func (w *workerProc) stop(t *testing.T) int {
	t.Helper()
	select {
	case <-w.done:
		return w.code
	default:
	}
	require.NoError(t, w.cmd.Process.Signal(syscall.SIGTERM))
	select {
	case <-w.done:
	case <-time.After(broker.DefaultCloseTimeout + 10*time.Second):
		_ = w.cmd.Process.Kill()
		<-w.done
		t.Errorf("the worker did not exit on SIGTERM: %s", w.stderr.String())
	}
	return w.code
}

// TestOperatorCommandsOnRabbitMQAndPostgreSQL walks what an operator does:
// migrate, run a worker, start runs (now, later, with a payload that does
// not fit), list and show them, replay a failed run after the worker was
// restarted, and compensate a run held for replay.
func TestOperatorCommandsOnRabbitMQAndPostgreSQL(t *testing.T) {
	t.Parallel()
	fx := newCLIFixture(t, true)

	// migrate: everything once, then nothing.
	var mig migrateResult
	fx.runJSON(&mig, "migrate")
	require.NotEmpty(t, mig.Applied)
	require.Equal(t, 1, mig.Applied[0].Version)
	require.Equal(t, "outbox", mig.Applied[0].Name)
	require.Len(t, mig.Versions, len(mig.Applied))
	r := fx.run("migrate")
	require.Zero(t, r.code, r.stderr)
	require.Regexp(t, `is up to date \(migrations 1, 2, .*\)\n$`, r.stdout)

	down := filepath.Join(t.TempDir(), "payments-down")
	require.NoError(t, os.WriteFile(down, nil, 0o600))
	heldDown := filepath.Join(t.TempDir(), "payments-down-for-held")
	require.NoError(t, os.WriteFile(heldDown, nil, 0o600))

	w1 := fx.startWorker()
	require.NotContains(t, w1.stderr.String(), "no database")
	require.Contains(t, w1.stderr.String(), "shared_journal=true")

	ok := fx.start("orders", `{"id":"ok","amount":5}`)
	failing := fx.start("orders", fmt.Sprintf(`{"id":"failing","amount":5,"fail_while":%q}`, down))
	held := fx.start("held", fmt.Sprintf(`{"id":"held","amount":5,"fail_while":%q}`, heldDown))
	var later engine.Started
	fx.runJSON(&later, "start", fx.flow("orders"), "--payload", `{"id":"later","amount":1}`, "--in", "2s")
	require.WithinDuration(t, time.Now().Add(2*time.Second), later.DueAt, 2*time.Second)

	// A payload that does not fit: refused, nothing started.
	r = fx.run("start", fx.flow("orders"), "--payload", `{"id":"bad","amount":"lots"}`)
	require.Equal(t, 1, r.code)
	require.Empty(t, r.stdout)
	require.Contains(t, r.stderr, "payload does not fit the flow")
	require.Contains(t, r.stderr, `e.g. --payload '{"id":"o-1","amount":42}'`)

	// The run that completes, in full.
	done := fx.waitStatus(ok, journal.Completed, 15*time.Second)
	require.Equal(t, fx.flow("orders"), done.Flow)
	require.Equal(t, "ship", done.Step)
	require.NotNil(t, done.EndedAt)
	require.Equal(t, []string{"start::started by " + osUser(), "step:validate:completed", "step:charge:completed", "step:ship:completed"}, done.outcomes(),
		"the timeline says who started it: the OS user")
	for _, s := range done.Steps[1:] {
		require.Equal(t, 1, s.Attempt)
		require.Equal(t, fx.flow("orders")+"."+s.Step, s.Queue)
		require.False(t, s.EndedAt.Before(s.StartedAt))
	}

	failed := fx.waitStatus(failing, journal.Failed, 15*time.Second)
	require.Equal(t, "charge", failed.Step)
	require.Contains(t, failed.Error, "card declined")
	require.Equal(t, fx.flow("orders")+".charge.dlq", failed.DeadLetter)
	fx.waitStatus(held, journal.Failed, 15*time.Second)
	fx.waitStatus(later.RunID, journal.Completed, 15*time.Second)

	// Starting is idempotent on the run id: the completed run is printed,
	// not started again, unless --again says so.
	r = fx.run("start", fx.flow("orders"), "--payload", `{"id":"ok","amount":99}`, "--run-id", ok)
	require.Zero(t, r.code, r.stderr)
	require.Equal(t, ok+"\n", r.stdout)
	require.Contains(t, r.stderr, "run "+ok+" of "+fx.flow("orders")+" exists (completed): nothing started")
	var existing engine.Started
	fx.runJSON(&existing, "start", fx.flow("orders"), "--payload", `{"id":"ok","amount":99}`, "--run-id", ok)
	require.True(t, existing.Existing)
	require.Equal(t, journal.Completed, existing.Status)
	r = fx.run("start", fx.flow("orders"), "--payload", `{"id":"ok","amount":6}`, "--again")
	require.Equal(t, 1, r.code)
	require.Contains(t, r.stderr, "--again starts a run again: give its --run-id")
	r = fx.run("start", fx.flow("orders"), "--payload", `{"id":"ok","amount":6}`, "--run-id", ok, "--again")
	require.Zero(t, r.code, r.stderr)
	require.Contains(t, r.stderr, "run "+ok+" of "+fx.flow("orders")+" started again (replay 1)")
	require.Eventually(t, func() bool {
		var again shownRun
		r := fx.run("runs", "show", ok, "-o", "json")
		return r.code == 0 && json.Unmarshal([]byte(r.stdout), &again) == nil && again.Status == journal.Completed && again.Replays == 1
	}, 15*time.Second, 100*time.Millisecond, "the run started again completes")

	// runs list: JSON, filters, the table.
	var runs []map[string]any
	fx.runJSON(&runs, "runs", "list")
	require.Len(t, runs, 4)
	for _, key := range []string{"run_id", "flow", "status", "step", "started_at", "ended_at", "error"} {
		require.Contains(t, runs[0], key)
	}
	require.Equal(t, later.RunID, runs[0]["run_id"], "newest first")
	fx.runJSON(&runs, "runs", "list", "--status", "failed", "--flow", fx.flow("orders"), "--since", "1h")
	require.Len(t, runs, 1)
	require.Equal(t, failing, runs[0]["run_id"])
	fx.runJSON(&runs, "runs", "list", "--error", "CARD DECLINED", "--limit", "1")
	require.Len(t, runs, 1)
	r = fx.run("runs", "list", "--status", "failed")
	require.Zero(t, r.code, r.stderr)
	require.Regexp(t, `(?m)^RUN ID\s+FLOW\s+STATUS\s+STEP\s+STARTED\s+DURATION\s+DUE\s+ERROR$`, r.stdout)
	require.Regexp(t, fmt.Sprintf(`(?m)^%s\s+%s\s+failed\s+charge\s+.*step "charge": fatal: card declined`, failing, fx.flow("orders")), r.stdout)
	r = fx.run("runs", "show", failing)
	require.Zero(t, r.code, r.stderr)
	require.Regexp(t, `(?m)^status\s+failed$`, r.stdout)
	require.Regexp(t, `(?m)^step\s+charge\s+1\s+failed\s+`, r.stdout)

	// Refusals name the run.
	r = fx.run("replay", ok)
	require.Equal(t, 1, r.code)
	require.Contains(t, r.stderr, "replay: run cannot be replayed: run "+ok+" of "+fx.flow("orders")+" is completed")
	r = fx.run("runs", "show", "no-such-run")
	require.Equal(t, 1, r.code)
	require.Empty(t, r.stdout)
	require.Contains(t, r.stderr, `run not found: "no-such-run"`)
	r = fx.run("replay", "no-such-run")
	require.Equal(t, 1, r.code)
	require.Contains(t, r.stderr, "run no-such-run is in none of")

	// The worker drains on SIGTERM; a new one works the replayed run.
	require.Zero(t, w1.stop(t), w1.stderr.String())
	require.Contains(t, w1.stderr.String(), "msg=draining")
	require.NoError(t, os.Remove(down))
	fx.startWorker()
	var moved engine.Moved
	fx.runJSON(&moved, "replay", failing)
	require.Equal(t, engine.Moved{RunID: failing, Flow: fx.flow("orders"), From: fx.flow("orders") + ".charge.dlq",
		To: fx.flow("orders") + ".charge", Messages: 1}, moved, "the journal knew where the message was: nothing searched")
	replayed := fx.waitStatus(failing, journal.Completed, 15*time.Second)
	require.Equal(t, 1, replayed.Replays)
	require.Empty(t, replayed.Error)
	require.Equal(t, []string{"start::started by " + osUser(), "step:validate:completed", "step:charge:failed", "replay:charge:replayed by " + osUser(),
		"step:charge:completed", "step:ship:completed"}, replayed.outcomes())

	// A run held for replay, compensated by hand instead.
	fx.runJSON(&moved, "compensate", held)
	require.Equal(t, fx.flow("held")+".charge.dlq", moved.From)
	require.Equal(t, fx.flow("held")+".compensate", moved.To)
	compensated := fx.waitStatus(held, journal.Compensated, 15*time.Second)
	require.Contains(t, compensated.outcomes(), "compensation:reserve:compensated")
	r = fx.run("compensate", held)
	require.Equal(t, 1, r.code)
	require.Contains(t, r.stderr, "compensate: run cannot be compensated: run "+held)

	// A run held for replay whose hold is cancelled is compensated now.
	another := fx.start("held", fmt.Sprintf(`{"id":"another","amount":5,"fail_while":%q}`, heldDown))
	fx.waitStatus(another, journal.Failed, 15*time.Second)
	r = fx.run("schedule", "cancel", another)
	require.Zero(t, r.code, r.stderr)
	require.Contains(t, r.stdout, "run "+another+" of "+fx.flow("held")+": its hold for a replay (due ")
	require.Contains(t, r.stdout, "is cancelled: it is being compensated now")
	fx.waitStatus(another, journal.Compensated, 15*time.Second)
	fx.h.WaitDepth(fx.flow("held")+".charge.dlq", 0, 10*time.Second)
}

// TestOperatorCommandsWithoutADatabase: with RabbitMQ and no database the
// worker says its journal is its own, runs list refuses, saying why it
// could see nothing, and replay finds a failed run's message by its run id in the flows'
// dead-letter queues; a database that does not answer is an error naming
// the variable.
func TestOperatorCommandsWithoutADatabase(t *testing.T) {
	t.Parallel()
	fx := newCLIFixture(t, false)
	down := filepath.Join(t.TempDir(), "payments-down")
	require.NoError(t, os.WriteFile(down, nil, 0o600))
	w := fx.startWorker()
	require.Contains(t, w.stderr.String(), noDatabaseWorker)

	run := fx.start("orders", fmt.Sprintf(`{"id":"failing","amount":5,"fail_while":%q}`, down))
	dlq := fx.flow("orders") + ".charge" + broker.DeadLetterSuffix
	fx.h.WaitDepth(dlq, 1, 15*time.Second)

	r := fx.run("runs", "list")
	require.Equal(t, 1, r.code, r.stderr)
	require.Empty(t, r.stdout)
	require.Contains(t, r.stderr, "runs list: no database: set --database-url / ACEMQ_DATABASE_URL")

	require.NoError(t, os.Remove(down))
	var moved engine.Moved
	r = fx.runJSON(&moved, "replay", run)
	require.Contains(t, r.stderr, noDatabaseMover)
	require.Contains(t, r.stderr, "looked for it by x-acemq-run-id in "+fx.flow("orders")+".validate.dlq")
	require.Equal(t, dlq, moved.From)
	require.Equal(t, 1, moved.Messages)
	require.Contains(t, moved.Searched, dlq)
	require.Contains(t, moved.Searched, fx.flow("held")+".charge.dlq")
	require.Never(t, func() bool { return fx.h.Depth(dlq) > 0 }, time.Second, 50*time.Millisecond, "replayed, and not given up again")

	r = fx.run("replay", run)
	require.Equal(t, 1, r.code)
	require.Contains(t, r.stderr, "run "+run+" is in none of")
	require.Zero(t, w.stop(t), w.stderr.String())

	// A database nothing answers on (port 1) fails the worker at once,
	// naming the variable, never the password.
	r = fx.runEnv([]string{"ACEMQ_DATABASE_URL=postgres://acemq:s3cret-pw@127.0.0.1:1/test"}, "worker")
	require.Equal(t, 1, r.code)
	require.Contains(t, r.stderr, "acemq-flow: --database-url / ACEMQ_DATABASE_URL: connect to postgres://acemq@127.0.0.1:1/test:")
	require.NotContains(t, r.stderr, "s3cret-pw")
}
