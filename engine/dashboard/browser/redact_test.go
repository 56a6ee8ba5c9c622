package browser

import (
	"context"
	"encoding/json"
	"net/http"
	"net/http/httptest"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/acemq/acemq-flow/broker"
	"github.com/acemq/acemq-flow/engine"
	"github.com/acemq/acemq-flow/engine/dashboard"
	"github.com/acemq/acemq-flow/engine/journal"
	"github.com/acemq/acemq-flow/internal/brokertest"
	"github.com/acemq/acemq-flow/internal/testenv"
	"github.com/acemq/acemq-flow/workflows"
)

// TestInABrowserSecretsAreMasked: a run of the demo's place-order flow,
// whose order's card is secret, shows its input in headless Chromium with
// the card masked to its last four digits and the rest as it is, while
// the journal keeps the card number whole (a replay charges it).
func TestInABrowserSecretsAreMasked(t *testing.T) {
	t.Parallel()
	h := brokertest.New(t, "memory://"+testenv.Name(t, "broker"), false)
	j, err := journal.NewMemory(0)
	require.NoError(t, err)
	flow := workflows.NewPlaceOrder(testenv.Name(t, "place-order"), workflows.NewStandIns().Services())
	eng, err := engine.New(engine.Config{Conn: h.Open(broker.Config{}), Journal: j})
	require.NoError(t, err)
	t.Cleanup(func() { require.NoError(t, eng.Close(context.Background())) })
	require.NoError(t, eng.Register(flow))
	w, err := eng.StartWorker(brokertest.Ctx(t))
	require.NoError(t, err)
	t.Cleanup(func() { require.NoError(t, w.Close(context.Background())) })

	order := workflows.ExampleOrder()
	started, err := eng.Start(brokertest.Ctx(t), flow.Name(), order)
	require.NoError(t, err)
	run := started.RunID
	require.Eventually(t, func() bool {
		r, err := j.Run(context.Background(), run)
		return err == nil && r.Status == journal.Completed
	}, 10*time.Second, 20*time.Millisecond)
	kept, err := j.Run(context.Background(), run)
	require.NoError(t, err)
	var input workflows.Order
	require.NoError(t, json.Unmarshal(kept.Input, &input))
	require.Equal(t, workflows.CardApproved, input.Card, "the journal keeps the card as it is")

	d, err := dashboard.New(dashboard.Config{Engine: eng, Logger: testenv.Logger(t)})
	require.NoError(t, err)
	t.Cleanup(func() { require.NoError(t, d.Close(context.Background())) })
	srv := httptest.NewServer(d)
	t.Cleanup(srv.Close)

	ctx := browser(t)
	require.Equal(t, int64(http.StatusOK), open(t, ctx, srv.URL+"/runs/"+run))
	require.Equal(t, "completed", text(t, ctx, "status"))
	shown := text(t, ctx, "input")
	require.Contains(t, shown, `"card": "•••• 4242"`)
	require.NotContains(t, shown, workflows.CardApproved)
	require.NotContains(t, eval[string](t, ctx, `document.documentElement.outerHTML`), workflows.CardApproved, "nowhere on the page")
	require.Contains(t, shown, `"customer": "Ada"`, "the rest as it is")
	require.Contains(t, shown, `"address": "12 Harbour Street, Bristol"`)
	screenshot(t, ctx, "dashboard-secret")
}
