package main

import (
	"bytes"
	"slices"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"
)

// TestFlowParallel runs the example and checks what it printed. The two
// branches run side by side, so their lines may come in either order:
// each group of lines below is compared as a set, the groups in order,
// and within the stock branch check-stock prints before reserve-stock.
// (The timeline orders a branch's steps by when each was recorded, which
// is after each sent its run on, so there they may come either way.)
func TestFlowParallel(t *testing.T) {
	t.Parallel()
	var out bytes.Buffer
	require.NoError(t, run(t.Context(), &out))
	lines := strings.Split(strings.TrimSuffix(out.String(), "\n"), "\n")
	requireGroups(t, lines,
		[]string{"starting a run of ship-order: validate → fulfil (stock | courier) → confirm"},
		[]string{"validate: order o-7, 2 × coffee beans"},
		[]string{
			"  branch 0, check-stock: 2 × coffee beans in warehouse BRS-2",
			"  branch 0, reserve-stock: reserved RSV-o-7 at BRS-2",
			"  branch 1, book-courier: Speedy Couriers, pickup tomorrow 09:00, to 12 Harbour Street, Bristol",
		},
		[]string{"join: both branches are back: reservation RSV-o-7, courier Speedy Couriers"},
		[]string{"confirm: order o-7 ships from BRS-2 with Speedy Couriers, tomorrow 09:00"},
		[]string{"the journal says: the run is completed; its timeline:"},
		[]string{"  start               started"},
		[]string{"  step  validate      completed"},
		[]string{"  step  fulfil        forked: 2 branches"},
		[]string{
			"  step  check-stock   completed",
			"  step  reserve-stock completed",
			"  step  book-courier  completed",
		},
		[]string{
			"  step  fulfil        branch 0 arrived",
			"  step  fulfil        branch 1 arrived",
		},
		[]string{"  step  fulfil        completed"},
		[]string{"  step  confirm       completed"},
	)
	before := func(a, b string) {
		t.Helper()
		require.Less(t, indexOf(lines, a), indexOf(lines, b), "%q before %q in\n%s", a, b, out.String())
	}
	before("  branch 0, check-stock", "  branch 0, reserve-stock")
}

// requireGroups checks that lines are the groups' lines, group after
// group, each group's in any order.
func requireGroups(t *testing.T, lines []string, groups ...[]string) {
	t.Helper()
	all := strings.Join(lines, "\n")
	for _, g := range groups {
		require.GreaterOrEqual(t, len(lines), len(g), "too few lines for %q in\n%s", g, all)
		require.ElementsMatch(t, g, lines[:len(g)], "in\n%s", all)
		lines = lines[len(g):]
	}
	require.Empty(t, lines, "more lines than expected in\n%s", all)
}

// indexOf is the index of the first line that starts with prefix, or -1.
func indexOf(lines []string, prefix string) int {
	return slices.IndexFunc(lines, func(l string) bool { return strings.HasPrefix(l, prefix) })
}
