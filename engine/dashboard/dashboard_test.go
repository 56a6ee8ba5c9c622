package dashboard_test

import (
	"context"
	"fmt"
	"net/http"
	"net/http/httptest"
	"net/url"
	"regexp"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/acemq/acemq-flow/broker"
	"github.com/acemq/acemq-flow/engine/dashboard"
	"github.com/acemq/acemq-flow/engine/journal"
	"github.com/acemq/acemq-flow/internal/brokertest"
	"github.com/acemq/acemq-flow/internal/dashboardtest"
	"github.com/acemq/acemq-flow/internal/testenv"
)

// TestNewRefusesAConfigWithoutJournal: neither a journal nor an engine.
func TestNewRefusesAConfigWithoutJournal(t *testing.T) {
	t.Parallel()
	_, err := dashboard.New(dashboard.Config{})
	require.ErrorIs(t, err, dashboard.ErrInvalidConfig)
	j, err := journal.NewMemory(0)
	require.NoError(t, err)
	_, err = dashboard.New(dashboard.Config{Journal: j, PageSize: -1})
	require.ErrorIs(t, err, dashboard.ErrInvalidConfig)
}

// TestTokenProtectsEveryPage: with a token, every page is 401 with the
// login form until the token comes as a bearer header, through ?token=
// (which sets the session cookie and drops the token from the address),
// or through the login form; assets stay public.
func TestTokenProtectsEveryPage(t *testing.T) {
	t.Parallel()
	const token = "s3cret-token"
	j, err := journal.NewMemory(0)
	require.NoError(t, err)
	h, err := dashboard.New(dashboard.Config{Journal: j, Token: token, Logger: testenv.Logger(t)})
	require.NoError(t, err)
	srv := httptest.NewServer(h)
	t.Cleanup(srv.Close)

	c := dashboardtest.Client(t)
	for _, p := range []string{"/", "/runs/x", "/failed", "/charts", "/nowhere"} {
		status, body, resp := dashboardtest.Do(t, c, http.MethodGet, srv.URL+p, nil, nil)
		require.Equal(t, http.StatusUnauthorized, status, p)
		require.Contains(t, body, `name="token"`, "a browser gets the login form")
		require.Equal(t, `Bearer realm="acemq-flow dashboard"`, resp.Header.Get("WWW-Authenticate"))
	}
	status, _, _ := dashboardtest.Do(t, c, http.MethodPost, srv.URL+"/runs/x/replay", url.Values{}, nil)
	require.Equal(t, http.StatusUnauthorized, status)
	status, _, _ = dashboardtest.Do(t, c, http.MethodGet, srv.URL+"/", nil, map[string]string{"Authorization": "Bearer wrong"})
	require.Equal(t, http.StatusUnauthorized, status)
	status, _, _ = dashboardtest.Do(t, c, http.MethodGet, srv.URL+"/?token=wrong", nil, nil)
	require.Equal(t, http.StatusUnauthorized, status)
	status, _, _ = dashboardtest.Do(t, c, http.MethodGet, srv.URL+"/static/app.js", nil, nil)
	require.Equal(t, http.StatusOK, status, "assets are not pages")

	status, body, _ := dashboardtest.Do(t, c, http.MethodGet, srv.URL+"/failed", nil, map[string]string{"Authorization": "Bearer " + token})
	require.Equal(t, http.StatusOK, status)
	require.Contains(t, body, "No failed runs.")

	status, _, resp := dashboardtest.Do(t, c, http.MethodGet, srv.URL+"/failed?token="+token+"&x=1", nil, nil)
	require.Equal(t, http.StatusSeeOther, status)
	require.Equal(t, "/failed?x=1", resp.Header.Get("Location"), "the token leaves the address")
	var session *http.Cookie
	for _, ck := range resp.Cookies() {
		if ck.Name == "acemq_dashboard_session" {
			session = ck
		}
	}
	require.NotNil(t, session)
	require.True(t, session.HttpOnly)
	require.NotContains(t, session.Value, token, "the cookie is not the token")
	status, _, _ = dashboardtest.Do(t, c, http.MethodGet, srv.URL+"/failed", nil, nil)
	require.Equal(t, http.StatusOK, status, "the cookie is enough from then on")

	status, page, _ := dashboardtest.Do(t, c, http.MethodGet, srv.URL+"/charts", nil, nil)
	require.Equal(t, http.StatusOK, status)
	status, _, _ = dashboardtest.Do(t, c, http.MethodPost, srv.URL+"/logout", url.Values{}, nil)
	require.Equal(t, http.StatusForbidden, status, "signing out takes the page's CSRF token")
	status, _, _ = dashboardtest.Do(t, c, http.MethodPost, srv.URL+"/logout", url.Values{"csrf": {dashboardtest.CSRF(t, page)}}, nil)
	require.Equal(t, http.StatusSeeOther, status)
	status, _, _ = dashboardtest.Do(t, c, http.MethodGet, srv.URL+"/failed", nil, nil)
	require.Equal(t, http.StatusUnauthorized, status, "logged out")

	status, _, resp = dashboardtest.Do(t, c, http.MethodPost, srv.URL+"/login", url.Values{"token": {token}, "next": {"//evil.example/"}}, nil)
	require.Equal(t, http.StatusSeeOther, status)
	require.Equal(t, "/", resp.Header.Get("Location"), "login never sends a browser off the site")
	status, _, _ = dashboardtest.Do(t, c, http.MethodGet, srv.URL+"/charts", nil, nil)
	require.Equal(t, http.StatusOK, status)
}

