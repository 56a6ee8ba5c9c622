package observe_test

import (
	"context"
	"errors"
	"io"
	"math"
	"net"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	dto "github.com/prometheus/client_model/go"
	"github.com/prometheus/common/expfmt"
	"github.com/prometheus/common/model"
	"github.com/stretchr/testify/require"
	otelmetric "go.opentelemetry.io/otel/metric"

	"github.com/acemq/acemq-flow/broker"
	"github.com/acemq/acemq-flow/dsl"
	"github.com/acemq/acemq-flow/engine"
	"github.com/acemq/acemq-flow/engine/journal"
	"github.com/acemq/acemq-flow/engine/observe"
	"github.com/acemq/acemq-flow/internal/brokertest"
	"github.com/acemq/acemq-flow/internal/testenv"
)

// order is the payload of the test flow.
type order struct {
	ID   string `json:"id"`
	Fail bool   `json:"fail,omitempty"`
}

// scraped is what /metrics served after a flow ran.
type scraped struct {
	flow     string
	ladder   string
	body     string
	families map[string]*dto.MetricFamily
}

// runFlow runs a flow of the test's own on the loopback with the engine
// and the connection on one observe.Metrics (validate, charge with a
// compensation, a one-second delay, ship): one run completes, one is
// given up at ship and compensated. Then it scrapes /metrics.
func runFlow(t *testing.T) scraped {
	t.Helper()
	m, err := observe.NewMetrics(observe.MetricsConfig{})
	require.NoError(t, err)
	t.Cleanup(func() { require.NoError(t, m.Shutdown(context.Background())) })
	h := brokertest.New(t, "memory://"+testenv.Name(t, "broker"), false)
	conn := h.Open(broker.Config{MeterProvider: m.MeterProvider()})
	j, err := journal.NewMemory(0)
	require.NoError(t, err)
	eng, err := engine.New(engine.Config{Conn: conn, Journal: j, MeterProvider: m.MeterProvider()})
	require.NoError(t, err)
	t.Cleanup(func() { require.NoError(t, eng.Close(context.Background())) })
	name := testenv.Name(t, "flow")
	pass := func(_ context.Context, o order) (order, error) { return o, nil }
	require.NoError(t, eng.Register(dsl.Flow(name,
		dsl.Step("validate", pass),
		dsl.Step("charge", pass).Compensate(func(context.Context, order) error { return nil }),
		dsl.Delay(time.Second),
		dsl.Step("ship", func(_ context.Context, o order) (order, error) {
			if o.Fail {
				return o, broker.Fatal(errors.New("no courier"))
			}
			return o, nil
		}))))
	ctx := brokertest.Ctx(t)
	w, err := eng.StartWorker(ctx)
	require.NoError(t, err)
	t.Cleanup(func() { require.NoError(t, w.Close(context.Background())) })
	require.NoError(t, m.ObserveLadder(conn))
	require.NoError(t, m.ObserveFlows(eng))
	var gate observe.WorkerGate
	gate.Set(w)
	require.NoError(t, m.ObserveReadiness(observe.BrokerCheck(conn), gate.Check()))

	ok, err := eng.Start(ctx, name, order{ID: "o-1"})
	require.NoError(t, err)
	failed, err := eng.Start(ctx, name, order{ID: "o-2", Fail: true})
	require.NoError(t, err)
	waitStatus(t, j, ok.RunID, journal.Completed)
	waitStatus(t, j, failed.RunID, journal.Compensated)

	srv, err := observe.NewServer(observe.ServerConfig{Metrics: m})
	require.NoError(t, err)
	ts := httptest.NewServer(srv)
	t.Cleanup(ts.Close)
	status, body := get(t, ts.URL+"/metrics")
	require.Equal(t, http.StatusOK, status)
	p := expfmt.NewTextParser(model.UTF8Validation)
	fams, err := p.TextToMetricFamilies(strings.NewReader(body))
	require.NoError(t, err, body)
	return scraped{flow: name, ladder: h.Ladder, body: body, families: fams}
}

func waitStatus(t *testing.T, j journal.Journal, runID string, want journal.Status) {
	t.Helper()
	require.Eventually(t, func() bool {
		r, err := j.Run(context.Background(), runID)
		return err == nil && r.Status == want
	}, 15*time.Second, 10*time.Millisecond, "run %s never became %s", runID, want)
}

func get(t *testing.T, url string) (int, string) {
	t.Helper()
	req, err := http.NewRequestWithContext(brokertest.Ctx(t), http.MethodGet, url, nil)
	require.NoError(t, err)
	resp, err := http.DefaultClient.Do(req)
	require.NoError(t, err)
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	require.NoError(t, err)
	return resp.StatusCode, string(b)
}

