package cli

import (
	"fmt"
	"math"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	tea "github.com/charmbracelet/bubbletea"
	"github.com/charmbracelet/x/ansi"
	"github.com/stretchr/testify/require"

	"github.com/acemq/acemq-flow/engine/fleet"
	"github.com/acemq/acemq-flow/engine/journal"
)

// aFleet is a fleet of a worker up and a lost one not ready, a flow of two
// steps with messages waiting and dead letters, a step only the fleet
// knows, and a ladder with a backlog.
func aFleet(at time.Time) *fleet.View {
	q := func(n int) fleet.Queue { return fleet.Queue{Exists: true, Messages: n, Consumers: 1} }
	return &fleet.View{At: at, Reports: true,
		Workers: []fleet.Worker{
			{ID: "vm-1-aa", Host: "vm", State: fleet.StateUp, Ready: true, InFlight: 3, LastSeen: at.Add(-2 * time.Second)},
			{ID: "vm-2-bb", Host: "node-7", State: fleet.StateLost, NotReady: []string{"database: refused"}, LastSeen: at.Add(-time.Minute)},
		},
		Steps: []fleet.Step{
			{Flow: "orders", Step: "charge", Queue: q(12), DeadLetter: q(5), Parked: q(0), InFlight: 3},
			{Flow: "orders", Step: "ship", Queue: q(1), DeadLetter: q(0), Parked: q(0)},
			{Flow: "billing", Step: "invoice", Queue: fleet.Queue{}, DeadLetter: fleet.Queue{}},
		},
		Ladders: []fleet.Ladder{{LadderLoad: fleet.LadderLoad{Name: "acemq.schedule", Delivered: 40, LateP99: fleet.Seconds(250 * time.Millisecond)},
			Backlog: 7, Due: 2}},
	}
}

// TestTopShowsTheFleet: with a fleet, top's screen says how many workers
// are up and lost and the ladder's backlog, lists the workers, and shows
// each step's queue and its dead letters as the broker counts them (not
// the metrics' older figure); a step only the fleet knows gets a row, and
// a flow's row sums its steps'. The screen still fits 80x24.
func TestTopShowsTheFleet(t *testing.T) {
	t.Parallel()
	m := newTopModel(t.Context(), []string{"http://127.0.0.1:9464/metrics", "http://127.0.0.1:1/metrics"}, sortName, time.Second)
	now := time.Now()
	msg := manyFlows(0, now)
	s := msg.results[0].snap
	s.dlq["orders.charge.dlq"] = deadLetters{key: stepKey{"orders", "charge"}, depth: 2}
	s.active[stepKey{"orders", "charge"}] = 4
	msg.fleet = aFleet(now)
	m.record(msg, now)
	lines := strings.Split(m.View(), "\n")
	require.Len(t, lines, 24)
	for _, l := range lines {
		require.LessOrEqual(t, ansi.StringWidth(l), 80, l)
	}
	require.Contains(t, lines[0], "endpoints 1 up, 1 down")
	require.Equal(t, "workers 1 up, 0 draining, 1 lost · ladder acemq.schedule: backlog 7, due 2, lat…", ansi.Strip(lines[2]), "cut at 80")
	_, _ = m.Update(tea.WindowSizeMsg{Width: 120, Height: 24})
	screen := ansi.Strip(m.View())
	require.Contains(t, screen, "\nworkers 1 up, 0 draining, 1 lost · ladder acemq.schedule: backlog 7, due 2, late p99 250ms\n")
	require.Regexp(t, `\nWORKER\s+HOST\s+STATE\s+IN FLIGHT\s+SEEN\s+READY\n`, screen)
	require.Regexp(t, `\nvm-1-aa\s+vm\s+up\s+3\s+2s ago\s+yes\n`, screen)
	require.Regexp(t, `\nvm-2-bb\s+node-7\s+lost\s+0\s+1m0s ago\s+no: database: refused\n`, screen)
	require.Regexp(t, `\norders\s+-\s+-\s+4\s+-\s+-\s+13\s+5\n`, screen, "the flow: its steps' sums; in flight from the live metrics")
	require.Regexp(t, `\n  charge\s+-\s+-\s+4\s+-\s+-\s+12\s+5\n`, screen, "the broker's dead letters, not the metrics' 2")
	require.Regexp(t, `\n  ship\s+-\s+-\s+0\s+-\s+-\s+1\s+0\n`, screen)
	require.Regexp(t, `\nbilling\s+-\s+-\s+0\s+-\s+-\s+-\s+0\n  invoice\s+-\s+-\s+0\s+-\s+-\s+-\s+0\n`, screen, "a missing queue's depth is unknown")

	// Without an endpoint that answers, in flight is what the workers
	// reported.
	rows := mergeFleet(nil, aFleet(now), false)
	for _, r := range rows {
		if r.flow == "orders" && r.step == "charge" {
			require.InDelta(t, 3.0, r.inFlight, 0)
			require.True(t, math.IsNaN(r.rate))
		}
	}

	summary, workers := fleetLines(nil, fmt.Errorf("journal: connection refused"), 5)
	require.Equal(t, "fleet not read: journal: connection refused", summary)
	require.Empty(t, workers)
	summary, _ = fleetLines(&fleet.View{}, nil, 5)
	require.Equal(t, "workers: no database (--database-url), no reports", summary)
	three := aFleet(now)
	three.Workers = append(three.Workers, fleet.Worker{ID: "vm-3-cc", State: fleet.StateUp, Ready: true})
	_, workers = fleetLines(three, nil, 3)
	require.Len(t, workers, 3, "the header, one worker, and how many more")
	require.Regexp(t, `^vm-1-aa `, workers[1])
	require.Equal(t, "… and 2 more workers (-o json lists them all)", workers[2])
}