// TestActionsNeedACSRFToken: a POST without the token of the page's form,
// with another one, or from another site is refused; a bearer client
// needs none.
func TestActionsNeedACSRFToken(t *testing.T) {
	t.Parallel()
	fx := dashboardtest.New(t, dashboard.Config{})
	run := fx.Start(dashboardtest.Order{ID: "o-1", Fail: "declined"}, journal.Failed)
	c := dashboardtest.Client(t)
	_, page, _ := dashboardtest.Do(t, c, http.MethodGet, fx.Srv.URL+"/runs/"+run, nil, nil)
	token := dashboardtest.CSRF(t, page)
	replay := fx.Srv.URL + "/runs/" + run + "/replay"

	status, body, _ := dashboardtest.Do(t, c, http.MethodPost, replay, url.Values{}, nil)
	require.Equal(t, http.StatusForbidden, status)
	require.Contains(t, body, "The form was stale")
	status, _, _ = dashboardtest.Do(t, c, http.MethodPost, replay, url.Values{"csrf": {token + "x"}}, nil)
	require.Equal(t, http.StatusForbidden, status)
	status, _, _ = dashboardtest.Do(t, dashboardtest.Client(t), http.MethodPost, replay, url.Values{"csrf": {token}, "confirm": {"1"}}, nil)
	require.Equal(t, http.StatusForbidden, status, "a token without its cookie")
	status, _, _ = dashboardtest.Do(t, c, http.MethodPost, replay, url.Values{"csrf": {token}}, map[string]string{"Sec-Fetch-Site": "cross-site"})
	require.Equal(t, http.StatusForbidden, status)
	status, _, _ = dashboardtest.Do(t, c, http.MethodGet, replay, nil, nil)
	require.Equal(t, http.StatusNotFound, status, "replay is a POST")
	fx.Wait(run, journal.Failed)

	status, _, resp := dashboardtest.Do(t, c, http.MethodPost, replay, url.Values{"csrf": {token}, "confirm": {"1"}}, nil)
	require.Equal(t, http.StatusSeeOther, status)
	require.Equal(t, "/runs/"+run+"?done=replayed", resp.Header.Get("Location"))
	fx.Wait(run, journal.Completed)

	status, body, _ = dashboardtest.Do(t, c, http.MethodPost, replay, url.Values{"csrf": {token}, "confirm": {"1"}}, nil)
	require.Equal(t, http.StatusConflict, status, "a completed run is not replayed")
	require.Contains(t, body, "cannot be replayed")
}

// TestBearerClientsNeedNoCSRF: a script with the token in its
// Authorization header replays without a form.
func TestBearerClientsNeedNoCSRF(t *testing.T) {
	t.Parallel()
	fx := dashboardtest.New(t, dashboard.Config{Token: "t0k"})
	run := fx.Start(dashboardtest.Order{ID: "o-1", Fail: "declined"}, journal.Failed)
	status, _, _ := dashboardtest.Do(t, http.DefaultClient, http.MethodPost, fx.Srv.URL+"/runs/"+run+"/replay", url.Values{"confirm": {"1"}},
		map[string]string{"Authorization": "Bearer t0k"})
	require.Equal(t, http.StatusOK, status, "followed to the run's page")
	fx.Wait(run, journal.Completed)
}

