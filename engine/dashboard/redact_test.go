package dashboard_test

import (
	"context"
	"encoding/json"
	"net/http"
	"net/http/httptest"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/acemq/acemq-flow/engine/dashboard"
	"github.com/acemq/acemq-flow/engine/journal"
	"github.com/acemq/acemq-flow/internal/dashboardtest"
	"github.com/acemq/acemq-flow/internal/testenv"
)

// TestRunPageMasksSecrets: a dashboard without an engine masks a run's
// input by Config.Secrets of its flow; a flow it has no secrets for is
// shown as it is.
func TestRunPageMasksSecrets(t *testing.T) {
	t.Parallel()
	j, err := journal.NewMemory(0)
	require.NoError(t, err)
	now := time.Now()
	input := json.RawMessage(`{"id":"o-1","card":{"number":"4242 4242 4242 4242","holder":"Ada <ada@example.com>"},"pin":"1234"}`)
	for _, run := range []struct{ id, flow string }{{"r-secret", "shop"}, {"r-plain", "other"}} {
		require.NoError(t, j.Record(context.Background(), []journal.Event{{RunID: run.id, Flow: run.flow, Key: "start", Kind: journal.KindStart,
			Outcome: "started", StartedAt: now, EndedAt: now, Status: journal.Running, RunStep: "a", Input: input}}))
	}
	d, err := dashboard.New(dashboard.Config{Journal: j, Logger: testenv.Logger(t), Secrets: map[string][]string{"shop": {"payload.card.number", "pin"}}})
	require.NoError(t, err)
	srv := httptest.NewServer(d)
	t.Cleanup(srv.Close)

	status, body, _ := dashboardtest.Do(t, dashboardtest.Client(t), http.MethodGet, srv.URL+"/runs/r-secret", nil, nil)
	require.Equal(t, http.StatusOK, status)
	require.Contains(t, body, `&#34;number&#34;: &#34;•••• 4242&#34;`)
	require.Contains(t, body, `&#34;pin&#34;: &#34;••••&#34;`)
	require.Contains(t, body, `Ada &lt;ada@example.com&gt;`, "the rest as it is, escaped by the page")
	require.NotContains(t, body, "4242 4242 4242 4242")
	require.NotContains(t, body, "1234")

	status, body, _ = dashboardtest.Do(t, dashboardtest.Client(t), http.MethodGet, srv.URL+"/runs/r-plain", nil, nil)
	require.Equal(t, http.StatusOK, status)
	require.Contains(t, body, "4242 4242 4242 4242", "no secrets known for the flow")
}