// sample is the one metric of family name whose labels include want, or
// fails the test listing what was there.
func (s scraped) sample(t *testing.T, name string, want map[string]string) *dto.Metric {
	t.Helper()
	fam, ok := s.families[name]
	require.True(t, ok, "no metric family %s in /metrics:\n%s", name, s.body)
	var found []*dto.Metric
	for _, m := range fam.GetMetric() {
		labels := map[string]string{}
		for _, l := range m.GetLabel() {
			labels[l.GetName()] = l.GetValue()
		}
		match := true
		for k, v := range want {
			if labels[k] != v {
				match = false
			}
		}
		if match {
			found = append(found, m)
		}
	}
	require.Len(t, found, 1, "%s with labels %v among:\n%v", name, want, fam)
	return found[0]
}

// bounds are a histogram's finite bucket bounds.
func bounds(m *dto.Metric) []float64 {
	var got []float64
	for _, b := range m.GetHistogram().GetBucket() {
		if !math.IsInf(b.GetUpperBound(), 1) {
			got = append(got, b.GetUpperBound())
		}
	}
	return got
}

// label is the value of m's label name, "" when it has none.
func label(m *dto.Metric, name string) string {
	for _, l := range m.GetLabel() {
		if l.GetName() == name {
			return l.GetValue()
		}
	}
	return ""
}