// TestHostsWithoutToken: without a token, only IP addresses, localhost
// and the configured names are answered (DNS rebinding).
func TestHostsWithoutToken(t *testing.T) {
	t.Parallel()
	j, err := journal.NewMemory(0)
	require.NoError(t, err)
	h, err := dashboard.New(dashboard.Config{Journal: j, Hosts: []string{"flows.internal"}})
	require.NoError(t, err)
	for host, want := range map[string]int{
		"127.0.0.1:8080": http.StatusOK, "[::1]:8080": http.StatusOK, "localhost:8080": http.StatusOK,
		"flows.internal": http.StatusOK, "attacker.example:8080": http.StatusForbidden,
	} {
		req := httptest.NewRequest(http.MethodGet, "/", nil)
		req.Host = host
		w := httptest.NewRecorder()
		h.ServeHTTP(w, req)
		require.Equal(t, want, w.Code, host)
		require.Contains(t, w.Header().Get("Content-Security-Policy"), "script-src 'self'")
	}
}

// TestRunsListFiltersAndPages: the list filters by flow, status, time
// window and error text, and pages by start time.
func TestRunsListFiltersAndPages(t *testing.T) {
	t.Parallel()
	j, err := journal.NewMemory(0)
	require.NoError(t, err)
	now := time.Date(2026, 5, 1, 12, 0, 0, 0, time.UTC)
	for i, r := range []struct {
		flow   string
		status journal.Status
		ago    time.Duration
		err    string
	}{
		{"orders", journal.Completed, time.Minute, ""},
		{"orders", journal.Failed, 2 * time.Minute, "card declined"},
		{"refunds", journal.Failed, 3 * time.Minute, "timeout talking to the bank"},
		{"orders", journal.Running, 4 * time.Minute, ""},
		{"orders", journal.Failed, 3 * time.Hour, "card declined again"},
	} {
		at := now.Add(-r.ago)
		require.NoError(t, j.Record(context.Background(), []journal.Event{{
			RunID: fmt.Sprintf("run-%d", i), Flow: r.flow, Key: "start", Kind: journal.KindStart, StartedAt: at, EndedAt: at,
			Status: r.status, RunStep: "charge", Error: r.err, Seq: 1,
		}}))
	}
	h, err := dashboard.New(dashboard.Config{Journal: j, PageSize: 2, Now: func() time.Time { return now }})
	require.NoError(t, err)
	srv := httptest.NewServer(h)
	t.Cleanup(srv.Close)
	rows := regexp.MustCompile(`data-run="([^"]+)"`)
	list := func(query string) ([]string, string) {
		t.Helper()
		status, body, _ := dashboardtest.Do(t, dashboardtest.Client(t), http.MethodGet, srv.URL+"/?"+query, nil, nil)
		require.Equal(t, http.StatusOK, status, body)
		var ids []string
		for _, m := range rows.FindAllStringSubmatch(body, -1) {
			ids = append(ids, m[1])
		}
		return ids, body
	}
	ids, body := list("")
	require.Equal(t, []string{"run-0", "run-1"}, ids, "newest first, a page at a time")
	older := regexp.MustCompile(`id="older" href="/\?([^"]+)"|href="/\?([^"]+)" id="older"`).FindStringSubmatch(body)
	require.NotNil(t, older, body)
	ids, _ = list(strings.ReplaceAll(older[1]+older[2], "&amp;", "&"))
	require.Equal(t, []string{"run-2", "run-3"}, ids)

	ids, _ = list("status=failed")
	require.Equal(t, []string{"run-1", "run-2"}, ids)
	ids, _ = list("flow=orders&status=failed&window=1h")
	require.Equal(t, []string{"run-1"}, ids)
	ids, _ = list("q=DECLINED&window=168h")
	require.Equal(t, []string{"run-1", "run-4"}, ids)
	ids, _ = list("flow=refunds")
	require.Equal(t, []string{"run-2"}, ids)

	status, body, _ := dashboardtest.Do(t, dashboardtest.Client(t), http.MethodGet, srv.URL+"/?status=exploded", nil, nil)
	require.Equal(t, http.StatusBadRequest, status)
	require.Contains(t, body, "No such status: exploded.")
	status, _, _ = dashboardtest.Do(t, dashboardtest.Client(t), http.MethodGet, srv.URL+"/runs/nope", nil, nil)
	require.Equal(t, http.StatusNotFound, status)
}

