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

// TestReplayFrom: `replay <run-id> --from <step>` re-runs a completed run
// from a step, saying what it did in one JSON document or as a table; a
// failed run is re-run from an earlier step; a step the flow does not
// have is refused with the steps it could be replayed from; and --from
// with the bulk flags replays each run chosen from that step.
func TestReplayFrom(t *testing.T) {
	t.Parallel()
	fx := newCLIFixture(t, true)
	require.Zero(t, fx.run("migrate").code)
	down := filepath.Join(t.TempDir(), "payments-down")
	fx.startWorker()
	done := fx.start("orders", `{"id":"o1","amount":5}`)
	fx.waitStatus(done, journal.Completed, 20*time.Second)

	var res engine.ReplayedFrom
	fx.runJSON(&res, "replay", done, "--from", "charge", "--reason", "charged twice?", "--actor", "acemq-flow replay", "-o", "json")
	require.Equal(t, done, res.RunID)
	require.Equal(t, journal.Completed, res.Was)
	require.Equal(t, "charge", res.Step)
	require.Equal(t, []string{"charge", "ship"}, res.Route)
	require.Equal(t, 1, res.Replays)
	fx.waitStatus(done, journal.Completed, 20*time.Second)
	shown := fx.run("runs", "show", done)
	require.Zero(t, shown.code, shown.stderr)
	require.Contains(t, shown.stdout, "replayed from charge by acemq-flow replay: charged twice?")

	require.NoError(t, os.WriteFile(down, nil, 0o600))
	failed := fx.start("orders", fmt.Sprintf(`{"id":"o2","amount":5,"fail_while":%q}`, down))
	fx.waitStatus(failed, journal.Failed, 20*time.Second)
	require.NoError(t, os.Remove(down))
	text := fx.run("replay", failed, "--from", "validate")
	require.Zero(t, text.code, text.stderr)
	require.Regexp(t, `FROM STEP +validate \(sent to `+fx.flow("orders")+`\.validate\)`, text.stdout)
	require.Regexp(t, `ROUTE +validate → charge → ship`, text.stdout)
	require.Regexp(t, `DEAD-LETTERED +1 message taken out of the dead-letter queue`, text.stdout)
	require.Regexp(t, `COMPENSATIONS CARRIED +none`, text.stdout)
	fx.waitStatus(failed, journal.Completed, 20*time.Second)

	bad := fx.run("replay", done, "--from", "pack")
	require.Equal(t, 1, bad.code)
	require.Contains(t, bad.stderr, `has no step "pack"`)
	require.Contains(t, bad.stderr, "its steps validate, charge, ship")

	var bulk engine.BulkResult
	fx.runJSON(&bulk, "replay", "--flow", fx.flow("orders"), "--status", "completed", "--from", "ship", "-o", "json")
	require.ElementsMatch(t, []string{done, failed}, bulk.Replayed)
	require.Empty(t, bulk.Refused)
	for _, id := range []string{done, failed} {
		r := fx.waitStatus(id, journal.Completed, 20*time.Second)
		require.Equal(t, 2, r.Replays)
	}

	wrong := fx.run("replay", "--flow", fx.flow("orders"), "--status", "running", "--from", "ship")
	require.Equal(t, 1, wrong.code)
	require.Contains(t, wrong.stderr, "completed, ended, failed or compensated")
}