// TestMetricsServedAfterAFlowRan: the engine's, the core's and the
// ladder's instruments are served under their Prometheus names with their
// labels; the engine's duration histograms have engine.DurationBuckets,
// the broker's broker.DurationBuckets.
func TestMetricsServedAfterAFlowRan(t *testing.T) {
	t.Parallel()
	s := runFlow(t)

	// The engine: runs leaving the flow, steps, starts, compensations.
	for outcome, step := range map[string]string{"completed": "ship", "failed": "ship"} {
		m := s.sample(t, "acemq_pipeline_run_total", map[string]string{"pipeline": s.flow, "step": step, "outcome": outcome})
		require.Equal(t, 1.0, m.GetCounter().GetValue(), outcome)
	}
	require.Equal(t, 2.0, s.sample(t, "acemq_flow_runs_started_total", map[string]string{"flow": s.flow}).GetCounter().GetValue())
	require.Equal(t, 1.0, s.sample(t, "acemq_flow_compensation_total",
		map[string]string{"flow": s.flow, "step": "charge", "outcome": "compensated"}).GetCounter().GetValue())
	step := s.sample(t, "acemq_flow_step_duration_seconds", map[string]string{"flow": s.flow, "step": "validate", "outcome": "completed"})
	require.Equal(t, uint64(2), step.GetHistogram().GetSampleCount())
	require.Contains(t, s.body, `acemq_flow_step_duration_seconds_bucket{flow="`+s.flow+`",`)
	require.Equal(t, 0.0, s.sample(t, "acemq_flow_steps_active", map[string]string{"flow": s.flow, "step": "ship"}).GetGauge().GetValue())
	require.Equal(t, uint64(2), s.sample(t, "acemq_pipeline_run_duration_seconds", map[string]string{"pipeline": s.flow}).GetHistogram().GetSampleCount())

	// The core: consumes and publishes, ours and the conventions'.
	ship := s.flow + ".ship"
	// The failed run's message is accepted too: its compensation has the
	// run, so it is not left in the dead-letter queue.
	require.Equal(t, 2.0, s.sample(t, "acemq_consume_total", map[string]string{"queue": ship, "outcome": "accepted"}).GetCounter().GetValue())
	require.Equal(t, 2.0, s.sample(t, "messaging_client_consumed_messages_total", map[string]string{
		"messaging_system": "rabbitmq", "messaging_operation_name": "process", "messaging_destination_name": ship,
	}).GetCounter().GetValue())
	require.Equal(t, uint64(2), s.sample(t, "messaging_process_duration_seconds", map[string]string{"messaging_destination_name": ship}).GetHistogram().GetSampleCount())
	require.Equal(t, uint64(2), s.sample(t, "acemq_consume_duration_seconds", map[string]string{"queue": ship, "outcome": "accepted"}).GetHistogram().GetSampleCount())
	require.Positive(t, s.sample(t, "acemq_publish_total", map[string]string{"outcome": "confirmed", "exchange": s.flow}).GetCounter().GetValue())
	require.Positive(t, s.sample(t, "messaging_client_sent_messages_total", map[string]string{"messaging_destination_name": s.flow}).GetCounter().GetValue())

	// The ladder: both runs were delayed a second before ship.
	for _, n := range []string{"acemq_schedule_scheduled_total", "acemq_schedule_delivered_total"} {
		require.GreaterOrEqual(t, s.sample(t, n, map[string]string{"ladder": s.ladder}).GetCounter().GetValue(), 2.0, n)
	}
	s.sample(t, "acemq_schedule_hops_total", map[string]string{"ladder": s.ladder})
	require.Equal(t, 0.0, s.sample(t, "acemq_schedule_malformed_total", map[string]string{"ladder": s.ladder}).GetCounter().GetValue())
	require.Equal(t, 0.0, s.sample(t, "acemq_schedule_backlog", map[string]string{"ladder": s.ladder}).GetGauge().GetValue())

	// Queue depths: nothing waits in ship's dead-letter queue, since the
	// failed run was compensated.
	require.Equal(t, 0.0, s.sample(t, "acemq_queue_depth", map[string]string{
		"flow": s.flow, "queue": ship + broker.DeadLetterSuffix, "role": observe.RoleDeadLetter,
	}).GetGauge().GetValue())
	require.Equal(t, 0.0, s.sample(t, "acemq_queue_depth", map[string]string{"queue": ship, "role": observe.RoleStep}).GetGauge().GetValue())
	s.sample(t, "acemq_queue_depth", map[string]string{"queue": s.flow + ".compensate.charge", "role": observe.RoleCompensation})

	// Runtime metrics beside them, and no run id anywhere.
	require.Contains(t, s.families, "go_goroutines")
	require.NotContains(t, s.body, "run_id")

	// No otel_scope_* labels on any series.
	require.NotContains(t, s.body, "otel_scope_")

	// A step's failure says its error type; a success has none.
	failed := s.sample(t, "acemq_flow_step_duration_seconds", map[string]string{"flow": s.flow, "step": "ship", "outcome": "failed"})
	require.Equal(t, uint64(1), failed.GetHistogram().GetSampleCount())
	require.Equal(t, engine.ErrorTypeFatal, label(failed, "error_type"))
	require.Empty(t, label(step, "error_type"), "a step that completed has no error type")

	// Publish latency, the messaging conventions' histogram, per exchange.
	pub := s.sample(t, "messaging_client_operation_duration_seconds", map[string]string{
		"messaging_system": "rabbitmq", "messaging_operation_name": "publish", "messaging_destination_name": s.flow,
	})
	require.Positive(t, pub.GetHistogram().GetSampleCount())
	require.Equal(t, broker.DurationBuckets(), bounds(pub))
	require.Empty(t, label(pub, "error_type"))

	// Readiness, per check.
	for _, check := range []string{"broker", "worker"} {
		require.Equal(t, 1.0, s.sample(t, "acemq_worker_ready", map[string]string{"check": check}).GetGauge().GetValue(), check)
	}

	// The engine's histograms start at 100 µs; the broker's keep the
	// messaging conventions' buckets.
	for _, m := range []*dto.Metric{step, s.sample(t, "acemq_pipeline_run_duration_seconds", map[string]string{"pipeline": s.flow})} {
		require.Equal(t, engine.DurationBuckets(), bounds(m))
		require.Equal(t, 0.0001, bounds(m)[0])
	}
	for _, m := range []*dto.Metric{
		s.sample(t, "messaging_process_duration_seconds", map[string]string{"messaging_destination_name": ship}),
		s.sample(t, "acemq_consume_duration_seconds", map[string]string{"queue": ship, "outcome": "accepted"}),
	} {
		require.Equal(t, broker.DurationBuckets(), bounds(m))
	}
}

// TestHistogramsWithoutBucketsGetTheEngines: a histogram whose instrument
// asked for no buckets is served with engine.DurationBuckets rather than
// the SDK's defaults (in milliseconds' range); one that asked for its own
// keeps them.
func TestHistogramsWithoutBucketsGetTheEngines(t *testing.T) {
	t.Parallel()
	m, err := observe.NewMetrics(observe.MetricsConfig{WithoutRuntime: true})
	require.NoError(t, err)
	meter := m.MeterProvider().Meter("test")
	h, err := meter.Float64Histogram("test.wait.duration", otelmetric.WithUnit("s"))
	require.NoError(t, err)
	h.Record(context.Background(), 0.3)
	own, err := meter.Float64Histogram("test.own.duration", otelmetric.WithUnit("s"), otelmetric.WithExplicitBucketBoundaries(1, 2))
	require.NoError(t, err)
	own.Record(context.Background(), 0.3)
	fams, err := m.Gatherer().Gather()
	require.NoError(t, err)
	bounds := map[string][]float64{}
	for _, f := range fams {
		for _, b := range f.GetMetric()[0].GetHistogram().GetBucket() {
			bounds[f.GetName()] = append(bounds[f.GetName()], b.GetUpperBound())
		}
		require.NotContains(t, f.GetName(), "go_", "WithoutRuntime leaves the runtime out")
	}
	require.Equal(t, engine.DurationBuckets(), bounds["test_wait_duration_seconds"])
	require.Equal(t, []float64{1, 2}, bounds["test_own_duration_seconds"])
}

