package dashboard_test

import (
	"context"
	"fmt"
	"net/http"
	"net/http/httptest"
	"regexp"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/acemq/acemq-flow/engine/dashboard"
	"github.com/acemq/acemq-flow/engine/fleet"
	"github.com/acemq/acemq-flow/engine/journal"
	"github.com/acemq/acemq-flow/internal/brokertest"
	"github.com/acemq/acemq-flow/internal/dashboardtest"
	"github.com/acemq/acemq-flow/internal/testenv"
)

// cell is the text of the cell of class in the fleet page's row that
// starts with attrs (the row's data attributes).
func cell(t *testing.T, page, attrs, class string) string {
	t.Helper()
	re := regexp.MustCompile(`(?s)<tr [^>]*` + regexp.QuoteMeta(attrs) + `[^>]*>.*?<td class="[^"]*\b` + class + `\b[^"]*">(.*?)</td>`)
	m := re.FindStringSubmatch(page)
	require.NotNil(t, m, "no %s cell in the row %s", class, attrs)
	return m[1]
}

// TestFleetPage: /fleet lists the fixture's worker up and ready, a worker
// that stopped reporting as lost, each step of the flows with its dead
// letters, and the ladder with the failed run's held compensation; the
// navigation links to it.
func TestFleetPage(t *testing.T) {
	t.Parallel()
	fx := dashboardtest.New(t, dashboard.Config{})
	ctx := brokertest.Ctx(t)
	fx.Start(dashboardtest.Order{ID: "o-1", Fail: "card declined"}, journal.Failed)
	reports, err := fx.Journal.Workers(ctx)
	require.NoError(t, err)
	require.Len(t, reports, 1, "the fixture's worker reported itself when it started")
	worker := reports[0]
	require.NoError(t, fx.Journal.ReportWorker(ctx, journal.WorkerReport{ID: "gone-1", Host: "far-away", SeenAt: time.Now().Add(-time.Hour),
		Interval: 10 * time.Second, Checks: []journal.Check{{Name: "broker", Error: "connection refused"}}}))

	c := dashboardtest.Client(t)
	status, page, _ := dashboardtest.Do(t, c, http.MethodGet, fx.Srv.URL+"/fleet", nil, nil)
	require.Equal(t, http.StatusOK, status)
	require.Contains(t, page, `<a href="/fleet" class="on">Fleet</a>`)
	require.Contains(t, page, `data-refresh="5"`, "it reloads itself")
	require.Regexp(t, `1 up, 0 draining, 1 lost`, page)
	require.Regexp(t, `<tr class="worker" data-worker="`+regexp.QuoteMeta(worker.ID)+`" data-state="up" data-ready="true">`, page)
	require.Regexp(t, `<tr class="worker" data-worker="gone-1" data-state="lost" data-ready="false">`, page)
	require.Contains(t, cell(t, page, `data-worker="gone-1"`, "ready"), "broker: connection refused")
	require.Contains(t, cell(t, page, `data-worker="`+worker.ID+`"`, "flows"), fx.Flow)

	charge := fmt.Sprintf(`data-flow="%s" data-step="charge"`, fx.Flow)
	require.Equal(t, "1", cell(t, page, charge, "dlq"), "the failed run's message")
	require.Equal(t, "0", cell(t, page, charge, "queue"))
	require.Equal(t, "1", cell(t, page, charge, "consumers"))
	require.Equal(t, "1", cell(t, page, charge, "workers"))
	for _, s := range []string{"validate", "charge"} {
		require.Contains(t, page, fmt.Sprintf(`data-flow="%s" data-step="%s"`, fx.Flow, s))
	}
	require.Contains(t, page, fmt.Sprintf(`data-flow="%s" data-step="hold"`, fx.WaitFlow))
	require.Regexp(t, `<tr class="ladder" data-ladder="`+regexp.QuoteMeta(fx.H.Ladder)+`">`, page)
	// The failed run is held for a replay for an hour: its compensation
	// waits on the ladder meanwhile.
	require.Equal(t, "1", cell(t, page, `data-ladder="`+fx.H.Ladder+`"`, "backlog"))
	var rungs []string
	for _, m := range regexp.MustCompile(`<td class="num rung">(.*?)</td>`).FindAllStringSubmatch(page, -1) {
		rungs = append(rungs, m[1])
	}
	require.Equal(t, []string{"0", "1", "0", "0", "0"}, rungs, "a little less than an hour ahead: in the ten minutes' rung")
	require.Empty(t, regexp.MustCompile(`class="error problem"`).FindAllString(page, -1), "nothing went unread")
}