// TestRunPageEscapesWhatItShows: an error and an input holding HTML are
// text on the page, never markup.
func TestRunPageEscapesWhatItShows(t *testing.T) {
	t.Parallel()
	fx := dashboardtest.New(t, dashboard.Config{})
	run := fx.Start(dashboardtest.Order{ID: `<img src=x onerror=alert(2)>`, Fail: `<script>alert(1)</script>`}, journal.Failed)
	status, body, _ := dashboardtest.Do(t, dashboardtest.Client(t), http.MethodGet, fx.Srv.URL+"/runs/"+run, nil, nil)
	require.Equal(t, http.StatusOK, status)
	require.NotContains(t, body, "<script>alert(1)")
	require.NotContains(t, body, "<img src=x")
	require.Contains(t, body, "&lt;script&gt;alert(1)&lt;/script&gt;")
	require.Contains(t, body, `id="replay"`, "a failed run can be replayed")
	require.Contains(t, body, `id="compensate"`, "and compensated: its flow has a compensation")
	require.Contains(t, body, fx.Flow+".charge"+broker.DeadLetterSuffix, "where its message waits")
	fi, err := fx.Eng.Flow(fx.Flow)
	require.NoError(t, err)
	require.Contains(t, body, `<code id="version">`+fi.Version+`</code>`, "the version it started on")
}

// TestCompensateNow: the compensate button sends a failed run to be
// compensated; a worker does it and the run ends compensated.
func TestCompensateNow(t *testing.T) {
	t.Parallel()
	fx := dashboardtest.New(t, dashboard.Config{})
	run := fx.Start(dashboardtest.Order{ID: "o-1", Fail: "declined"}, journal.Failed)
	c := dashboardtest.Client(t)
	_, page, _ := dashboardtest.Do(t, c, http.MethodGet, fx.Srv.URL+"/runs/"+run, nil, nil)
	status, _, resp := dashboardtest.Do(t, c, http.MethodPost, fx.Srv.URL+"/runs/"+run+"/compensate", url.Values{"csrf": {dashboardtest.CSRF(t, page)}}, nil)
	require.Equal(t, http.StatusBadRequest, status, "compensating asks for its confirmation")
	status, _, resp = dashboardtest.Do(t, c, http.MethodPost, fx.Srv.URL+"/runs/"+run+"/compensate",
		url.Values{"csrf": {dashboardtest.CSRF(t, page)}, "confirm": {"1"}, "reason": {"order withdrawn"}}, nil)
	require.Equal(t, http.StatusSeeOther, status)
	require.Equal(t, "/runs/"+run+"?done=compensating", resp.Header.Get("Location"))
	fx.Wait(run, journal.Compensated)
	_, page, _ = dashboardtest.Do(t, c, http.MethodGet, fx.Srv.URL+"/runs/"+run, nil, nil)
	require.Contains(t, page, `data-kind="compensation"`)
	require.Contains(t, page, `data-outcome="compensation asked by dashboard: order withdrawn"`, "the timeline says who asked, and why")
	require.NotContains(t, page, `id="replay"`, "a compensated run cannot be replayed")
}

