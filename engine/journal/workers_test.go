package journal_test

import (
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/acemq/acemq-flow/engine/journal"
)

// TestWorkerReportReadiness: a worker is ready when none of its checks
// failed, lost once LostAfter intervals passed without a report, and
// holds what its queues hold.
func TestWorkerReportReadiness(t *testing.T) {
	t.Parallel()
	seen := time.Date(2026, 5, 1, 12, 0, 0, 0, time.UTC)
	for _, tc := range []struct {
		name   string
		checks []journal.Check
		at     time.Duration
		ready  bool
		lost   bool
	}{
		{name: "no checks, just reported", ready: true},
		{name: "every check holds", checks: []journal.Check{{Name: "broker"}, {Name: "worker"}}, ready: true, at: 29 * time.Second},
		{name: "one fails", checks: []journal.Check{{Name: "broker"}, {Name: "database", Error: "down"}}, at: 30 * time.Second},
		{name: "three intervals late is not lost yet", ready: true, at: 30 * time.Second},
		{name: "past three intervals is lost", ready: true, at: 30*time.Second + time.Millisecond, lost: true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			r := journal.WorkerReport{ID: "w", SeenAt: seen, Interval: 10 * time.Second, Checks: tc.checks}
			require.Equal(t, tc.ready, r.Ready())
			require.Equal(t, tc.lost, r.Lost(seen.Add(tc.at)))
		})
	}
	r := journal.WorkerReport{Queues: []journal.QueueLoad{{InFlight: 2}, {InFlight: 0}, {InFlight: 5, Compensation: true}}}
	require.Equal(t, 7, r.InFlight())
}
