package cli

import (
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
	fx := &cliFixture{t: t, dbURL: testSchema(t)}
	fx.bin = shippedBinary(t)
	fx.env = append(cleanEnviron(), "ACEMQ_URL="+testenv.VHost(t), "ACEMQ_DATABASE_URL="+fx.dbURL)

	// 1. migrate; a worker with ship down.
	r := fx.run("migrate")
	require.Zero(t, r.code, r.stderr)
	require.Contains(t, r.stdout, "applied")
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

// startWorkerEnv starts a worker of the fixture's binary with extra
// environment variables.
func (fx *cliFixture) startWorkerEnv(extraEnv []string) *workerProc {
	fx.t.Helper()
	saved := fx.env
	fx.env = append(append([]string(nil), saved...), extraEnv...)
	defer func() { fx.env = saved }()
	return fx.startWorker()
}