// TestReadOnly: without an engine (or with ReadOnly) there is no button,
// and a POST is refused.
func TestReadOnly(t *testing.T) {
	t.Parallel()
	fx := dashboardtest.New(t, dashboard.Config{})
	run := fx.Start(dashboardtest.Order{ID: "o-1", Fail: "declined"}, journal.Failed)
	for _, cfg := range []dashboard.Config{{Journal: fx.Journal}, {Engine: fx.Eng, ReadOnly: true}} {
		h, err := dashboard.New(cfg)
		require.NoError(t, err)
		srv := httptest.NewServer(h)
		t.Cleanup(srv.Close)
		c := dashboardtest.Client(t)
		status, page, _ := dashboardtest.Do(t, c, http.MethodGet, srv.URL+"/runs/"+run, nil, nil)
		require.Equal(t, http.StatusOK, status)
		require.NotContains(t, page, `id="replay"`)
		require.Contains(t, page, "This dashboard is read-only.")
		status, page, _ = dashboardtest.Do(t, c, http.MethodPost, srv.URL+"/runs/"+run+"/replay", url.Values{}, nil)
		require.Equal(t, http.StatusForbidden, status)
		require.Contains(t, page, "This dashboard is read-only.")
	}
}

// TestFailedGroupsAndGroupReplay: failed runs whose errors differ only in
// numbers are one group; replaying it first shows how many runs and
// which, then replays exactly those.
func TestFailedGroupsAndGroupReplay(t *testing.T) {
	t.Parallel()
	fx := dashboardtest.New(t, dashboard.Config{MaxGroupReplay: 2})
	var declined []string
	for i, card := range []string{"4242", "1881", "3007"} {
		declined = append(declined, fx.Start(dashboardtest.Order{ID: fmt.Sprint(i), Fail: "card " + card + " declined for order " + fmt.Sprint(17+i)}, journal.Failed))
	}
	other := fx.Start(dashboardtest.Order{ID: "x", Fail: "bank unreachable"}, journal.Failed)

	c := dashboardtest.Client(t)
	status, page, _ := dashboardtest.Do(t, c, http.MethodGet, fx.Srv.URL+"/failed", nil, nil)
	require.Equal(t, http.StatusOK, status)
	require.Contains(t, page, "card &lt;n&gt; declined for order &lt;n&gt;")
	require.Contains(t, page, "bank unreachable")
	groups := regexp.MustCompile(`data-group="([0-9a-f]+)"`).FindAllStringSubmatch(page, -1)
	require.Len(t, groups, 2)
	require.Regexp(t, `class="count"[^>]*>3<`, page, "the biggest group first")

	status, confirm, _ := dashboardtest.Do(t, c, http.MethodPost, fx.Srv.URL+"/failed/replay",
		url.Values{"csrf": {dashboardtest.CSRF(t, page)}, "group": {groups[0][1]}}, nil)
	require.Equal(t, http.StatusOK, status)
	require.Contains(t, confirm, "Replay 2 runs?")
	require.Contains(t, confirm, "The group holds 3 runs; one replay takes the oldest 2.")
	for _, id := range declined[:2] {
		require.Contains(t, confirm, `name="run" value="`+id+`"`)
	}
	require.NotContains(t, confirm, declined[2], "the bound: the oldest two")
	require.NotContains(t, confirm, other)

	form := url.Values{"csrf": {dashboardtest.CSRF(t, confirm)}, "group": {groups[0][1]}, "confirm": {"1"}, "run": declined[:2]}
	results, _ := replayGroup(fx, c, form)
	require.Contains(t, results, "Replayed 2 of 2 runs")
	for _, id := range declined[:2] {
		fx.Wait(id, journal.Completed)
		require.Contains(t, results, `data-run="`+id+`" data-outcome="replayed"`)
		require.Equal(t, 1, fx.Replays(id))
	}
	for _, id := range []string{declined[2], other} {
		r, err := fx.Journal.Run(context.Background(), id)
		require.NoError(t, err)
		require.Equal(t, journal.Failed, r.Status, "not in what was confirmed")
	}
	_, page, _ = dashboardtest.Do(t, c, http.MethodGet, fx.Srv.URL+"/failed", nil, nil)
	require.Regexp(t, `class="count"[^>]*>1<`, page)
}

