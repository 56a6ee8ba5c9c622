package cli

import (
	"bytes"
	"context"
	"io"
	"net"
	"net/http"
	"os/exec"
	"regexp"
	"strings"
	"testing"
	"time"

	dto "github.com/prometheus/client_model/go"
	"github.com/prometheus/common/expfmt"
	"github.com/prometheus/common/model"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/acemq/acemq-flow/broker"
	"github.com/acemq/acemq-flow/broker/loopback"
	"github.com/acemq/acemq-flow/engine"
	"github.com/acemq/acemq-flow/internal/testenv"
)

// running is a long-running command (worker, dashboard, dev) run in this
// process until the test stops it.
type running struct {
	t      *testing.T
	stderr *syncBuffer
	cancel context.CancelFunc
	done   chan struct{}
	code   int
}

// background starts the command line with args and inv; it is stopped,
// as SIGTERM would, when the test ends if not before.
func background(t *testing.T, inv invocation, args ...string) *running {
	t.Helper()
	ctx, cancel := context.WithCancel(context.Background())
	r := &running{t: t, stderr: &syncBuffer{}, cancel: cancel, done: make(chan struct{})}
	go func() {
		defer close(r.done)
		r.code = run(ctx, testName, inv.lookup, inv.flows, args, streams{in: strings.NewReader(""), out: &bytes.Buffer{}, err: r.stderr})
	}()
	t.Cleanup(func() { r.stop() })
	return r
}

// waitFor waits until stderr matches pattern and returns the match and
// its groups; it fails if the command exits first.
func (r *running) waitFor(pattern string) []string {
	r.t.Helper()
	re := regexp.MustCompile(pattern)
	var m []string
	require.Eventually(r.t, func() bool {
		select {
		case <-r.done:
			return true
		default:
		}
		m = re.FindStringSubmatch(r.stderr.String())
		return m != nil
	}, 20*time.Second, 10*time.Millisecond)
	require.NotNil(r.t, m, "the command exited (%d) before saying %q:\n%s", r.code, pattern, r.stderr.String())
	return m
}

// stop cancels the command's context and waits for it to exit.
func (r *running) stop() int {
	r.t.Helper()
	r.cancel()
	select {
	case <-r.done:
	case <-time.After(broker.DefaultCloseTimeout + 10*time.Second):
		r.t.Fatalf("the command did not stop:\n%s", r.stderr.String())
	}
	return r.code
}

// httpGet sends a GET with the given headers and returns the status and
// body. Its connection is not kept: no goroutine outlives the test.
func httpGet(t *testing.T, url string, header ...string) (int, string) {
	t.Helper()
	ctx, cancel := context.WithTimeout(t.Context(), 10*time.Second)
	defer cancel()
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, url, nil)
	require.NoError(t, err)
	for i := 0; i+1 < len(header); i += 2 {
		req.Header.Set(header[i], header[i+1])
	}
	c := &http.Client{Transport: &http.Transport{DisableKeepAlives: true},
		CheckRedirect: func(*http.Request, []*http.Request) error { return http.ErrUseLastResponse }}
	resp, err := c.Do(req)
	require.NoError(t, err)
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	require.NoError(t, err)
	return resp.StatusCode, string(b)
}

// families parses a /metrics answer.
func families(t require.TestingT, body string) map[string]*dto.MetricFamily {
	p := expfmt.NewTextParser(model.UTF8Validation)
	fams, err := p.TextToMetricFamilies(strings.NewReader(body))
	require.NoError(t, err, body)
	return fams
}

// sampleOf is the one metric of a family whose labels include want.
func sampleOf(t require.TestingT, fams map[string]*dto.MetricFamily, name string, want map[string]string) *dto.Metric {
	var found []*dto.Metric
	for _, m := range fams[name].GetMetric() {
		l := labels(m)
		match := true
		for k, v := range want {
			match = match && l[k] == v
		}
		if match {
			found = append(found, m)
		}
	}
	require.Len(t, found, 1, "%s with %v among %v", name, want, fams[name])
	return found[0]
}

