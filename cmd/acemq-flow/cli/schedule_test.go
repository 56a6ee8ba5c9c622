package cli

import (
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/acemq/acemq-flow/engine"
	"github.com/acemq/acemq-flow/engine/journal"
)

// TestScheduleListAndCancel: a run started to run in an hour is listed
// with its kind and due time, cancelled, shown cancelled, and cannot be
// cancelled twice; the same commands without a database say why they
// cannot work.
func TestScheduleListAndCancel(t *testing.T) {
	t.Parallel()
	fx := newCLIFixture(t, true)
	require.Zero(t, fx.run("migrate").code)
	fx.startWorker()
	var started engine.Started
	fx.runJSON(&started, "start", fx.flow("orders"), "--payload", `{"id":"later","amount":3}`, "--in", "1h")
	require.WithinDuration(t, time.Now().Add(time.Hour), started.DueAt, time.Minute)

	var list scheduleList
	fx.runJSON(&list, "schedule", "list", "--flow", fx.flow("orders"))
	i := slices.IndexFunc(list.Waiting, func(s engine.Scheduled) bool { return s.RunID == started.RunID })
	require.GreaterOrEqual(t, i, 0, "the delayed start is listed: %+v", list)
	require.Equal(t, engine.ScheduledStart, list.Waiting[i].Kind)
	require.True(t, list.Waiting[i].DueAt.Equal(started.DueAt.Truncate(time.Microsecond)) ||
		list.Waiting[i].DueAt.Sub(started.DueAt).Abs() < time.Millisecond)
	var raw []map[string]any
	r := fx.run("schedule", "list", "-o", "json")
	require.Zero(t, r.code, r.stderr)
	var doc struct {
		Waiting json.RawMessage `json:"waiting"`
	}
	require.NoError(t, json.Unmarshal([]byte(r.stdout), &doc))
	require.NoError(t, json.Unmarshal(doc.Waiting, &raw))
	for _, k := range []string{"run_id", "flow", "kind", "due_at"} {
		require.Contains(t, raw[0], k, "schedule list -o json entries carry %s", k)
	}

	text := fx.run("schedule", "list")
	require.Zero(t, text.code)
	require.Contains(t, text.stdout, started.RunID)
	require.Contains(t, text.stdout, "ladder")
	require.NotContains(t, text.stdout, "backlog unknown")

	// A ladder whose control queue cannot be read is not reported as
	// moving.
	var unread scheduleList
	fx.runJSON(&unread, "schedule", "list", "--ladder", "acemq-test.no-such-ladder")
	require.Contains(t, unread.Ladder.BacklogError, "404")
	text = fx.run("schedule", "list", "--ladder", "acemq-test.no-such-ladder")
	require.Zero(t, text.code, text.stderr)
	require.Contains(t, text.stdout, "backlog unknown")

	var cancelled engine.Scheduled
	fx.runJSON(&cancelled, "schedule", "cancel", started.RunID)
	require.Equal(t, engine.ScheduledStart, cancelled.Kind)
	fx.waitStatus(started.RunID, journal.Cancelled, 10*time.Second)
	again := fx.run("schedule", "cancel", started.RunID)
	require.Equal(t, 1, again.code)
	require.Contains(t, again.stderr, "waits for nothing")

	alone := fx.runEnv([]string{"ACEMQ_DATABASE_URL="}, "schedule", "list")
	require.Equal(t, 1, alone.code)
	require.Contains(t, alone.stderr, "need the run journal every worker writes")
}

// TestBulkReplay: failed runs found by flow and status, a dry run that
// moves nothing, then a replay of those a condition on their payload
// chooses; they complete, the others stay failed.
func TestBulkReplay(t *testing.T) {
	t.Parallel()
	fx := newCLIFixture(t, true)
	require.Zero(t, fx.run("migrate").code)
	down := filepath.Join(t.TempDir(), "payments-down")
	require.NoError(t, os.WriteFile(down, nil, 0o600))
	fx.startWorker()
	var big, small []string
	for i, amount := range []int{5, 500, 7, 700} {
		id := fx.start("orders", fmt.Sprintf(`{"id":"o%d","amount":%d,"fail_while":%q}`, i, amount, down))
		if amount > 100 {
			big = append(big, id)
		} else {
			small = append(small, id)
		}
	}
	for _, id := range append(append([]string{}, big...), small...) {
		fx.waitStatus(id, journal.Failed, 20*time.Second)
	}
	require.NoError(t, os.Remove(down))

	var dry engine.BulkResult
	fx.runJSON(&dry, "replay", "--flow", fx.flow("orders"), "--status", "failed", "--where", "payload.amount > 100", "--dry-run")
	require.True(t, dry.DryRun)
	require.ElementsMatch(t, big, dry.Replayed)
	require.Equal(t, 2, dry.Skipped)

	var done engine.BulkResult
	fx.runJSON(&done, "replay", "--flow", fx.flow("orders"), "--status", "failed", "--where", "payload.amount > 100", "--rate", "50/s")
	require.ElementsMatch(t, big, done.Replayed)
	for _, id := range big {
		fx.waitStatus(id, journal.Completed, 20*time.Second)
	}
	for _, id := range small {
		r := fx.run("runs", "show", id, "-o", "json")
		require.Contains(t, r.stdout, `"status": "failed"`)
	}
	text := fx.run("replay", "--flow", fx.flow("orders"), "--status", "failed")
	require.Zero(t, text.code, text.stderr)
	require.True(t, strings.HasPrefix(text.stdout, "replayed 2, skipped 0, not found 0, of 2 selected"), text.stdout)

	both := fx.run("replay", "some-run", "--flow", fx.flow("orders"))
	require.Equal(t, 1, both.code)
	require.Contains(t, both.stderr, "not both")
}
