package cli

import (
	"encoding/json"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/acemq/acemq-flow/engine/journal"
	"github.com/acemq/acemq-flow/internal/testenv"
	"github.com/acemq/acemq-flow/workflows"
)

// TestRunsShowMasksSecrets: a place-order run's card, secret, is masked
// by runs show and by runs list and runs show -o json, and shown whole
// with --reveal, as the journal keeps it.
func TestRunsShowMasksSecrets(t *testing.T) {
	t.Parallel()
	testenv.DatabaseURL(t)
	inv := invocation{env: map[string]string{"ACEMQ_DATABASE_URL": testSchema(t)}, flows: workflows.Flows()}
	r := executeWith(t, inv, "migrate")
	require.Zero(t, r.code, r.stderr)
	payload, err := json.Marshal(workflows.ExampleOrder())
	require.NoError(t, err)
	r = executeWith(t, inv, "start", workflows.PlaceOrderName, "--url", "memory://", "--run-id", "secret-run", "--payload", string(payload))
	require.Zero(t, r.code, r.stderr)

	r = executeWith(t, inv, "runs", "show", "secret-run")
	require.Zero(t, r.code, r.stderr)
	require.Contains(t, r.stdout, `"card":"•••• 4242"`)
	require.NotContains(t, r.stdout, workflows.CardApproved)
	require.Contains(t, r.stdout, `"customer":"Ada"`)

	var shown runJSON
	r = executeWith(t, inv, "runs", "show", "secret-run", "-o", "json")
	require.Zero(t, r.code, r.stderr)
	require.NoError(t, json.Unmarshal([]byte(r.stdout), &shown))
	var order workflows.Order
	require.NoError(t, json.Unmarshal(shown.Input, &order))
	require.Equal(t, "•••• 4242", order.Card)
	require.Equal(t, "Ada", order.Customer)

	var listed []journal.Run
	r = executeWith(t, inv, "runs", "list", "-o", "json")
	require.Zero(t, r.code, r.stderr)
	require.NoError(t, json.Unmarshal([]byte(r.stdout), &listed))
	require.Len(t, listed, 1)
	require.NotContains(t, string(listed[0].Input), workflows.CardApproved)

	r = executeWith(t, inv, "runs", "show", "secret-run", "--reveal")
	require.Zero(t, r.code, r.stderr)
	require.Contains(t, r.stdout, workflows.CardApproved, "the journal keeps the card")
	r = executeWith(t, inv, "runs", "show", "secret-run", "-o", "json", "--reveal")
	require.Zero(t, r.code, r.stderr)
	require.NoError(t, json.Unmarshal([]byte(r.stdout), &shown))
	require.NoError(t, json.Unmarshal(shown.Input, &order))
	require.Equal(t, workflows.CardApproved, order.Card)
}