// TestFleetAPI: GET /api/fleet answers the fleet.View the page shows,
// with the token the other endpoints want.
func TestFleetAPI(t *testing.T) {
	t.Parallel()
	fx := dashboardtest.New(t, dashboard.Config{Token: "t0k"})
	fx.Start(dashboardtest.Order{ID: "o-1", Fail: "card declined"}, journal.Failed)
	var e dashboard.APIError
	require.Equal(t, http.StatusUnauthorized, apiDo(t, http.DefaultClient, http.MethodGet, fx.Srv.URL+"/api/fleet", "", nil, &e))
	require.Equal(t, "unauthorized", e.Code)

	var v fleet.View
	require.Equal(t, http.StatusOK, apiDo(t, http.DefaultClient, http.MethodGet, fx.Srv.URL+"/api/fleet", "", bearer("t0k"), &v))
	require.True(t, v.Reports)
	require.Len(t, v.Workers, 1)
	require.Equal(t, fleet.StateUp, v.Workers[0].State)
	require.True(t, v.Workers[0].Ready)
	require.Equal(t, fleet.Seconds(10*time.Second), v.Workers[0].Interval, "the default heartbeat")
	require.Empty(t, v.Problems)
	var charge *fleet.Step
	for i, s := range v.Steps {
		if s.Flow == fx.Flow && s.Step == "charge" {
			charge = &v.Steps[i]
		}
	}
	require.NotNil(t, charge)
	require.Equal(t, 1, charge.DeadLetter.Messages)
	require.True(t, charge.Queue.Exists)
	require.Len(t, v.Ladders, 1)
	require.Equal(t, fx.H.Ladder, v.Ladders[0].Name)
	require.Len(t, v.Ladders[0].Rungs, 5)
}

// TestFleetWithoutAnEngine: a dashboard on a journal alone lists the
// workers and the steps they report, says it cannot ask the broker, and
// shows no depths.
func TestFleetWithoutAnEngine(t *testing.T) {
	t.Parallel()
	j, err := journal.NewMemory(0)
	require.NoError(t, err)
	ctx := context.Background()
	require.NoError(t, j.ReportWorker(ctx, journal.WorkerReport{ID: "w-1", Host: "h", SeenAt: time.Now(), Interval: time.Minute,
		Queues: []journal.QueueLoad{{Queue: "orders.ship", Flow: "orders", Step: "ship", InFlight: 3}}}))
	h, err := dashboard.New(dashboard.Config{Journal: j, Logger: testenv.Logger(t)})
	require.NoError(t, err)
	srv := httptest.NewServer(h)
	t.Cleanup(srv.Close)
	status, page, _ := dashboardtest.Do(t, dashboardtest.Client(t), http.MethodGet, srv.URL+"/fleet", nil, nil)
	require.Equal(t, http.StatusOK, status)
	require.Contains(t, page, "This dashboard has no engine, so no broker to ask for queue depths.")
	ship := `data-flow="orders" data-step="ship"`
	require.Equal(t, "3", cell(t, page, ship, "in-flight"))
	require.Contains(t, cell(t, page, ship, "queue"), "—")
	require.Contains(t, page, `id="no-ladders"`)
}
