package dashboard_test

import (
	"context"
	"errors"
	"io"
	"net/http"
	"net/http/cookiejar"
	"net/http/httptest"
	"net/url"
	"regexp"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
	sdkmetric "go.opentelemetry.io/otel/sdk/metric"
	"go.opentelemetry.io/otel/sdk/metric/metricdata"

	"github.com/acemq/acemq-flow/broker"
	"github.com/acemq/acemq-flow/dsl"
	"github.com/acemq/acemq-flow/engine"
	"github.com/acemq/acemq-flow/engine/dashboard"
	"github.com/acemq/acemq-flow/engine/journal"
	"github.com/acemq/acemq-flow/internal/brokertest"
	"github.com/acemq/acemq-flow/internal/testenv"
)

// order is the payload of the test flow: a run whose Fail is set fails
// for good at charge with that text, the first time only, so that a
// replay completes it.
type order struct {
	ID   string `json:"id"`
	Fail string `json:"fail,omitempty"`
}

// fixture is a flow of the test's own worked by a worker engine on the
// loopback, and a dashboard on the same journal whose engine has no
// worker: as `acemq-flow dashboard` runs beside the workers.
type fixture struct {
	t       *testing.T
	h       *brokertest.Harness
	journal *journal.Memory
	worker  *engine.Engine
	// eng is the dashboard's engine: the flow registered, no worker; its
	// connection's metrics go to metrics.
	eng     *engine.Engine
	metrics *sdkmetric.ManualReader
	flow    string
	dash    *dashboard.Dashboard
	srv     *httptest.Server

	mu      sync.Mutex
	charged map[string]int
}

// slowLookups is a journal whose Run takes a while: a group replay, which
// looks up each of its runs, then takes long enough for its progress page
// to be seen.
type slowLookups struct {
	journal.Journal
	delay time.Duration
}

func (s slowLookups) Run(ctx context.Context, id string) (journal.Run, error) {
	time.Sleep(s.delay)
	return s.Journal.Run(ctx, id)
}

// newFixture is a fixture with a dashboard of cfg (on the fixture's journal
// and engine unless cfg names its own); lookup, when positive, is how long
// each run lookup of the dashboard's engine takes.
func newFixture(t *testing.T, cfg dashboard.Config, lookup ...time.Duration) *fixture {
	t.Helper()
	fx := &fixture{t: t, flow: testenv.Name(t, "flow"), charged: map[string]int{}}
	fx.h = brokertest.New(t, "memory://"+testenv.Name(t, "broker"), false)
	j, err := journal.NewMemory(0)
	require.NoError(t, err)
	fx.journal = j
	def := dsl.Flow(fx.flow,
		dsl.Step("validate", func(_ context.Context, o order) (order, error) { return o, nil }).
			Compensate(func(context.Context, order) error { return nil }),
		dsl.Step("charge", fx.charge),
		// A failed run waits for a replay rather than compensating at once.
		dsl.HoldForReplay(time.Hour),
	)
	fx.worker = fx.engine(def, broker.Config{})
	w, err := fx.worker.StartWorker(brokertest.Ctx(t))
	require.NoError(t, err)
	t.Cleanup(func() { require.NoError(t, w.Close(context.Background())) })
	fx.metrics = sdkmetric.NewManualReader()
	var ej journal.Journal = j
	if len(lookup) > 0 {
		ej = slowLookups{Journal: j, delay: lookup[0]}
	}
	fx.eng = fx.engineOn(def, broker.Config{MeterProvider: sdkmetric.NewMeterProvider(sdkmetric.WithReader(fx.metrics))}, ej)
	if cfg.Journal == nil && cfg.Engine == nil {
		cfg.Journal, cfg.Engine = j, fx.eng
	}
	cfg.Logger = testenv.Logger(t)
	fx.dash, err = dashboard.New(cfg)
	require.NoError(t, err)
	// Closed before the engines (cleanups run last first).
	t.Cleanup(func() { require.NoError(t, fx.dash.Close(context.Background())) })
	fx.srv = httptest.NewServer(fx.dash)
	t.Cleanup(fx.srv.Close)
	return fx
}

// engine is an engine on a connection of its own (bc) to the test's
// broker, recording in the shared journal, with def registered.
func (fx *fixture) engine(def *dsl.FlowDef, bc broker.Config) *engine.Engine {
	return fx.engineOn(def, bc, fx.journal)
}

