package cli

import (
	"fmt"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/acemq/acemq-flow/dsl"
	"github.com/acemq/acemq-flow/internal/testenv"
	"github.com/acemq/acemq-flow/workflows"
)

// complete asks the command line for the completions of args, as a
// shell's completion script does (the hidden __complete command), and
// returns them without their descriptions, and the directive.
func complete(t *testing.T, inv invocation, args ...string) ([]string, string) {
	t.Helper()
	r := executeWith(t, inv, append([]string{"__complete"}, args...)...)
	require.Zero(t, r.code, r.stderr)
	lines := strings.Split(strings.TrimSpace(r.stdout), "\n")
	require.NotEmpty(t, lines)
	directive := lines[len(lines)-1]
	require.True(t, strings.HasPrefix(directive, ":"), r.stdout)
	var out []string
	for _, l := range lines[:len(lines)-1] {
		v, _, _ := strings.Cut(l, "\t")
		out = append(out, v)
	}
	return out, directive
}

// TestCompletion: flows, statuses and output formats complete from the
// binary, a flow argument taken once only once, and --status one more
// status after each comma.
func TestCompletion(t *testing.T) {
	t.Parallel()
	inv := invocation{flows: append(workflows.Flows(), dsl.Flow("broken"))}
	got, directive := complete(t, inv, "start", "")
	require.Equal(t, []string{workflows.RefundName, workflows.PlaceOrderName}, got, "built flows, sorted")
	require.Equal(t, ":4", directive, "no file names")
	got, _ = complete(t, inv, "start", workflows.PlaceOrderName, "")
	require.Empty(t, got, "start takes one flow")
	got, _ = complete(t, inv, "flows", "show", "")
	require.Equal(t, []string{workflows.RefundName, workflows.PlaceOrderName}, got)
	got, _ = complete(t, inv, "flows", "check", workflows.PlaceOrderName, "")
	require.Equal(t, []string{workflows.RefundName}, got, "those not given yet")
	got, _ = complete(t, inv, "runs", "list", "--flow", "")
	require.Equal(t, []string{workflows.RefundName, workflows.PlaceOrderName}, got)
	got, _ = complete(t, inv, "replay", "--flow", "")
	require.Equal(t, []string{workflows.RefundName, workflows.PlaceOrderName}, got)

	got, directive = complete(t, inv, "runs", "list", "--status", "")
	require.Equal(t, strings.Split(statusList(), ", "), got)
	require.Equal(t, ":6", directive, "no space after a status: another may follow its comma")
	got, _ = complete(t, inv, "runs", "list", "--status", "failed,comp")
	require.Equal(t, []string{"failed,completed", "failed,compensating", "failed,compensated"}, got)
	got, _ = complete(t, inv, "runs", "list", "--status", "failed,f")
	require.Empty(t, got, "failed is listed already")

	for _, args := range [][]string{{"runs", "list", "-o", ""}, {"runs", "show", "x", "--output", ""}, {"flows", "list", "-o", ""}} {
		got, _ = complete(t, inv, args...)
		require.Equal(t, []string{"text", "json"}, got, "%q", args)
	}
	got, directive = complete(t, inv, "runs", "show", "")
	require.Empty(t, got, "no database, no run ids")
	require.Equal(t, ":4", directive)
}

// TestCompletionOfRunIDs: a run id argument completes from the journal
// of the database (ACEMQ_DATABASE_URL read as the commands read it), the
// ids beginning with what is typed, at most 50.
func TestCompletionOfRunIDs(t *testing.T) {
	t.Parallel()
	testenv.DatabaseURL(t)
	env := map[string]string{"ACEMQ_DATABASE_URL": testSchema(t)}
	inv := invocation{env: env, flows: workflows.Flows()}
	r := executeWith(t, inv, "migrate")
	require.Zero(t, r.code, r.stderr)
	var ids []string
	for i := range 60 {
		id := "cmpl-a-" + fmt.Sprintf("%03d", i)
		if i >= 55 {
			id = fmt.Sprintf("cmpl-b-%d", i)
		}
		ids = append(ids, id)
		r := executeWith(t, inv, "start", workflows.PlaceOrderName, "--url", "memory://", "--run-id", id, "--payload", `{"id":"o-1","customer":"Ada","item":"tea","quantity":1,"amount_cents":100,"card":"4242 4242 4242 4242","address":"x"}`)
		require.Zero(t, r.code, r.stderr)
	}
	got, directive := complete(t, inv, "runs", "show", "cmpl-b")
	require.Equal(t, ids[55:], got)
	require.Equal(t, ":4", directive)
	got, _ = complete(t, inv, "runs", "show", "cmpl-a")
	require.Len(t, got, 50, "bounded")
	got, _ = complete(t, inv, "cancel", "cmpl-")
	require.Len(t, got, 50)
	got, _ = complete(t, inv, "replay", "cmpl-b-5")
	require.Equal(t, []string{"cmpl-b-55", "cmpl-b-56", "cmpl-b-57", "cmpl-b-58", "cmpl-b-59"}, got)
	got, _ = complete(t, inv, "runs", "show", "cmpl-b-55", "")
	require.Empty(t, got, "one run id")
	got, _ = complete(t, inv, "runs", "show", "nope")
	require.Empty(t, got)
}