// TestWorkerServesMetricsAndHealth: `worker --metrics-addr` serves the
// engine's and the connection's instruments after runs of a flow (so
// both record to the endpoint's MeterProvider), /healthz, and a /readyz
// that holds while the worker runs and fails once the broker is gone.
func TestWorkerServesMetricsAndHealth(t *testing.T) {
	t.Parallel()
	name := testenv.Name(t, "broker")
	flows := unitFlows(testenv.Name(t, "flow"))
	ok, doomed := flows[0].Name(), flows[1].Name()
	inv := invocation{flows: flows, env: map[string]string{"ACEMQ_URL": "memory://" + name}}
	w := background(t, inv, "worker", "--metrics-addr", "127.0.0.1:0")
	base := w.waitFor(`msg="serving metrics" .*metrics=(http://\S+)/metrics healthz=\S+/healthz readyz=\S+/readyz`)[1]
	w.waitFor(`msg="worker started"`)
	require.NotContains(t, w.stderr.String(), "other machines", "127.0.0.1 is this machine only")

	status, body := httpGet(t, base+"/readyz")
	require.Equal(t, http.StatusOK, status, body)
	require.Equal(t, "broker: ok\nworker: ok\nready\n", body, "no database, no database check")

	for _, flow := range []string{ok, doomed} {
		r := executeWith(t, inv, "start", flow, "--payload", `{"id":"o-1","amount":3}`)
		require.Zero(t, r.code, r.stderr)
	}
	var fams map[string]*dto.MetricFamily
	require.EventuallyWithT(t, func(c *assert.CollectT) {
		status, body := httpGet(t, base+"/metrics")
		require.Equal(c, http.StatusOK, status)
		fams = families(c, body)
		sampleOf(c, fams, metricRuns, map[string]string{"pipeline": ok, "outcome": "completed"})
		sampleOf(c, fams, metricRuns, map[string]string{"pipeline": doomed, "outcome": "failed"})
		require.Equal(c, 1.0, sampleOf(c, fams, metricQueueDepth, map[string]string{"queue": doomed + ".charge.dlq"}).GetGauge().GetValue())
		// A delivery is counted once it is settled, which may be after the
		// steps it passed the run on to.
		sampleOf(c, fams, "messaging_client_consumed_messages_total", map[string]string{"messaging_destination_name": ok + ".validate"})
	}, 15*time.Second, 50*time.Millisecond)

	require.Equal(t, 1.0, sampleOf(t, fams, metricRuns, map[string]string{"pipeline": ok, "step": "ship", "outcome": "completed"}).GetCounter().GetValue())
	require.Equal(t, 1.0, sampleOf(t, fams, metricRuns, map[string]string{"pipeline": doomed, "step": "charge", "outcome": "failed"}).GetCounter().GetValue())
	step := sampleOf(t, fams, metricStepDuration, map[string]string{"flow": ok, "step": "charge", "outcome": "completed"})
	require.Equal(t, uint64(1), step.GetHistogram().GetSampleCount())
	var bounds []float64
	for _, b := range step.GetHistogram().GetBucket() {
		bounds = append(bounds, b.GetUpperBound())
	}
	require.Equal(t, engine.DurationBuckets(), bounds[:len(bounds)-1], "from 100 µs")
	// Runs started by another process (`acemq-flow start`) are counted by
	// the worker that took them up.
	for _, flow := range []string{ok, doomed} {
		require.Equal(t, 1.0, sampleOf(t, fams, "acemq_flow_runs_started_total", map[string]string{"flow": flow}).GetCounter().GetValue(), flow)
	}
	require.Equal(t, 0.0, sampleOf(t, fams, metricStepsActive, map[string]string{"flow": ok, "step": "ship"}).GetGauge().GetValue())
	require.Equal(t, "dead_letter", labels(sampleOf(t, fams, metricQueueDepth, map[string]string{"queue": doomed + ".charge.dlq"}))["role"])
	// The connection's instruments: the same MeterProvider.
	require.Equal(t, 1.0, sampleOf(t, fams, "acemq_consume_total", map[string]string{"queue": ok + ".ship", "outcome": "accepted"}).GetCounter().GetValue())
	sampleOf(t, fams, "acemq_schedule_delivered_total", map[string]string{"ladder": broker.DefaultLadder})

	// top reads the same endpoint.
	snap, err := scrape(t.Context(), &http.Client{Transport: &http.Transport{DisableKeepAlives: true}}, base+"/metrics")
	require.NoError(t, err)
	require.Equal(t, 1.0, snap.done[stepKey{flow: ok}])
	require.Equal(t, 1.0, snap.dlq[doomed+".charge.dlq"].depth)

	// The broker goes away under the worker.
	loopback.Named(name).Close()
	status, body = httpGet(t, base+"/readyz")
	require.Equal(t, http.StatusServiceUnavailable, status, body)
	require.Regexp(t, `(?m)^broker: .*closed`, body)
	require.Contains(t, body, "not ready\n")
	status, body = httpGet(t, base+"/healthz")
	require.Equal(t, http.StatusOK, status)
	require.Equal(t, "ok\n", body)

	w.stop()
	_, err = net.DialTimeout("tcp", strings.TrimPrefix(base, "http://"), time.Second)
	require.Error(t, err, "the endpoint stops with the worker")
}