// TestTopJSONWithTheFleet runs `top -o json` against a metrics endpoint
// that answers, one that refuses, and a worker of the test binary on
// RabbitMQ and PostgreSQL: one document, the refusing endpoint down, the
// worker up and ready from its report, the failed run's dead letter at
// charge from the broker, the ladder.
func TestTopJSONWithTheFleet(t *testing.T) {
	t.Parallel()
	fx := newCLIFixture(t, true)
	require.Zero(t, fx.run("migrate").code)
	fx.startWorker()
	down := filepath.Join(t.TempDir(), "payments-down")
	require.NoError(t, os.WriteFile(down, nil, 0o600))
	id := fx.start("orders", fmt.Sprintf(`{"id":"failing","amount":5,"fail_while":%q}`, down))
	fx.waitStatus(id, journal.Failed, 20*time.Second)
	metrics := steadyWorker(t)

	var doc topDocument
	fx.runJSON(&doc, "top", "--from", metrics.URL+",127.0.0.1:1", "--interval", "300ms")
	require.Len(t, doc.Endpoints, 2)
	require.True(t, doc.Endpoints[0].Up)
	require.False(t, doc.Endpoints[1].Up, "an endpoint that refuses is down")
	require.Contains(t, doc.Endpoints[1].Error, "connection refused")

	rows := map[string]topRow{}
	for _, r := range doc.Rows {
		rows[r.Flow+"/"+r.Step] = r
	}
	charge := rows["orders/charge"]
	require.NotNil(t, charge.PerSecond, "two reads, an interval apart, make a rate")
	near(t, 10, fmt.Sprintf("%.2f", *charge.PerSecond))
	require.Nil(t, charge.Queue, "the steady worker's flow has no queue on the broker")

	require.NotNil(t, doc.Fleet)
	require.True(t, doc.Fleet.Reports)
	require.Empty(t, doc.Fleet.Problems)
	require.Len(t, doc.Fleet.Workers, 1)
	w := doc.Fleet.Workers[0]
	require.Equal(t, fleet.StateUp, w.State)
	require.True(t, w.Ready, "%v", w.NotReady)
	require.Equal(t, "dev", w.Build)
	require.Len(t, w.Flows, 3)
	ours := rows[fx.flow("orders")+"/charge"]
	require.NotNil(t, ours.Queue)
	require.Zero(t, *ours.Queue)
	require.InDelta(t, 1.0, ours.DeadLetters, 0, "the failed run's message, counted by the broker")
	require.Len(t, doc.Fleet.Ladders, 1)
	require.Equal(t, fx.h.Ladder, doc.Fleet.Ladders[0].Name)
	require.Equal(t, 1, doc.Fleet.Ladders[0].Workers)
}

// TestWorkerRefusesANegativeHeartbeat: --heartbeat is checked before
// anything is opened, and the error names it.
func TestWorkerRefusesANegativeHeartbeat(t *testing.T) {
	t.Parallel()
	r := executeWith(t, invocation{flows: unitFlows("beat-")}, "worker", "--heartbeat", "-1s")
	require.Equal(t, 1, r.code)
	require.Contains(t, r.stderr, "--heartbeat -1s: want 0 (the default, 10s) or more")
}