// replayGroup confirms a group replay with form: the answer sends the
// browser to the replay's page, which it reads (as the page reloads itself)
// until the replay is done, and returns with its address.
func replayGroup(fx *dashboardtest.Fixture, c *http.Client, form url.Values) (page, at string) {
	fx.T.Helper()
	status, _, resp := dashboardtest.Do(fx.T, c, http.MethodPost, fx.Srv.URL+"/failed/replay", form, nil)
	require.Equal(fx.T, http.StatusSeeOther, status, "the replay goes on in the background")
	at = resp.Header.Get("Location")
	require.Regexp(fx.T, `^/failed/replay/[A-Z0-9]+$`, at)
	require.Eventually(fx.T, func() bool {
		status, page, _ = dashboardtest.Do(fx.T, c, http.MethodGet, fx.Srv.URL+at, nil, nil)
		require.Equal(fx.T, http.StatusOK, status, page)
		if strings.Contains(page, `id="replaying"`) {
			require.Contains(fx.T, page, `data-refresh="1"`, "the progress page comes again")
			return false
		}
		return true
	}, time.Minute, 20*time.Millisecond)
	require.Contains(fx.T, page, `id="results"`)
	return page, at
}

// TestGroupReplayOfAThousandRuns: a group of a thousand failed runs is
// replayed in the background, in one pass over their dead-letter queue
// (the other group's messages there are put back once, not once per
// run): the answer to the confirmation is the replay's page, which ends
// as the result page listing every run replayed; every run is replayed
// once and completes; reading the page again replays nothing more; the
// other group's runs are untouched.
func TestGroupReplayOfAThousandRuns(t *testing.T) {
	t.Parallel()
	const n, others = 1000, 40
	fx := dashboardtest.New(t, dashboard.Config{MaxFailed: 2000})
	var orders []dashboardtest.Order
	for i := range n {
		orders = append(orders, dashboardtest.Order{ID: fmt.Sprint(i), Fail: fmt.Sprintf("card %d declined", i)})
	}
	for i := range others {
		orders = append(orders, dashboardtest.Order{ID: fmt.Sprint("x", i), Fail: "bank unreachable"})
	}
	ids := fx.StartAll(orders, journal.Failed)
	declined, unreachable := ids[:n], ids[n:]
	dlq := fx.Flow + ".charge" + broker.DeadLetterSuffix
	fx.H.WaitDepth(dlq, n+others, 10*time.Second)

	c := dashboardtest.Client(t)
	_, page, _ := dashboardtest.Do(t, c, http.MethodGet, fx.Srv.URL+"/failed", nil, nil)
	key := groupKeyOf(t, page, "card &lt;n&gt; declined")
	status, confirm, _ := dashboardtest.Do(t, c, http.MethodPost, fx.Srv.URL+"/failed/replay", url.Values{"csrf": {dashboardtest.CSRF(t, page)}, "group": {key}}, nil)
	require.Equal(t, http.StatusOK, status)
	require.Contains(t, confirm, fmt.Sprintf("Replay %d runs?", n))
	form := url.Values{"csrf": {dashboardtest.CSRF(t, confirm)}, "group": {key}, "confirm": {"1"}, "run": declined}
	before := fx.Published()
	results, at := replayGroup(fx, c, form)
	require.Contains(t, results, fmt.Sprintf("Replayed %d of %d runs", n, n))
	require.Equal(t, n, strings.Count(results, `data-outcome="replayed"`))
	require.LessOrEqual(t, fx.Published()-before, int64(n+others), "one pass: each replayed copy, and each other message put back once")
	for _, id := range declined {
		fx.Wait(id, journal.Completed)
	}
	for _, id := range declined {
		require.Equal(t, 1, fx.Replays(id), "run %s replayed once", id)
		require.Equal(t, 2, fx.Charges(id), "run %s charged once more", id)
	}
	status, again, _ := dashboardtest.Do(t, c, http.MethodGet, fx.Srv.URL+at, nil, nil)
	require.Equal(t, http.StatusOK, status)
	require.Contains(t, again, fmt.Sprintf("Replayed %d of %d runs", n, n), "the same result, read again")
	for _, id := range declined[:10] {
		require.Equal(t, 1, fx.Replays(id), "reading the result again replays nothing")
	}
	for _, id := range unreachable {
		r, err := fx.Journal.Run(context.Background(), id)
		require.NoError(t, err)
		require.Equal(t, journal.Failed, r.Status)
	}
	fx.H.WaitDepth(dlq, others, 10*time.Second)
}