// TestWorkerReadinessOnRabbitMQ: a worker's /readyz is 200 while it runs
// on RabbitMQ, and 503, naming the broker, once the broker closed its
// connection and refuses it back (the worker's virtual host no longer
// lets it in).
func TestWorkerReadinessOnRabbitMQ(t *testing.T) {
	t.Parallel()
	url := testenv.VHost(t)
	vhost := url[strings.LastIndex(url, "/")+1:]
	inv := invocation{flows: unitFlows(testenv.Name(t, "flow")), env: map[string]string{"ACEMQ_URL": url}}
	w := background(t, inv, "worker", "--metrics-addr", "127.0.0.1:0")
	base := w.waitFor(`msg="serving metrics" .*metrics=(http://\S+)/metrics`)[1]
	w.waitFor(`msg="worker started"`)
	status, body := httpGet(t, base+"/readyz")
	require.Equal(t, http.StatusOK, status, body)

	rabbitmqctl(t, "clear_permissions", "-p", vhost, "guest")
	t.Cleanup(func() { rabbitmqctl(t, "set_permissions", "-p", vhost, "guest", ".*", ".*", ".*") })
	rabbitmqctl(t, "close_all_connections", "-p", vhost, "test: the broker goes away")
	require.EventuallyWithT(t, func(c *assert.CollectT) {
		status, body := httpGet(t, base+"/readyz")
		require.Equal(c, http.StatusServiceUnavailable, status, body)
		require.Regexp(c, `(?m)^broker: `, body)
	}, 30*time.Second, 100*time.Millisecond)
	w.stop()
}

// rabbitmqctl runs rabbitmqctl quietly, failing the test if it fails.
func rabbitmqctl(t *testing.T, args ...string) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	out, err := exec.CommandContext(ctx, "rabbitmqctl", append([]string{"-q"}, args...)...).CombinedOutput()
	require.NoError(t, err, "rabbitmqctl %v: %s", args, out)
}

func TestWorkerRefusesABadMetricsAddress(t *testing.T) {
	t.Parallel()
	r := executeWith(t, invocation{flows: unitFlows("unit")}, "worker", "--metrics-addr", "256.0.0.1:1")
	require.Equal(t, 1, r.code)
	require.Contains(t, r.stderr, "acemq-flow: --metrics-addr 256.0.0.1:1: listen tcp")
	require.NotContains(t, r.stderr, "no broker", "refused before connecting to anything")
}

func TestListenerAddresses(t *testing.T) {
	t.Parallel()
	for addr, want := range map[string]bool{"127.0.0.1:9464": true, "[::1]:9464": true, "0.0.0.0:9464": false, "10.1.2.3:80": false} {
		a, err := net.ResolveTCPAddr("tcp", addr)
		require.NoError(t, err)
		require.Equal(t, want, isLoopback(a), addr)
	}
	for addr, want := range map[string]string{
		"127.0.0.1:8080": "http://127.0.0.1:8080/", "0.0.0.0:8080": "http://localhost:8080/",
		"[::]:8080": "http://localhost:8080/", "[::1]:8080": "http://[::1]:8080/", "10.1.2.3:80": "http://10.1.2.3:80/",
	} {
		a, err := net.ResolveTCPAddr("tcp", addr)
		require.NoError(t, err)
		require.Equal(t, want, browseURL(a), addr)
	}
}
