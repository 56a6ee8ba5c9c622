package observe_test

import (
	"context"
	"errors"
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

// TestWorkerReportsWhatReadyzAnswers: a worker given ReportReadiness
// reports in the journal what /readyz's checks find, its own consumers
// among them, failing checks with their reasons.
func TestWorkerReportsWhatReadyzAnswers(t *testing.T) {
	t.Parallel()
	h := brokertest.New(t, "memory://"+testenv.Name(t, "broker"), false)
	conn := h.Open(broker.Config{})
	j, err := journal.NewMemory(0)
	require.NoError(t, err)
	dbErr := errors.New("dial tcp 127.0.0.1:5432: connect: connection refused")
	eng, err := engine.New(engine.Config{Conn: conn, Journal: j, Heartbeat: time.Hour, Readiness: observe.ReportReadiness(
		observe.BrokerCheck(conn),
		observe.Check{Name: "database", Run: func(context.Context) error { return dbErr }},
		observe.Check{Name: "unset"},
	)})
	require.NoError(t, err)
	t.Cleanup(func() { require.NoError(t, eng.Close(context.Background())) })
	pass := func(_ context.Context, o order) (order, error) { return o, nil }
	require.NoError(t, eng.Register(dsl.Flow(testenv.Name(t, "flow"), dsl.Step("only", pass))))
	w, err := eng.StartWorker(brokertest.Ctx(t))
	require.NoError(t, err)
	t.Cleanup(func() { require.NoError(t, w.Close(context.Background())) })

	rs, err := j.Workers(brokertest.Ctx(t))
	require.NoError(t, err)
	require.Len(t, rs, 1)
	require.Equal(t, []journal.Check{
		{Name: "broker"},
		{Name: "database", Error: dbErr.Error()},
		{Name: "unset", Error: `check "unset" has no function`},
		{Name: "worker"},
	}, rs[0].Checks)
	require.False(t, rs[0].Ready())
}

// TestResultsOfSlowChecks: a check still running when the time is up has
// failed, and so have those after it.
func TestResultsOfSlowChecks(t *testing.T) {
	t.Parallel()
	slow := observe.Check{Name: "slow", Run: func(ctx context.Context) error {
		<-ctx.Done()
		return ctx.Err()
	}}
	quick := observe.Check{Name: "quick", Run: func(context.Context) error { return nil }}
	got := observe.Results(context.Background(), []observe.Check{quick, slow, quick}, 20*time.Millisecond)
	require.Equal(t, []journal.Check{
		{Name: "quick"},
		{Name: "slow", Error: context.DeadlineExceeded.Error()},
		{Name: "quick", Error: "checks took longer than 20ms"},
	}, got)
}
