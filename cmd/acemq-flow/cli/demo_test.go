package cli

import (
	"testing"

	"github.com/stretchr/testify/require"
)

// TestDemoCommand runs `acemq-flow demo` on the embedded broker: four runs
// of place-order, each ending as it should, their timelines on stdout.
func TestDemoCommand(t *testing.T) {
	t.Parallel()
	r := execute(t, nil, "demo")
	require.Zero(t, r.code, r.stderr)
	require.Contains(t, r.stderr, "using the embedded in-process broker (set ACEMQ_URL to use RabbitMQ)")
	for _, want := range []string{
		"acemq-flow demo: four orders through the place-order flow, on the embedded in-process broker",
		"charge     attempt 1 failed, retried in 1s: charge 1200 cents: payment gateway timed out",
		"    $ acemq-flow compensate ",
		"charge     compensated: the payment refunded",
		"ship       waits on the scheduler ladder until ",
		"summary: run 1 completed, run 2 completed, run 3 compensated, run 4 completed",
	} {
		require.Contains(t, r.stdout, want)
	}
	require.NotContains(t, r.stderr, "level=", "nothing logged at warn or above")
}

// TestDemoRefusesTheWorkersLadder: the demo deletes its ladder, so it will
// not run on the one every worker shares; and ACEMQ_LADDER, which names
// the workers' ladder, is not the demo's.
func TestDemoRefusesTheWorkersLadder(t *testing.T) {
	t.Parallel()
	r := execute(t, nil, "demo", "--ladder", "acemq.schedule")
	require.Equal(t, 1, r.code)
	require.Contains(t, r.stderr, `ladder "acemq.schedule" is every worker's`)
	require.Empty(t, r.stdout)

	r = execute(t, nil, "demo", "--help")
	require.Zero(t, r.code, r.stderr)
	require.NotContains(t, r.stdout, "$ACEMQ_LADDER")
}
