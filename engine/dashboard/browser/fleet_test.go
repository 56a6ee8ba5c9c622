package browser

import (
	"context"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/acemq/acemq-flow/broker"
	"github.com/acemq/acemq-flow/dsl"
	"github.com/acemq/acemq-flow/engine"
	"github.com/acemq/acemq-flow/engine/dashboard"
	"github.com/acemq/acemq-flow/engine/journal"
	"github.com/acemq/acemq-flow/internal/brokertest"
	"github.com/acemq/acemq-flow/internal/dashboardtest"
	"github.com/acemq/acemq-flow/internal/testenv"
)

// TestInABrowserTheFleet opens /fleet while real workers run: the
// fixture's, and one of a packing flow (a build of its own, reporting every
// 100 ms) whose step holds two runs; beside them a worker that stopped
// reporting. The page lists the two up and ready and the third lost, the
// two runs in flight at pack, the failed run's dead letter at charge, and
// the ladder.
func TestInABrowserTheFleet(t *testing.T) {
	t.Parallel()
	fx := dashboardtest.New(t, dashboard.Config{})
	ctx := browser(t)
	fx.Start(dashboardtest.Order{ID: "o-1"}, journal.Completed)
	fx.Start(dashboardtest.Order{ID: "o-2", Fail: "card 4242 declined"}, journal.Failed)

	type parcel struct {
		ID string `json:"id"`
	}
	release := make(chan struct{})
	packing := testenv.Name(t, "packing")
	eng, err := engine.New(engine.Config{Conn: fx.H.Open(broker.Config{}), Journal: fx.Journal, Heartbeat: 100 * time.Millisecond, Build: "v1.4.2"})
	require.NoError(t, err)
	t.Cleanup(func() { require.NoError(t, eng.Close(context.Background())) })
	require.NoError(t, eng.Register(dsl.Flow(packing,
		dsl.Step("weigh", func(_ context.Context, p parcel) (parcel, error) { return p, nil }),
		dsl.Step("pack", func(ctx context.Context, p parcel) (parcel, error) {
			select {
			case <-release:
			case <-ctx.Done():
			}
			return p, nil
		}))))
	w, err := eng.StartWorker(brokertest.Ctx(t))
	require.NoError(t, err)
	t.Cleanup(func() {
		close(release)
		require.NoError(t, w.Close(context.Background()))
	})
	for _, id := range []string{"p-1", "p-2"} {
		_, err := eng.Start(brokertest.Ctx(t), packing, parcel{ID: id})
		require.NoError(t, err)
	}
	require.NoError(t, fx.Journal.ReportWorker(brokertest.Ctx(t), journal.WorkerReport{ID: "worker-gone", Host: "node-7", PID: 4711,
		StartedAt: time.Now().Add(-2 * time.Hour), SeenAt: time.Now().Add(-10 * time.Minute), Interval: 10 * time.Second,
		Checks: []journal.Check{{Name: "broker"}, {Name: "database", Error: "dial tcp 10.0.0.5:5432: connection refused"}}}))

	pack := `#steps tr[data-flow="` + packing + `"][data-step="pack"]`
	require.Eventually(t, func() bool {
		require.Equal(t, int64(http.StatusOK), open(t, ctx, fx.Srv.URL+"/fleet"))
		return eval[string](t, ctx, `(document.querySelector('`+pack+` td.in-flight') || {}).textContent || ""`) == "2"
	}, 15*time.Second, 200*time.Millisecond, "the packing worker's beats say two runs are held at pack")

	workers := eval[[]string](t, ctx, `[...document.querySelectorAll("#workers tr.worker")].map(r => r.dataset.state + ":" + r.dataset.ready)`)
	require.Equal(t, []string{"up:true", "up:true", "lost:false"}, workers, "the lost last")
	mine := `#workers tr[data-worker="` + w.ID() + `"]`
	row := eval[string](t, ctx, `document.querySelector('`+mine+`').textContent`)
	require.Contains(t, row, "v1.4.2")
	require.Contains(t, row, packing)
	require.Equal(t, "2", strings.TrimSpace(eval[string](t, ctx, `document.querySelector('`+mine+` td.in-flight').textContent`)))
	gone := eval[string](t, ctx, `document.querySelector('#workers tr[data-worker="worker-gone"] td.ready').textContent`)
	require.Contains(t, gone, "not ready")
	require.Contains(t, gone, "database: dial tcp 10.0.0.5:5432: connection refused")
	require.Contains(t, text(t, ctx, "fleet-summary"), "2 up, 0 draining, 1 lost")

	charge := `#steps tr[data-flow="` + fx.Flow + `"][data-step="charge"]`
	require.Equal(t, "1", eval[string](t, ctx, `document.querySelector('`+charge+` td.dlq').textContent`), "the failed run's message")
	require.Equal(t, "1", eval[string](t, ctx, `document.querySelector('`+pack+` td.workers').textContent`))
	require.Equal(t, "1", eval[string](t, ctx, `document.querySelector('`+pack+` td.consumers').textContent`))
	require.Equal(t, 1, eval[int](t, ctx, `document.querySelectorAll('#ladders tr[data-ladder="`+fx.H.Ladder+`"]').length`))
	require.Equal(t, "1", eval[string](t, ctx, `document.querySelector('#ladders td.backlog').textContent`),
		"the failed run's compensation, held for an hour")
	require.Equal(t, 0, eval[int](t, ctx, `document.querySelectorAll(".problem").length`))
	screenshot(t, ctx, "dashboard-fleet")
}