// groupKeyOf is the key of the /failed group whose pattern ends with
// pattern (as the page escapes it).
func groupKeyOf(t *testing.T, page, pattern string) string {
	t.Helper()
	m := regexp.MustCompile(`data-group="([0-9a-f]+)">\s*<header>[^§]*?<p class="pattern"><code>[^<]*` + regexp.QuoteMeta(pattern) + `</code>`).FindStringSubmatch(page)
	require.NotNil(t, m, "no group %q in:\n%s", pattern, page)
	return m[1]
}

// TestCharts: the last hour's runs started and failed per minute, and
// step times, drawn from the journal as SVG.
func TestCharts(t *testing.T) {
	t.Parallel()
	fx := dashboardtest.New(t, dashboard.Config{})
	fx.Start(dashboardtest.Order{ID: "1"}, journal.Completed)
	fx.Start(dashboardtest.Order{ID: "2"}, journal.Completed)
	fx.Start(dashboardtest.Order{ID: "3", Fail: "declined"}, journal.Failed)
	status, page, _ := dashboardtest.Do(t, dashboardtest.Client(t), http.MethodGet, fx.Srv.URL+"/charts", nil, nil)
	require.Equal(t, http.StatusOK, status)
	require.Contains(t, page, "3 started, 0.000833 runs/s on average")
	require.Contains(t, page, "1 failed and not replayed since")
	require.Regexp(t, `<rect [^>]*class="started"><title>\d\d:\d\dZ: [123]</title>`, page)
	require.Regexp(t, `<rect [^>]*class="failed"><title>\d\d:\d\dZ: 1</title>`, page)
	require.Contains(t, page, fx.Flow[:22]+"… › charge")
	require.Contains(t, page, "from the timelines of the newest 3 runs")
}

// TestCloseStopsAGroupReplay: Close stops the group replay running
// between two messages and waits for it; its page then says it was
// stopped, the runs it did not reach are still failed and replayed
// nothing, and a group replay asked for after Close is refused.
func TestCloseStopsAGroupReplay(t *testing.T) {
	t.Parallel()
	const n = 100
	// Each lookup takes 50 ms: the replay would take five seconds.
	fx := dashboardtest.New(t, dashboard.Config{}, 50*time.Millisecond)
	var orders []dashboardtest.Order
	for i := range n {
		orders = append(orders, dashboardtest.Order{ID: fmt.Sprint(i), Fail: "declined"})
	}
	ids := fx.StartAll(orders, journal.Failed)
	c := dashboardtest.Client(t)
	_, page, _ := dashboardtest.Do(t, c, http.MethodGet, fx.Srv.URL+"/failed", nil, nil)
	key := groupKeyOf(t, page, "declined")
	form := url.Values{"csrf": {dashboardtest.CSRF(t, page)}, "group": {key}, "confirm": {"1"}, "run": ids}
	status, _, resp := dashboardtest.Do(t, c, http.MethodPost, fx.Srv.URL+"/failed/replay", form, nil)
	require.Equal(t, http.StatusSeeOther, status)
	at := resp.Header.Get("Location")
	_, page, _ = dashboardtest.Do(t, c, http.MethodGet, fx.Srv.URL+"/failed", nil, nil)
	require.Contains(t, page, `id="replay-running"`, "the failed runs page leads to it")
	status, page, resp = dashboardtest.Do(t, c, http.MethodPost, fx.Srv.URL+"/failed/replay", url.Values{"csrf": {dashboardtest.CSRF(t, page)}, "group": {key}, "confirm": {"1"}, "run": ids[:1]}, nil)
	require.Equal(t, http.StatusSeeOther, status, page)
	require.Equal(t, at+"?busy=1", resp.Header.Get("Location"), "one group replay at a time: asking again leads to it")

	require.NoError(t, fx.Dash.Close(brokertest.Ctx(t)))
	status, page, _ = dashboardtest.Do(t, c, http.MethodGet, fx.Srv.URL+at, nil, nil)
	require.Equal(t, http.StatusOK, status)
	require.Contains(t, page, `id="interrupted"`, "done, and stopped before it finished")
	notReached := strings.Count(page, `data-outcome="not-reached"`)
	require.Positive(t, notReached)
	require.Equal(t, n, notReached+strings.Count(page, `data-outcome="replayed"`))
	for _, id := range ids {
		if strings.Contains(page, `data-run="`+id+`" data-outcome="not-reached"`) {
			require.Zero(t, fx.Replays(id), "run %s was not touched", id)
			r, err := fx.Journal.Run(context.Background(), id)
			require.NoError(t, err)
			require.Equal(t, journal.Failed, r.Status)
		}
	}
	_, page, _ = dashboardtest.Do(t, c, http.MethodGet, fx.Srv.URL+"/failed", nil, nil)
	status, _, _ = dashboardtest.Do(t, c, http.MethodPost, fx.Srv.URL+"/failed/replay", url.Values{"csrf": {dashboardtest.CSRF(t, page)}, "group": {key}, "confirm": {"1"}, "run": ids[:1]}, nil)
	require.Equal(t, http.StatusServiceUnavailable, status, "refused once closed")
}

