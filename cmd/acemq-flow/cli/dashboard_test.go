package cli

import (
	"context"
	"encoding/json"
	"net/http"
	"testing"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/stretchr/testify/require"

	"github.com/acemq/acemq-flow/engine/journal"
	"github.com/acemq/acemq-flow/internal/testenv"
	"github.com/acemq/acemq-flow/persistence"
)

// seedFailedRun records, in the journal of the database at dbURL, a run of
// flow that failed at charge with errText, and returns its id.
func seedFailedRun(t *testing.T, dbURL, flow, errText string) string {
	t.Helper()
	id := testenv.Name(t, "run")
	seedFailedRunID(t, dbURL, id, flow, errText)
	return id
}

// seedFailedRunID is seedFailedRun with the run's id.
func seedFailedRunID(t *testing.T, dbURL, id, flow, errText string) {
	t.Helper()
	ctx, cancel := context.WithTimeout(t.Context(), 10*time.Second)
	defer cancel()
	pool, err := pgxpool.New(ctx, dbURL)
	require.NoError(t, err)
	defer pool.Close()
	j, err := persistence.NewSQLJournal(pool, persistence.SQLJournalConfig{})
	require.NoError(t, err)
	start := time.Now().Add(-time.Minute)
	require.NoError(t, j.Record(ctx, []journal.Event{
		{RunID: id, Flow: flow, Key: "start", Seq: journal.Seq(0, 0, 0, 0), Kind: journal.KindStart, Outcome: "started",
			StartedAt: start, EndedAt: start, Status: journal.Running, Input: json.RawMessage(`{"id":"o-9","amount":3}`)},
		{RunID: id, Flow: flow, Key: "step:charge:1", Seq: journal.Seq(0, 2, 1, 0), Kind: journal.KindStep, Step: "charge",
			Attempt: 1, Outcome: "failed", StartedAt: start.Add(time.Second), EndedAt: start.Add(2 * time.Second), Error: errText,
			Queue: flow + ".charge", Status: journal.Failed, RunStep: "charge", DeadLetter: flow + ".charge.dlq"},
	}))
}

// TestDashboardOnTheDatabase: `acemq-flow dashboard` over a journal in
// PostgreSQL lists a run recorded there and shows its timeline, and with
// a token (from ACEMQ_DASHBOARD_TOKEN) every page wants it.
func TestDashboardOnTheDatabase(t *testing.T) {
	t.Parallel()
	dbURL := testSchema(t)
	r := execute(t, map[string]string{"ACEMQ_DATABASE_URL": dbURL}, "migrate")
	require.Zero(t, r.code, r.stderr)
	flows := unitFlows(testenv.Name(t, "flow"))
	run := seedFailedRun(t, dbURL, flows[1].Name(), "card declined by the <b>bank</b>")

	const token = "s3cret-dashboard-token"
	inv := invocation{flows: flows, env: map[string]string{"ACEMQ_DATABASE_URL": dbURL,
		"ACEMQ_URL": "memory://" + testenv.Name(t, "broker"), "ACEMQ_DASHBOARD_TOKEN": token}}
	d := background(t, inv, "dashboard", "--addr", "127.0.0.1:0")
	base := d.waitFor(`dashboard: open (http://127\.0\.0\.1:\d+)/ in a browser \(Ctrl-C stops it\)`)[1]
	require.Contains(t, d.stderr.String(), "the dashboard asks for its token (--token / ACEMQ_DASHBOARD_TOKEN) on every page")
	require.NotContains(t, d.stderr.String(), token)
	require.NotContains(t, d.stderr.String(), "no database")

	status, body := httpGet(t, base+"/")
	require.Equal(t, http.StatusUnauthorized, status)
	require.Contains(t, body, `name="token"`, "the login form")
	status, _ = httpGet(t, base+"/", "Authorization", "Bearer wrong")
	require.Equal(t, http.StatusUnauthorized, status)

	bearer := []string{"Authorization", "Bearer " + token}
	status, body = httpGet(t, base+"/", bearer...)
	require.Equal(t, http.StatusOK, status, body)
	require.Contains(t, body, `href="/runs/`+run+`"`)
	require.Contains(t, body, flows[1].Name())
	status, body = httpGet(t, base+"/runs/"+run, bearer...)
	require.Equal(t, http.StatusOK, status, body)
	require.Contains(t, body, "card declined by the &lt;b&gt;bank&lt;/b&gt;", "escaped")
	require.Contains(t, body, "/runs/"+run+"/replay", "the binary's flows are registered: the run can be replayed")

	require.Zero(t, d.stop(), d.stderr.String())
}

// TestDashboardWithoutADatabase: without a database the dashboard says
// that it shows nothing and points to dev; without flows it only reads;
// a bad address fails before anything connects.
func TestDashboardWithoutADatabase(t *testing.T) {
	t.Parallel()
	inv := invocation{flows: unitFlows("unit"), env: map[string]string{"ACEMQ_URL": "memory://" + testenv.Name(t, "broker")}}
	d := background(t, inv, "dashboard", "--addr", "127.0.0.1:0")
	base := d.waitFor(`dashboard: open (http://\S+)/ in a browser`)[1]
	require.Contains(t, d.stderr.String(), noDatabaseDashboard(testName))
	require.Contains(t, noDatabaseDashboard(testName), "`acemq-flow dev`")
	status, body := httpGet(t, base+"/")
	require.Equal(t, http.StatusOK, status, "no token: no login")
	require.Contains(t, body, "unit.orders", "the flows are offered as a filter")
	require.Zero(t, d.stop(), d.stderr.String())

	d = background(t, invocation{}, "dashboard", "--addr", "127.0.0.1:0")
	base = d.waitFor(`dashboard: open (http://\S+)/ in a browser`)[1]
	require.Contains(t, d.stderr.String(), noFlowsDashboard)
	require.Contains(t, d.stderr.String(), noDatabaseReader)
	require.NotContains(t, d.stderr.String(), "no broker", "reading needs no broker")
	status, _ = httpGet(t, base+"/failed")
	require.Equal(t, http.StatusOK, status)
	require.Zero(t, d.stop(), d.stderr.String())

	r := executeWith(t, inv, "dashboard", "--addr", "256.0.0.1:1")
	require.Equal(t, 1, r.code)
	require.Contains(t, r.stderr, "acemq-flow: --addr 256.0.0.1:1: listen tcp")
	require.NotContains(t, r.stderr, "no database", "refused before anything else")

	r = execute(t, nil, "dashboard", "--help")
	require.Zero(t, r.code)
	require.Contains(t, r.stdout, "[$ACEMQ_DASHBOARD_TOKEN]")
	require.NotContains(t, r.stdout, "$ACEMQ_TOKEN")
	require.Contains(t, r.stdout, `(default "127.0.0.1:8080")`)
}
