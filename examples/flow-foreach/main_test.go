package main

import (
	"bytes"
	"fmt"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"
)

// TestFlowForEach runs the example and checks what it printed. Invoices
// are sent four at a time, so their lines, and the arrivals in the
// timeline, may come in any order: each group of lines below is compared
// as a set, the groups in order. The first four invoices sent are the
// first four items (the fifth is handed out only once one of them is
// back), and every invoice is sent exactly once.
func TestFlowForEach(t *testing.T) {
	t.Parallel()
	var out bytes.Buffer
	require.NoError(t, run(t.Context(), &out))
	lines := strings.Split(strings.TrimSuffix(out.String(), "\n"), "\n")

	var first, rest, arrived []string
	for i := range 20 {
		l := fmt.Sprintf("  send-invoice: INV-%03d, %d.%02d to customer %d", i+1, (1000+250*i)/100, (1000+250*i)%100, i+1)
		if i < 4 {
			first = append(first, l)
		} else {
			rest = append(rest, l)
		}
		arrived = append(arrived, fmt.Sprintf("  step  send-all     item %d arrived", i))
	}
	requireGroups(t, lines,
		[]string{"starting a run of send-invoices: 20 invoices, at most 4 sent at once"},
		first,
		rest,
		[]string{"join: 20 invoices back, in item order (INV-001 … INV-020), 675.00 in all"},
		[]string{"report: 2026-03: 20 invoices sent, 675.00 invoiced"},
		[]string{"never more than 4 invoices were being sent at once"},
		[]string{"the journal says: the run is completed; its timeline (a line that repeats, once with its count):"},
		[]string{"  start              started"},
		[]string{"  step  send-all     forked: 20 items, 4 in flight"},
		[]string{"  step  send-invoice completed (×20)"},
		arrived,
		[]string{"  step  send-all     completed"},
		[]string{"  step  report       completed"},
	)
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
