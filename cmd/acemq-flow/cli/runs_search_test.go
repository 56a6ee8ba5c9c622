package cli

import (
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/acemq/acemq-flow/engine/journal"
)

// TestRunsListFinds: runs list finds runs by a payload expression (sent to
// SQL), by one it filters after, and by a run id prefix; an expression
// that does not compile is refused.
func TestRunsListFinds(t *testing.T) {
	t.Parallel()
	fx := newCLIFixture(t, true)
	require.Zero(t, fx.run("migrate").code)
	one, two := fx.start("orders", `{"id":"o-1","amount":1}`), fx.start("orders", `{"id":"o-2","amount":2}`)
	ids := func(runs []journal.Run) []string {
		var out []string
		for _, r := range runs {
			out = append(out, r.ID)
		}
		return out
	}
	var listed []journal.Run
	fx.runJSON(&listed, "runs", "list", "--flow", fx.flow("orders"), "--where", `payload.amount == 2`)
	require.Equal(t, []string{two}, ids(listed))
	fx.runJSON(&listed, "runs", "list", "--flow", fx.flow("orders"), "--where", `payload.id matches "^o-1$"`)
	require.Equal(t, []string{one}, ids(listed), "filtered after: matches is not sent to SQL")
	fx.runJSON(&listed, "runs", "list", "--id-prefix", one[:13])
	require.Equal(t, []string{one}, ids(listed))
	r := fx.run("runs", "list", "--where", `payload.amount ==`)
	require.NotZero(t, r.code)
	require.Contains(t, r.stderr, "where")
}