// TestSignalAndCancelFromTheRunPage: a waiting run's page says what it
// waits for and offers its signal, which resumes it; a run that has not
// ended offers a cancel that needs its confirmation ticked, and then
// cancels it with its reason; a run that is over offers neither.
func TestSignalAndCancelFromTheRunPage(t *testing.T) {
	t.Parallel()
	fx := dashboardtest.New(t, dashboard.Config{})
	c := dashboardtest.Client(t)
	run := fx.StartWaiting(dashboardtest.Order{ID: "o-1"})
	_, page, _ := dashboardtest.Do(t, c, http.MethodGet, fx.Srv.URL+"/runs/"+run, nil, nil)
	require.Contains(t, page, "Waiting for the signal <strong>approval</strong>")
	require.Contains(t, page, `id="signal"`)
	require.Contains(t, page, `id="cancel"`)
	csrf := dashboardtest.CSRF(t, page)
	status, body, _ := dashboardtest.Do(t, c, http.MethodPost, fx.Srv.URL+"/runs/"+run+"/signal",
		url.Values{"csrf": {csrf}, "signal": {"approval"}, "payload": {`{"by":7}`}, "confirm": {"1"}}, nil)
	require.Equal(t, http.StatusBadRequest, status, "a payload that is not the signal's")
	require.Contains(t, body, "payload")
	status, _, resp := dashboardtest.Do(t, c, http.MethodPost, fx.Srv.URL+"/runs/"+run+"/signal",
		url.Values{"csrf": {csrf}, "signal": {"approval"}, "payload": {`{"by":"ada"}`}, "confirm": {"1"}}, nil)
	require.Equal(t, http.StatusSeeOther, status)
	require.Equal(t, "/runs/"+run+"?done=signalled", resp.Header.Get("Location"))
	fx.Wait(run, journal.Completed)
	_, page, _ = dashboardtest.Do(t, c, http.MethodGet, fx.Srv.URL+"/runs/"+run, nil, nil)
	require.NotContains(t, page, `id="cancel"`, "a completed run cannot be cancelled")
	require.NotContains(t, page, `id="signal"`)

	other := fx.StartWaiting(dashboardtest.Order{ID: "o-2"})
	status, body, _ = dashboardtest.Do(t, c, http.MethodPost, fx.Srv.URL+"/runs/"+other+"/cancel",
		url.Values{"csrf": {csrf}, "reason": {"not wanted"}}, nil)
	require.Equal(t, http.StatusBadRequest, status, "not confirmed")
	require.Contains(t, body, "tick the confirmation")
	require.Equal(t, journal.Waiting, fx.Wait(other, journal.Waiting).Status)
	status, _, resp = dashboardtest.Do(t, c, http.MethodPost, fx.Srv.URL+"/runs/"+other+"/cancel",
		url.Values{"csrf": {csrf}, "reason": {"not wanted"}, "confirm": {"1"}}, nil)
	require.Equal(t, http.StatusSeeOther, status)
	require.Equal(t, "/runs/"+other+"?done=cancelled", resp.Header.Get("Location"))
	r := fx.Wait(other, journal.Cancelled)
	require.Equal(t, "cancelled by dashboard: not wanted", r.Error)
	status, _, _ = dashboardtest.Do(t, c, http.MethodPost, fx.Srv.URL+"/runs/"+other+"/cancel",
		url.Values{"csrf": {csrf}, "confirm": {"1"}}, nil)
	require.Equal(t, http.StatusConflict, status, "a run that is over")
}
