package cli

import (
	"encoding/json"
	"fmt"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/acemq/acemq-flow/engine"
	"github.com/acemq/acemq-flow/engine/journal"
	"github.com/acemq/acemq-flow/internal/testenv"
)

var (
	shippedOnce sync.Once
	shippedPath string
	shippedErr  error
)

// shippedBinary builds the acemq-flow binary itself, with the shipped
// flows, the first time a test needs it.
func shippedBinary(t *testing.T) string {
	t.Helper()
	shippedOnce.Do(func() {
		path := filepath.Join(binDir, "acemq-flow-shipped")
		out, err := exec.Command("go", "build", "-o", path, "..").CombinedOutput()
		if err != nil {
			shippedErr = fmt.Errorf("go build ./cmd/acemq-flow: %w\n%s", err, out)
			return
		}
		shippedPath = path
	})
	require.NoError(t, shippedErr)
	return shippedPath
}

// TestWalkthrough runs the README's walkthrough, command for command,
// through the built binary with the shipped place-order flow: a worker
// with an outage at ship, a run that retries ship and fails, held for a
// replay; the failed run found and explained; the worker restarted without
// the outage; the run replayed by its id and completed, with the replay in
// its timeline. The shipped flow's names are fixed, so the test runs in a
// RabbitMQ virtual host and a PostgreSQL schema of its own.
func TestWalkthrough(t *testing.T) {
	t.Parallel()
	// 1. migrate; a worker with ship down.
	fx := shippedFixture(t)
	outage := fx.startWorkerEnv([]string{"ACEMQ_DEMO_OUTAGE=ship"})

	// 2. start place-order with the example the flow offers.
	var flow engine.FlowInfo
	fx.runJSON(&flow, "flows", "show", "place-order")
	require.NotEmpty(t, flow.ExamplePayload)
	var started engine.Started
	fx.runJSON(&started, "start", "place-order", "--payload", string(flow.ExamplePayload))
	run := started.RunID

	// 3. it retries ship, fails and is held; runs list finds it, runs show
	// says why and where.
	failed := fx.waitStatus(run, journal.Failed, 60*time.Second)
	require.Equal(t, "ship", failed.Step)
	require.Contains(t, failed.Error, "service unavailable")
	require.Equal(t, "place-order.ship.dlq", failed.DeadLetter)
	var list []journal.Run
	fx.runJSON(&list, "runs", "list", "--status", "failed")
	require.True(t, slices.ContainsFunc(list, func(r journal.Run) bool { return r.ID == run }), "runs list --status failed shows the run")
	text := fx.run("runs", "show", run)
	require.Zero(t, text.code, text.stderr)
	require.Contains(t, text.stdout, "ship")
	require.Contains(t, text.stdout, "service unavailable")

	// 4. the worker restarted without the outage; replay; it completes.
	require.Zero(t, outage.stop(t), outage.stderr.String())
	fx.startWorkerEnv(nil)
	var moved engine.Moved
	fx.runJSON(&moved, "replay", run)
	require.Equal(t, "place-order.ship.dlq", moved.From)
	done := fx.waitStatus(run, journal.Completed, 30*time.Second)
	outcomes := strings.Join(done.outcomes(), " ")
	require.Contains(t, outcomes, "step:ship:failed")
	require.Contains(t, outcomes, "replay:ship:replayed")
	require.True(t, strings.HasSuffix(outcomes, "step:ship:completed"), outcomes)
	require.Equal(t, 1, done.Replays)
}

// shippedFixture runs the built binary with the shipped flows, in a
// RabbitMQ virtual host and a PostgreSQL schema of the test's own (the
// shipped flows' names are fixed), its tables migrated.
func shippedFixture(t *testing.T) *cliFixture {
	t.Helper()
	fx := &cliFixture{t: t, dbURL: testSchema(t)}
	fx.bin = shippedBinary(t)
	fx.env = append(cleanEnviron(), "ACEMQ_URL="+testenv.VHost(t), "ACEMQ_DATABASE_URL="+fx.dbURL)
	r := fx.run("migrate")
	require.Zero(t, r.code, r.stderr)
	require.Contains(t, r.stdout, "applied")
	return fx
}

// startWorkerEnv starts a worker of the fixture's binary with extra
// environment variables.
func (fx *cliFixture) startWorkerEnv(extraEnv []string) *workerProc {
	fx.t.Helper()
	saved := fx.env
	fx.env = append(append([]string(nil), saved...), extraEnv...)
	defer func() { fx.env = saved }()
	return fx.startWorker()
}

// TestRefundWalkthrough runs the README's approve-refund walkthrough
// through the built binary: a run waits for its approval (runs list,
// schedule list), is signalled and completes; another is cancelled and
// compensated, its timeline saying who and why.
func TestRefundWalkthrough(t *testing.T) {
	t.Parallel()
	fx := shippedFixture(t)
	fx.startWorkerEnv(nil)

	var started engine.Started
	fx.runJSON(&started, "start", "approve-refund", "--payload", `{"order":"o-1001","customer":"Ada","amount_cents":4200}`)
	run := started.RunID
	fx.waitStatus(run, journal.Waiting, 30*time.Second)
	var waiting []journal.Run
	fx.runJSON(&waiting, "runs", "list", "--status", "waiting")
	require.True(t, slices.ContainsFunc(waiting, func(r journal.Run) bool { return r.ID == run && r.Step == "approval" }), "%+v", waiting)
	var list scheduleList
	fx.runJSON(&list, "schedule", "list")
	require.True(t, slices.ContainsFunc(list.Waiting, func(s engine.Scheduled) bool { return s.RunID == run && s.Kind == engine.ScheduledSignal }), "%+v", list)
	sig := fx.run("signal", run, "approval", "--payload", `{"by":"bob","approved":true}`)
	require.Zero(t, sig.code, sig.stderr)
	done := fx.waitStatus(run, journal.Completed, 30*time.Second)
	outcomes := strings.Join(done.outcomes(), " ")
	require.Contains(t, outcomes, "step:approval:waiting for signal approval until")
	require.Contains(t, outcomes, "step:pay-refund:completed")

	var other engine.Started
	fx.runJSON(&other, "start", "approve-refund", "--payload", `{"order":"o-1002","customer":"Ada","amount_cents":900}`)
	fx.waitStatus(other.RunID, journal.Waiting, 30*time.Second)
	c := fx.run("cancel", other.RunID, "--reason", "the customer withdrew it")
	require.Zero(t, c.code, c.stderr)
	cancelled := fx.waitStatus(other.RunID, journal.Cancelled, 30*time.Second)
	require.Eventually(t, func() bool {
		r := fx.run("runs", "show", other.RunID, "-o", "json")
		var shown shownRun
		return r.code == 0 && json.Unmarshal([]byte(r.stdout), &shown) == nil &&
			strings.Contains(strings.Join(shown.outcomes(), " "), "compensation:request-refund:compensated")
	}, 30*time.Second, 100*time.Millisecond, "its hold is released: %v", cancelled.outcomes())
	shown := fx.run("runs", "show", other.RunID)
	require.Zero(t, shown.code, shown.stderr)
	require.Contains(t, shown.stdout, "the customer withdrew it")
}