// TestReadyz: /readyz is 503 with the failing check's reason while any
// check fails (the worker not started, the connection closed, a database
// that does not answer), and 200 when all hold; /healthz is 200 all along.
func TestReadyz(t *testing.T) {
	t.Parallel()
	h := brokertest.New(t, "memory://"+testenv.Name(t, "broker"), false)
	conn := h.Open(broker.Config{})
	require.NoError(t, conn.RunLadder(brokertest.Ctx(t)))
	eng, err := engine.New(engine.Config{Conn: conn})
	require.NoError(t, err)
	t.Cleanup(func() { require.NoError(t, eng.Close(context.Background())) })
	pass := func(_ context.Context, o order) (order, error) { return o, nil }
	require.NoError(t, eng.Register(dsl.Flow(testenv.Name(t, "flow"), dsl.Step("only", pass))))

	var gate observe.WorkerGate
	var dbErr error
	srv, err := observe.NewServer(observe.ServerConfig{Checks: []observe.Check{
		observe.BrokerCheck(conn),
		{Name: "database", Run: func(context.Context) error { return dbErr }},
		gate.Check(),
	}})
	require.NoError(t, err)
	ts := httptest.NewServer(srv)
	t.Cleanup(ts.Close)

	status, body := get(t, ts.URL+"/readyz")
	require.Equal(t, http.StatusServiceUnavailable, status)
	require.Equal(t, "broker: ok\ndatabase: ok\nworker: worker not started yet (declaring topology, starting consumers)\nnot ready\n", body)

	w, err := eng.StartWorker(brokertest.Ctx(t))
	require.NoError(t, err)
	gate.Set(w)
	status, body = get(t, ts.URL+"/readyz")
	require.Equal(t, http.StatusOK, status, body)
	require.Equal(t, "broker: ok\ndatabase: ok\nworker: ok\nready\n", body)

	dbErr = errors.New("dial tcp 127.0.0.1:5432: connect: connection refused")
	status, body = get(t, ts.URL+"/readyz")
	require.Equal(t, http.StatusServiceUnavailable, status)
	require.Contains(t, body, "database: dial tcp 127.0.0.1:5432: connect: connection refused\n")
	dbErr = nil

	require.NoError(t, w.Close(context.Background()))
	require.NoError(t, conn.Close(context.Background()))
	status, body = get(t, ts.URL+"/readyz")
	require.Equal(t, http.StatusServiceUnavailable, status)
	require.Contains(t, body, "broker: "+broker.ErrClosed.Error()+"\n")

	status, body = get(t, ts.URL+"/healthz")
	require.Equal(t, http.StatusOK, status)
	require.Equal(t, "ok\n", body)
	status, _ = get(t, ts.URL+"/metrics")
	require.Equal(t, http.StatusNotFound, status, "no Metrics, no /metrics")
}

// TestNewServerRefusesABadCheck: a check without a name or a function.
func TestNewServerRefusesABadCheck(t *testing.T) {
	t.Parallel()
	_, err := observe.NewServer(observe.ServerConfig{Checks: []observe.Check{{Name: "x"}}})
	require.ErrorContains(t, err, "needs a name and a function")
	_, err = observe.NewServer(observe.ServerConfig{Checks: []observe.Check{{Run: func(context.Context) error { return nil }}}})
	require.Error(t, err)
}

// TestServeStopsWithItsContext: Serve answers until its context ends, then
// returns nil and the port is closed.
func TestServeStopsWithItsContext(t *testing.T) {
	t.Parallel()
	ln, err := new(net.ListenConfig).Listen(context.Background(), "tcp", "127.0.0.1:0")
	require.NoError(t, err)
	srv, err := observe.NewServer(observe.ServerConfig{})
	require.NoError(t, err)
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- observe.Serve(ctx, ln, srv) }()
	status, _ := get(t, "http://"+ln.Addr().String()+"/healthz")
	require.Equal(t, http.StatusOK, status)
	cancel()
	require.NoError(t, brokertest.Next(t, done, 10*time.Second))
	_, err = http.Get("http://" + ln.Addr().String() + "/healthz") //nolint:noctx // the server is gone
	require.Error(t, err)

	require.ErrorContains(t, observe.ListenAndServe(context.Background(), "256.0.0.1:1", srv), "listen on 256.0.0.1:1")
}
