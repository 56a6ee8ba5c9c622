package timeline

import (
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/acemq/acemq-flow/engine/journal"
)

// TestChildAndParent: a Child step's event names its child run; a child
// run's start names its parent and the step, whatever its run id holds.
func TestChildAndParent(t *testing.T) {
	t.Parallel()
	run, ok := Child(journal.Event{Kind: journal.KindStep, Step: "ship", Outcome: StartedChild("o-1.ship")})
	require.True(t, ok)
	require.Equal(t, "o-1.ship", run)
	for _, e := range []journal.Event{
		{Kind: journal.KindStep, Outcome: "completed"},
		{Kind: journal.KindStep, Outcome: StartedChild("")},
		{Kind: journal.KindStart, Outcome: StartedChild("o-1.ship")},
	} {
		_, ok := Child(e)
		require.False(t, ok, e.Outcome)
	}

	parent, step, ok := Parent([]journal.Event{
		{Kind: journal.KindStart, Outcome: "started"},
		{Kind: journal.KindStart, Outcome: StartedBy("odd, step run", "ship")},
		{Kind: journal.KindStep, Outcome: "completed"},
	})
	require.True(t, ok)
	require.Equal(t, []string{"odd, step run", "ship"}, []string{parent, step})
	for _, events := range [][]journal.Event{
		nil,
		{{Kind: journal.KindStart, Outcome: "started"}},
		{{Kind: journal.KindStep, Outcome: StartedBy("p", "s")}},
		{{Kind: journal.KindStart, Outcome: "started by run , step s"}},
	} {
		_, _, ok := Parent(events)
		require.False(t, ok)
	}
}
