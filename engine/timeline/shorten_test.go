package timeline

import (
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/acemq/acemq-flow/engine/timeline/timelinetest"
)

// TestShorten: a long run of alike events keeps its head and tail and an
// event saying how many it left out; short runs stay as they are.
func TestShorten(t *testing.T) {
	t.Parallel()
	own, _ := Group(timelinetest.ForkRun("r-1", "unit.shop", 100, 50, time.Time{}))
	short := Shorten(own)
	var outcomes []string
	for _, e := range short {
		outcomes = append(outcomes, string(e.Kind)+" "+e.Step+" "+e.Outcome)
	}
	require.Equal(t, []string{
		"start  started",
		"step validate completed",
		"step fulfil forked: 2 branches",
		"step fulfil completed",
		"step each forked: 100 items, 4 in flight",
		"compensation square compensated",
		"compensation square compensated",
		"compensation square compensated",
		"compensation square … 45 more compensated",
		"compensation square compensated",
		"compensation square compensated",
		"compensation reserve compensated",
	}, outcomes)
	require.Empty(t, short[8].Key)
	require.Len(t, own, 56, "own is not changed")
	require.Equal(t, own[:5], Shorten(own[:5]))
}
