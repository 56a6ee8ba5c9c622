package cli

import (
	"net/http"
	"regexp"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/acemq/acemq-flow/dsl"
	"github.com/acemq/acemq-flow/workflows"
)

// TestDev runs `acemq-flow dev` with the shipped flows: it says where the
// dashboard and the metrics are and what it started, the dashboard lists
// the example runs as they end (completed, and failed for the declined
// card and the refused address), a failed run's page shows its error with
// the buttons to act on it, and the worker's metrics are served.
func TestDev(t *testing.T) {
	t.Parallel()
	d := background(t, invocation{flows: workflows.Flows()}, "dev", "--addr", "127.0.0.1:0", "--metrics-addr", "127.0.0.1:0")
	base := d.waitFor(`(?m)^  dashboard  (http://127\.0\.0\.1:\d+)/$`)[1]
	metrics := d.waitFor(`(?m)^  metrics    (http://127\.0\.0\.1:\d+)/metrics   \(watch it live: acemq-flow top --from http://127\.0\.0\.1:\d+\)$`)[1]
	stderr := d.stderr.String()
	for _, want := range []string{
		"acemq-flow dev: the embedded broker, a run journal in memory, a worker for place-order, approve-refund\nand the dashboard, all in this process",
		"started 8 example runs for the dashboard to show",
		"approve-refund  ",
		"it does not start runs",
		"other acemq-flow commands (start, runs, replay) cannot reach them",
		"Ctrl-C stops it",
	} {
		require.Contains(t, stderr, want)
	}
	require.NotContains(t, stderr, "level=", "nothing logged at warn or above")
	started := regexp.MustCompile(`(?m)^  place-order\s+([0-9a-f]{8})\s+(.+)$`).FindAllStringSubmatch(stderr, -1)
	require.Len(t, started, 7, stderr)
	prefix := map[string]string{}
	for _, s := range started {
		prefix[s[2]] = s[1]
	}
	refused := prefix["the courier refuses the address: failed at reserve, held for a replay (which fails again), then refunded; or compensate it now"]
	require.NotEmpty(t, refused)

	links := regexp.MustCompile(`href="/runs/([0-9a-f-]{36})"`)
	var failed []string
	require.EventuallyWithT(t, func(c *assert.CollectT) {
		status, body := httpGet(t, base+"/?status=failed")
		require.Equal(c, http.StatusOK, status)
		failed = nil
		for _, m := range links.FindAllStringSubmatch(body, -1) {
			failed = append(failed, m[1])
		}
		// The declined card and the refused address fail at once; the
		// closed depot after its ship retries, about ten seconds in.
		require.GreaterOrEqual(c, len(failed), 2, "the declined card and the refused address")
	}, 15*time.Second, 50*time.Millisecond)
	status, body := httpGet(t, base+"/")
	require.Equal(t, http.StatusOK, status)
	require.Len(t, links.FindAllString(body, -1), 8, "every example run is listed: seven orders and a refund")
	refund := regexp.MustCompile(`(?m)^  approve-refund\s+([0-9a-f]{8})\s+waits for its approval`).FindStringSubmatch(stderr)
	require.NotNil(t, refund, stderr)

	var run string
	for _, id := range failed {
		if strings.HasPrefix(id, refused) {
			run = id
		}
	}
	require.NotEmpty(t, run, "failed runs %v, refused address %s", failed, refused)
	status, body = httpGet(t, base+"/runs/"+run)
	require.Equal(t, http.StatusOK, status)
	require.Contains(t, body, "courier: no deliveries to")
	require.Contains(t, body, "/runs/"+run+"/compensate")

	status, body = httpGet(t, metrics+"/metrics")
	require.Equal(t, http.StatusOK, status)
	require.Contains(t, body, `acemq_pipeline_run_total{`)
	require.Contains(t, body, `pipeline="place-order"`)
	status, _ = httpGet(t, metrics+"/readyz")
	require.Equal(t, http.StatusOK, status)

	require.Zero(t, d.stop(), d.stderr.String())
}

func TestDevNeedsFlows(t *testing.T) {
	t.Parallel()
	r := execute(t, map[string]string{"ACEMQ_DATABASE_URL": "postgres://nowhere/x"}, "dev")
	require.Equal(t, 1, r.code)
	require.Contains(t, r.stderr, "dev: this binary has no flows")
}

func TestDevExamples(t *testing.T) {
	t.Parallel()
	other := dsl.Flow("other", dsl.Step("a", keep), dsl.Example(unitOrder{ID: "x", Amount: 1}))
	none := dsl.Flow("none", dsl.Step("a", keep))
	ex := devExamples([]*dsl.FlowDef{workflows.PlaceOrder, other, none})
	require.Len(t, ex, 8, "seven orders, the other flow's example, none for a flow without one")
	require.Equal(t, example{flow: "other", payload: unitOrder{ID: "x", Amount: 1}, shows: "its example payload"}, ex[7])
	ids := map[string]bool{}
	for _, e := range ex[:6] {
		o := e.payload.(workflows.Order)
		require.False(t, ids[o.ID], "each order has an id of its own")
		ids[o.ID] = true
	}
}
