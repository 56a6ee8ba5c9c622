package cli

import (
	"slices"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/acemq/acemq-flow/engine"
	"github.com/acemq/acemq-flow/engine/journal"
)

// TestSignal: a run waiting for its signal is listed as waiting (runs
// list, schedule list: a signal, until its timeout); `signal` resumes it
// and it completes; signals it cannot take exit 1 and say why.
func TestSignal(t *testing.T) {
	t.Parallel()
	fx := newCLIFixture(t, true)
	require.Zero(t, fx.run("migrate").code)
	fx.startWorker()
	flow := fx.flow("approvals")
	shown := fx.run("flows", "show", flow)
	require.Zero(t, shown.code, shown.stderr)
	require.Contains(t, shown.stdout, "approval  waits for signal approval (at most 1h0m0s, then fails)")
	var started engine.Started
	fx.runJSON(&started, "start", flow, "--payload", `{"id":"a-1","amount":3}`)
	fx.waitStatus(started.RunID, journal.Waiting, 10*time.Second)

	var list scheduleList
	fx.runJSON(&list, "schedule", "list", "--flow", flow)
	i := slices.IndexFunc(list.Waiting, func(s engine.Scheduled) bool { return s.RunID == started.RunID })
	require.GreaterOrEqual(t, i, 0, "the waiting run is listed: %+v", list)
	require.Equal(t, engine.ScheduledSignal, list.Waiting[i].Kind)
	require.Equal(t, "approval", list.Waiting[i].Step)
	require.WithinDuration(t, time.Now().Add(time.Hour), list.Waiting[i].DueAt, time.Minute)
	waiting := fx.run("runs", "list", "--flow", flow, "--status", "waiting")
	require.Zero(t, waiting.code, waiting.stderr)
	require.Contains(t, waiting.stdout, started.RunID)
	require.Contains(t, waiting.stdout, "approval")
	require.Contains(t, waiting.stdout, localTime(list.Waiting[i].DueAt, timeLayout), "and until when (its timeout)")

	wrong := fx.run("signal", started.RunID, "approval", "--payload", `{"by":7}`)
	require.Equal(t, 1, wrong.code)
	require.Contains(t, wrong.stderr, "payload")
	none := fx.run("signal", started.RunID, "approved", "--payload", `{"by":"ada"}`)
	require.Equal(t, 1, none.code)
	require.Contains(t, none.stderr, "no WaitFor \"approved\"")

	ok := fx.run("signal", started.RunID, "approval", "--payload", `{"by":"ada"}`)
	require.Zero(t, ok.code, ok.stderr)
	require.Contains(t, ok.stdout, "signal approval sent, the run goes on")
	fx.waitStatus(started.RunID, journal.Completed, 10*time.Second)

	over := fx.run("signal", started.RunID, "approval", "--payload", `{"by":"ada"}`)
	require.Equal(t, 1, over.code)
	require.Contains(t, over.stderr, "the run is over")
	unknown := fx.run("signal", "00000000-no-such-run", "approval", "--payload", `{"by":"ada"}`)
	require.Equal(t, 1, unknown.code)
	require.Contains(t, unknown.stderr, "00000000-no-such-run")

	alone := fx.runEnv([]string{"ACEMQ_DATABASE_URL="}, "signal", started.RunID, "approval", "--payload", `{"by":"ada"}`)
	require.Equal(t, 1, alone.code)
	require.Contains(t, alone.stderr, "database")
}

// TestCancel: a waiting run cancelled from the command line ends
// cancelled, its timeline saying who asked and why; a run that is over is
// refused.
func TestCancel(t *testing.T) {
	t.Parallel()
	fx := newCLIFixture(t, true)
	require.Zero(t, fx.run("migrate").code)
	fx.startWorker()
	var started engine.Started
	fx.runJSON(&started, "start", fx.flow("approvals"), "--payload", `{"id":"c-1","amount":3}`)
	fx.waitStatus(started.RunID, journal.Waiting, 10*time.Second)
	var c engine.CancelledRun
	fx.runJSON(&c, "cancel", started.RunID, "--reason", "the customer changed their mind")
	require.Equal(t, started.RunID, c.RunID)
	require.Equal(t, "the customer changed their mind", c.Reason)
	require.Equal(t, osUser(), c.Actor)
	fx.waitStatus(started.RunID, journal.Cancelled, 10*time.Second)
	shown := fx.run("runs", "show", started.RunID)
	require.Zero(t, shown.code, shown.stderr)
	require.Contains(t, shown.stdout, "cancelled by "+osUser()+": the customer changed their mind")
	again := fx.run("cancel", started.RunID)
	require.Equal(t, 1, again.code)
	require.Contains(t, again.stderr, "the run is over")
	signal := fx.run("signal", started.RunID, "approval", "--payload", `{"by":"ada"}`)
	require.Equal(t, 1, signal.code)
}
