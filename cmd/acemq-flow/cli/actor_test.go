package cli

import (
	"fmt"
	"os"
	"path/filepath"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/acemq/acemq-flow/engine"
	"github.com/acemq/acemq-flow/engine/journal"
)

// TestActionsRecordActorAndReason: start and replay record who asked
// (--actor, else the OS user) and why (--reason) in the run's timeline.
func TestActionsRecordActorAndReason(t *testing.T) {
	t.Parallel()
	fx := newCLIFixture(t, true)
	require.Zero(t, fx.run("migrate").code)
	down := filepath.Join(t.TempDir(), "payments-down")
	require.NoError(t, os.WriteFile(down, nil, 0o600))
	fx.startWorker()
	var started engine.Started
	fx.runJSON(&started, "start", fx.flow("orders"), "--payload", fmt.Sprintf(`{"id":"o1","amount":5,"fail_while":%q}`, down),
		"--reason", "a test order", "--actor", "ada", "-o", "json")
	run := started.RunID
	fx.waitStatus(run, journal.Failed, 20*time.Second)
	require.NoError(t, os.Remove(down))

	replayed := fx.run("replay", run, "--reason", "payments back")
	require.Zero(t, replayed.code, replayed.stderr)
	fx.waitStatus(run, journal.Completed, 20*time.Second)
	shown := fx.run("runs", "show", run)
	require.Zero(t, shown.code, shown.stderr)
	require.Contains(t, shown.stdout, "started by ada: a test order")
	require.Contains(t, shown.stdout, "replayed by "+osUser()+": payments back", "the OS user without --actor")
}
