package cli

import (
	"encoding/json"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/acemq/acemq-flow/broker"
	"github.com/acemq/acemq-flow/broker/transport"
	"github.com/acemq/acemq-flow/engine"
	"github.com/acemq/acemq-flow/engine/journal"
)

// TestFlowsCheck: runs left in the orders flow's first step by its v1
// (no worker running) are what flows check of v2, which renamed the
// step, reports as stranded (exit 1, the step, its runs and messages),
// and a v2 worker refuses to start; v1 reports nothing; once a v1 worker
// has finished them, v2 checks clean and its worker starts.
func TestFlowsCheck(t *testing.T) {
	t.Parallel()
	fx := newCLIFixture(t, true)
	v2 := []string{"CLITEST_ORDERS_V2=1"}
	renamed := fx.flow("orders") + ".check"
	fx.h.DeleteLater(renamed, renamed+broker.DeadLetterSuffix, renamed+broker.ParkedSuffix)
	require.Zero(t, fx.run("migrate").code)
	fx.startWorker().stop(t)
	runs := []string{fx.start("orders", `{"id":"o-1","amount":1}`), fx.start("orders", `{"id":"o-2","amount":2}`)}
	fx.h.WaitDepth(fx.flow("orders")+".validate", 2, 10*time.Second)

	var infos []engine.FlowInfo
	fx.runJSON(&infos, "flows", "list")
	var v1 string
	for _, fi := range infos {
		if fi.Name == fx.flow("orders") {
			v1 = fi.Version
		}
	}
	var listed []journal.Run
	fx.runJSON(&listed, "runs", "list", "--flow", fx.flow("orders"), "--version", v1)
	require.Len(t, listed, 2, "runs list --version: the runs started on v1")
	fx.runJSON(&listed, "runs", "list", "--flow", fx.flow("orders"), "--version", "000000000000")
	require.Empty(t, listed)
	shown := fx.run("runs", "show", runs[0])
	require.Regexp(t, `(?m)^version\s+`+v1+`$`, shown.stdout)

	r := fx.run("flows", "check", fx.flow("orders"))
	require.Zero(t, r.code, "v1 has the step: %s%s", r.stdout, r.stderr)
	require.Regexp(t, `nothing stranded`, r.stdout)

	r = fx.runEnv(v2, "flows", "check")
	require.Equal(t, 1, r.code, r.stdout)
	require.Regexp(t, `(?m)^`+fx.flow("orders")+`\s+[0-9a-f]{12}\s+[0-9a-f]{12}\s+check\s+validate\s+would strand runs`, r.stdout)
	require.Regexp(t, `(?m)^`+fx.flow("orders")+`\s+validate\s+[0-9a-f]{12}\s+2\s+2\s+0\s+0\s+stranded$`, r.stdout)
	require.Contains(t, r.stderr, "would be stranded")

	r = fx.runEnv(v2, "flows", "check", "-o", "json")
	require.Equal(t, 1, r.code)
	var checks []engine.FlowCheck
	require.NoError(t, json.Unmarshal([]byte(r.stdout), &checks), r.stdout)
	require.Len(t, checks, 3, "every flow of the binary")
	byFlow := map[string]engine.FlowCheck{}
	for _, c := range checks {
		byFlow[c.Flow] = c
	}
	orders := byFlow[fx.flow("orders")]
	require.True(t, orders.Strands())
	require.Equal(t, []string{"check"}, orders.Added)
	require.Equal(t, []string{"validate"}, orders.Removed)
	require.Len(t, orders.Strays, 1)
	require.Equal(t, 2, orders.Strays[0].Runs)
	require.Equal(t, 2, orders.Strays[0].Messages)
	require.False(t, byFlow[fx.flow("held")].Strands(), "the other flows did not change")

	r = fx.runEnv(v2, "worker")
	require.Equal(t, 1, r.code, "a v2 worker refuses to start: %s", r.stderr)
	require.Contains(t, r.stderr, `step "validate"`)

	w := fx.startWorker()
	for _, id := range runs {
		fx.waitStatus(id, journal.Completed, 20*time.Second)
	}
	w.stop(t)
	r = fx.runEnv(v2, "flows", "check")
	require.Zero(t, r.code, "%s%s", r.stdout, r.stderr)
	require.NotContains(t, r.stdout, "would strand")

	// Drained: the old step's queues can go.
	validate := fx.flow("orders") + ".validate"
	exists := func(q string) bool {
		_, err := fx.h.Admin.Transport().Inspect(t.Context(), q)
		require.True(t, err == nil || transport.IsCode(err, transport.NotFound), "%v", err)
		return err == nil
	}
	require.True(t, exists(validate))
	r = fx.runEnv(v2, "flows", "delete-drained", fx.flow("orders"))
	require.Zero(t, r.code, "%s%s", r.stdout, r.stderr)
	require.Regexp(t, `(?m)^`+fx.flow("orders")+`\s+validate\s+.*`+validate+`\.dlq.*\s+deleted$`, r.stdout)
	for _, q := range []string{validate, validate + broker.DeadLetterSuffix, validate + broker.ParkedSuffix} {
		require.False(t, exists(q), q)
	}
}
