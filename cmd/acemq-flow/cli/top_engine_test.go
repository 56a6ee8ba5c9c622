package cli

import (
	"context"
	"net/http"
	"net/http/httptest"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/acemq/acemq-flow/broker"
	"github.com/acemq/acemq-flow/dsl"
	"github.com/acemq/acemq-flow/engine"
	"github.com/acemq/acemq-flow/engine/journal"
	"github.com/acemq/acemq-flow/engine/observe"
	"github.com/acemq/acemq-flow/internal/brokertest"
	"github.com/acemq/acemq-flow/internal/testenv"
)

// TestTopOfStepsThatTakeMicroseconds: on what a real worker serves, top's
// step p50 reads what steps that do nothing take (well under a
// millisecond), not the middle of a first bucket that starts at 5 ms.
func TestTopOfStepsThatTakeMicroseconds(t *testing.T) {
	t.Parallel()
	m, err := observe.NewMetrics(observe.MetricsConfig{WithoutRuntime: true})
	require.NoError(t, err)
	t.Cleanup(func() { require.NoError(t, m.Shutdown(context.Background())) })
	h := brokertest.New(t, "memory://"+testenv.Name(t, "broker"), false)
	conn := h.Open(broker.Config{MeterProvider: m.MeterProvider()})
	j, err := journal.NewMemory(0)
	require.NoError(t, err)
	eng, err := engine.New(engine.Config{Conn: conn, Journal: j, MeterProvider: m.MeterProvider()})
	require.NoError(t, err)
	t.Cleanup(func() { require.NoError(t, eng.Close(context.Background())) })
	flow := testenv.Name(t, "flow")
	type order struct {
		ID string `json:"id"`
	}
	pass := func(_ context.Context, o order) (order, error) { return o, nil }
	require.NoError(t, eng.Register(dsl.Flow(flow, dsl.Step("validate", pass), dsl.Step("charge", pass))))
	ctx := brokertest.Ctx(t)
	w, err := eng.StartWorker(ctx)
	require.NoError(t, err)
	t.Cleanup(func() { require.NoError(t, w.Close(context.Background())) })
	srv := httptest.NewServer(m.Handler())
	t.Cleanup(srv.Close)
	scrape := func() snapshot {
		t.Helper()
		req, err := http.NewRequestWithContext(ctx, http.MethodGet, srv.URL, nil)
		require.NoError(t, err)
		resp, err := http.DefaultClient.Do(req)
		require.NoError(t, err)
		defer resp.Body.Close()
		s, err := parseSnapshot(resp.Body, time.Now())
		require.NoError(t, err)
		return s
	}

	before := scrape()
	var ids []string
	for range 50 {
		res, err := eng.Start(ctx, flow, order{ID: "o"})
		require.NoError(t, err)
		ids = append(ids, res.RunID)
	}
	for _, id := range ids {
		require.Eventually(t, func() bool {
			r, err := j.Run(ctx, id)
			return err == nil && r.Status == journal.Completed
		}, 10*time.Second, 5*time.Millisecond)
	}
	after := scrape()
	require.Equal(t, 0.0001, after.durations[stepKey{flow: flow, step: "charge"}].bounds[0], "the engine's buckets start at 100 µs")

	var charge *row
	for _, r := range aggregate([][]snapshot{{before, after}}) {
		if r.flow == flow && r.step == "charge" {
			charge = &r
		}
	}
	require.NotNil(t, charge)
	require.Greater(t, charge.p50, 0.0)
	require.Less(t, charge.p50, 0.001, "a step that does nothing takes microseconds")
	require.LessOrEqual(t, charge.p50, charge.p99)
}
