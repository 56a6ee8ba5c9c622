package dashboard

import (
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/acemq/acemq-flow/engine/journal"
)

// TestNormalize: numbers, ids and UUIDs leave the error; the words stay.
func TestNormalize(t *testing.T) {
	t.Parallel()
	for in, want := range map[string]string{
		"card 4242 declined for order 17":                      "card <n> declined for order <n>",
		"order 0b6f9c1e-8d2a-4c55-9a43-2f1d0e6b7a10 not found": "order <id> not found",
		"queue acemq-test.flow.1a2b3c4d5e6f.charge.dlq: 404":   "queue <id>: <n>",
		"timeout after 2.5s talking to\n\tbank-7":              "timeout after <n>s talking to bank-<n>",
		`step "charge": fatal: <script>alert(1)</script>`:      `step "charge": fatal: <script>alert(<n>)</script>`,
		"": "",
	} {
		require.Equal(t, want, normalize(in), in)
	}
	long := normalize(string(make([]byte, 1000)) + "x")
	require.LessOrEqual(t, len(long), journal.MaxPattern+len("…"))
}

// TestGroupFailed: one group per flow, step and pattern, the biggest
// first, with the span of times its runs failed at.
func TestGroupFailed(t *testing.T) {
	t.Parallel()
	at := func(m int) *time.Time { x := time.Date(2026, 1, 1, 0, m, 0, 0, time.UTC); return &x }
	runs := []journal.Run{
		{ID: "a", Flow: "f", Step: "charge", Error: "card 1 declined", EndedAt: at(5)},
		{ID: "b", Flow: "f", Step: "ship", Error: "no courier", EndedAt: at(4)},
		{ID: "c", Flow: "f", Step: "charge", Error: "card 2 declined", EndedAt: at(3)},
		{ID: "d", Flow: "g", Step: "charge", Error: "card 3 declined", EndedAt: at(2)},
		{ID: "e", Flow: "f", Step: "charge", Error: "card 4 declined", EndedAt: at(1)},
	}
	gs := groupFailed(runs)
	require.Len(t, gs, 3)
	require.Equal(t, "f", gs[0].Flow)
	require.Equal(t, "card <n> declined", gs[0].Pattern)
	require.Equal(t, 3, gs[0].Count())
	require.Equal(t, "card 1 declined", gs[0].Example, "the newest run's error as it was")
	require.Equal(t, *at(1), gs[0].Oldest)
	require.Equal(t, *at(5), gs[0].Newest)
	require.Equal(t, "ship", gs[1].Step, "then the group that failed last")
	require.Equal(t, groupKey("f", "charge", "card <n> declined"), gs[0].Key)
	require.NotEqual(t, gs[0].Key, gs[2].Key, "another flow is another group")
}
