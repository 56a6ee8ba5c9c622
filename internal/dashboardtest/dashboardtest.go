// Package dashboardtest is the dashboard's test fixture: a flow of the
// test's own worked on the loopback, a dashboard beside it on the same
// journal, and an HTTP client that behaves like a browser. The dashboard's
// own tests and its browser tests (a module of their own, for chromedp)
// share it.
package dashboardtest

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

// Order is the payload of the test flow: a run whose Fail is set fails
// for good at charge with that text, the first time only, so that a
// replay completes it.
type Order struct {
	ID   string `json:"id"`
	Fail string `json:"fail,omitempty"`
}

// Fixture is a flow of the test's own worked by a worker engine on the
// loopback, and a dashboard on the same journal whose engine has no
// worker: as `acemq-flow dashboard` runs beside the workers.
type Fixture struct {
	T       *testing.T
	H       *brokertest.Harness
	Journal *journal.Memory
	// Worker works the flow.
	Worker *engine.Engine
	// Eng is the dashboard's engine: the flow registered, no worker; its
	// connection's metrics go to Metrics.
	Eng     *engine.Engine
	Metrics *sdkmetric.ManualReader
	Flow    string
	// WaitFlow is a flow whose runs wait for the signal "approval" (an
	// Approval) after a compensable first step.
	WaitFlow string
	Dash     *dashboard.Dashboard
	Srv      *httptest.Server

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

// New is a fixture with a dashboard of cfg (on the fixture's journal
// and engine unless cfg names its own); lookup, when positive, is how long
// each run lookup of the dashboard's engine takes.
func New(t *testing.T, cfg dashboard.Config, lookup ...time.Duration) *Fixture {
	t.Helper()
	fx := &Fixture{T: t, Flow: testenv.Name(t, "flow"), charged: map[string]int{}}
	fx.H = brokertest.New(t, "memory://"+testenv.Name(t, "broker"), false)
	j, err := journal.NewMemory(0)
	require.NoError(t, err)
	fx.Journal = j
	def := dsl.Flow(fx.Flow,
		dsl.Step("validate", func(_ context.Context, o Order) (Order, error) { return o, nil }).
			Compensate(func(context.Context, Order) error { return nil }),
		dsl.Step("charge", fx.charge),
		// A failed run waits for a replay rather than compensating at once.
		dsl.HoldForReplay(time.Hour),
	)
	fx.WaitFlow = fx.Flow + "-wait"
	wait := dsl.Flow(fx.WaitFlow,
		dsl.Step("hold", func(_ context.Context, o Order) (Order, error) { return o, nil }).
			Compensate(func(context.Context, Order) error { return nil }),
		dsl.WaitFor[Order, Approval]("approval", time.Hour),
		dsl.Step("done", func(_ context.Context, s dsl.Signalled[Order, Approval]) (Order, error) { return s.Input, nil }))
	fx.Worker = fx.EngineOn(def, broker.Config{}, fx.Journal, wait)
	w, err := fx.Worker.StartWorker(brokertest.Ctx(t))
	require.NoError(t, err)
	t.Cleanup(func() { require.NoError(t, w.Close(context.Background())) })
	fx.Metrics = sdkmetric.NewManualReader()
	var ej journal.Journal = j
	if len(lookup) > 0 {
		ej = slowLookups{Journal: j, delay: lookup[0]}
	}
	fx.Eng = fx.EngineOn(def, broker.Config{MeterProvider: sdkmetric.NewMeterProvider(sdkmetric.WithReader(fx.Metrics))}, ej, wait)
	if cfg.Journal == nil && cfg.Engine == nil {
		cfg.Journal, cfg.Engine = j, fx.Eng
	}
	cfg.Logger = testenv.Logger(t)
	fx.Dash, err = dashboard.New(cfg)
	require.NoError(t, err)
	// Closed before the engines (cleanups run last first).
	t.Cleanup(func() { require.NoError(t, fx.Dash.Close(context.Background())) })
	fx.Srv = httptest.NewServer(fx.Dash)
	t.Cleanup(fx.Srv.Close)
	return fx
}

// Engine is an engine on a connection of its own (bc) to the test's
// broker, recording in the shared journal, with def registered.
func (fx *Fixture) Engine(def *dsl.FlowDef, bc broker.Config) *engine.Engine {
	return fx.EngineOn(def, bc, fx.Journal)
}

// EngineOn is Engine recording in j, with more flows registered.
func (fx *Fixture) EngineOn(def *dsl.FlowDef, bc broker.Config, j journal.Journal, more ...*dsl.FlowDef) *engine.Engine {
	conn := fx.H.Open(bc)
	eng, err := engine.New(engine.Config{Conn: conn, Journal: j})
	require.NoError(fx.T, err)
	fx.T.Cleanup(func() { require.NoError(fx.T, eng.Close(context.Background())) })
	require.NoError(fx.T, eng.Register(append([]*dsl.FlowDef{def}, more...)...))
	return eng
}

// Approval is the signal the fixture's WaitFlow waits for.
type Approval struct {
	By string `json:"by"`
}

// StartWaiting starts a run of WaitFlow and waits until it waits for its
// signal.
func (fx *Fixture) StartWaiting(o Order) string {
	fx.T.Helper()
	res, err := fx.Worker.Start(brokertest.Ctx(fx.T), fx.WaitFlow, o)
	require.NoError(fx.T, err)
	fx.Wait(res.RunID, journal.Waiting)
	return res.RunID
}

func (fx *Fixture) charge(ctx context.Context, o Order) (Order, error) {
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

// Start starts a run and waits until the journal shows it in want.
func (fx *Fixture) Start(o Order, want journal.Status) string {
	fx.T.Helper()
	return fx.StartAll([]Order{o}, want)[0]
}

// startAll starts a run for each Order, then waits until the journal
// shows each in want.
func (fx *Fixture) StartAll(orders []Order, want journal.Status) []string {
	fx.T.Helper()
	var ids []string
	for _, o := range orders {
		res, err := fx.Worker.Start(brokertest.Ctx(fx.T), fx.Flow, o)
		require.NoError(fx.T, err)
		ids = append(ids, res.RunID)
	}
	for _, id := range ids {
		fx.Wait(id, want)
	}
	return ids
}

// Published is how many messages the dashboard's engine published through
// the default exchange and the broker confirmed: replayed copies, and the
// messages a pass over a queue puts back in it.
func (fx *Fixture) Published() int64 {
	fx.T.Helper()
	var rm metricdata.ResourceMetrics
	require.NoError(fx.T, fx.Metrics.Collect(context.Background(), &rm))
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

// Replays is how many replays the run's timeline shows.
func (fx *Fixture) Replays(runID string) int {
	fx.T.Helper()
	tl, err := fx.Journal.Timeline(context.Background(), runID)
	require.NoError(fx.T, err)
	n := 0
	for _, e := range tl {
		if e.Kind == journal.KindReplay {
			n++
		}
	}
	return n
}

// Charges is how many times charge ran for the run.
func (fx *Fixture) Charges(runID string) int {
	fx.mu.Lock()
	defer fx.mu.Unlock()
	return fx.charged[runID]
}

// Wait waits until the journal shows the run in want, and returns it.
func (fx *Fixture) Wait(runID string, want journal.Status) journal.Run {
	fx.T.Helper()
	var r journal.Run
	require.Eventually(fx.T, func() bool {
		var err error
		r, err = fx.Journal.Run(context.Background(), runID)
		return err == nil && r.Status == want
	}, 15*time.Second, 10*time.Millisecond, "run %s never became %s", runID, want)
	return r
}

// Client is a browser-like HTTP client: cookies kept, redirects not
// followed, so that each answer can be looked at.
func Client(t *testing.T) *http.Client {
	t.Helper()
	jar, err := cookiejar.New(nil)
	require.NoError(t, err)
	return &http.Client{Jar: jar, CheckRedirect: func(*http.Request, []*http.Request) error { return http.ErrUseLastResponse }}
}

// Do sends a request and returns the status, the body and the answer.
func Do(t *testing.T, c *http.Client, method, u string, form url.Values, header map[string]string) (int, string, *http.Response) {
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

// CSRF is the CSRF token of a page's forms.
func CSRF(t *testing.T, page string) string {
	t.Helper()
	m := reCSRF.FindStringSubmatch(page)
	require.NotNil(t, m, "no CSRF token in the page")
	return m[1]
}