// engineOn is engine recording in j.
func (fx *fixture) engineOn(def *dsl.FlowDef, bc broker.Config, j journal.Journal) *engine.Engine {
	conn := fx.h.Open(bc)
	eng, err := engine.New(engine.Config{Conn: conn, Journal: j})
	require.NoError(fx.t, err)
	fx.t.Cleanup(func() { require.NoError(fx.t, eng.Close(context.Background())) })
	require.NoError(fx.t, eng.Register(def))
	return eng
}

func (fx *fixture) charge(ctx context.Context, o order) (order, error) {
	m, _ := broker.Handling(ctx)
	fx.mu.Lock()
	fx.charged[m.RunID]++
	n := fx.charged[m.RunID]
	fx.mu.Unlock()
	if o.Fail != "" && n == 1 {
		return o, broker.Fatal(errors.New(o.Fail))
	}
	return o, nil
}

// start starts a run and waits until the journal shows it in want.
func (fx *fixture) start(o order, want journal.Status) string {
	fx.t.Helper()
	return fx.startAll([]order{o}, want)[0]
}

// startAll starts a run for each order, then waits until the journal
// shows each in want.
func (fx *fixture) startAll(orders []order, want journal.Status) []string {
	fx.t.Helper()
	var ids []string
	for _, o := range orders {
		res, err := fx.worker.Start(brokertest.Ctx(fx.t), fx.flow, o)
		require.NoError(fx.t, err)
		ids = append(ids, res.RunID)
	}
	for _, id := range ids {
		fx.wait(id, want)
	}
	return ids
}

// published is how many messages the dashboard's engine published through
// the default exchange and the broker confirmed: replayed copies, and the
// messages a pass over a queue puts back in it.
func (fx *fixture) published() int64 {
	fx.t.Helper()
	var rm metricdata.ResourceMetrics
	require.NoError(fx.t, fx.metrics.Collect(context.Background(), &rm))
	var n int64
	for _, sm := range rm.ScopeMetrics {
		for _, m := range sm.Metrics {
			sum, ok := m.Data.(metricdata.Sum[int64])
			if m.Name != "acemq.publish.total" || !ok {
				continue
			}
			for _, dp := range sum.DataPoints {
				ex, _ := dp.Attributes.Value("exchange")
				out, _ := dp.Attributes.Value("outcome")
				if ex.AsString() == "amq.default" && out.AsString() == "confirmed" {
					n += dp.Value
				}
			}
		}
	}
	return n
}

// replays is how many replays the run's timeline shows.
func (fx *fixture) replays(runID string) int {
	fx.t.Helper()
	tl, err := fx.journal.Timeline(context.Background(), runID)
	require.NoError(fx.t, err)
	n := 0
	for _, e := range tl {
		if e.Kind == journal.KindReplay {
			n++
		}
	}
	return n
}

// charges is how many times charge ran for the run.
func (fx *fixture) charges(runID string) int {
	fx.mu.Lock()
	defer fx.mu.Unlock()
	return fx.charged[runID]
}

func (fx *fixture) wait(runID string, want journal.Status) journal.Run {
	fx.t.Helper()
	var r journal.Run
	require.Eventually(fx.t, func() bool {
		var err error
		r, err = fx.journal.Run(context.Background(), runID)
		return err == nil && r.Status == want
	}, 15*time.Second, 10*time.Millisecond, "run %s never became %s", runID, want)
	return r
}

// client is a browser-like HTTP client: cookies kept, redirects not
// followed, so that each answer can be looked at.
func client(t *testing.T) *http.Client {
	t.Helper()
	jar, err := cookiejar.New(nil)
	require.NoError(t, err)
	return &http.Client{Jar: jar, CheckRedirect: func(*http.Request, []*http.Request) error { return http.ErrUseLastResponse }}
}

// do sends a request and returns the status, the body and the answer.
func do(t *testing.T, c *http.Client, method, u string, form url.Values, header map[string]string) (int, string, *http.Response) {
	t.Helper()
	var body io.Reader
	if form != nil {
		body = strings.NewReader(form.Encode())
	}
	req, err := http.NewRequestWithContext(brokertest.Ctx(t), method, u, body)
	require.NoError(t, err)
	if form != nil {
		req.Header.Set("Content-Type", "application/x-www-form-urlencoded")
	}
	for k, v := range header {
		req.Header.Set(k, v)
	}
	resp, err := c.Do(req)
	require.NoError(t, err)
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	require.NoError(t, err)
	return resp.StatusCode, string(b), resp
}

var reCSRF = regexp.MustCompile(`name="csrf" value="([^"]+)"`)

// csrf is the CSRF token of a page's forms.
func csrf(t *testing.T, page string) string {
	t.Helper()
	m := reCSRF.FindStringSubmatch(page)
	require.NotNil(t, m, "no CSRF token in the page")
	return m[1]
}
