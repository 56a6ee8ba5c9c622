package dashboard_test

import (
	"context"
	"encoding/json"
	"io"
	"net/http"
	"net/http/httptest"
	"net/url"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/acemq/acemq-flow/engine/dashboard"
	"github.com/acemq/acemq-flow/engine/journal"
	"github.com/acemq/acemq-flow/internal/brokertest"
	"github.com/acemq/acemq-flow/internal/dashboardtest"
	"github.com/acemq/acemq-flow/internal/testenv"
)

// apiDo sends an API request with body (JSON, none when "") and headers,
// and returns its status and its JSON answer decoded into out.
func apiDo(t *testing.T, c *http.Client, method, u, body string, header map[string]string, out any) int {
	t.Helper()
	var rd io.Reader
	if body != "" {
		rd = strings.NewReader(body)
	}
	req, err := http.NewRequestWithContext(brokertest.Ctx(t), method, u, rd)
	require.NoError(t, err)
	if body != "" {
		req.Header.Set("Content-Type", "application/json")
	}
	for k, v := range header {
		req.Header.Set(k, v)
	}
	resp, err := c.Do(req)
	require.NoError(t, err)
	defer resp.Body.Close()
	require.Equal(t, "application/json", resp.Header.Get("Content-Type"), "%s %s answers JSON", method, u)
	b, err := io.ReadAll(resp.Body)
	require.NoError(t, err)
	if out != nil {
		require.NoError(t, json.Unmarshal(b, out), "answer %s", b)
	}
	return resp.StatusCode
}

func bearer(tok string) map[string]string { return map[string]string{"Authorization": "Bearer " + tok} }

// outcomes are the outcomes of a run's timeline as GET
// /api/runs/{id}/timeline gives them.
func outcomes(t *testing.T, srv, id, tok string) []string {
	t.Helper()
	var tl dashboard.APITimeline
	require.Equal(t, http.StatusOK, apiDo(t, http.DefaultClient, http.MethodGet, srv+"/api/runs/"+url.PathEscape(id)+"/timeline", "", bearer(tok), &tl))
	require.Equal(t, id, tl.RunID)
	var out []string
	for _, e := range tl.Events {
		out = append(out, e.Outcome)
	}
	return out
}

// TestAPIAuth: the API takes the dashboard's token as a bearer header
// (no CSRF token needed) or a session cookie, whose POSTs need the page's
// CSRF token; without either it is 401, as JSON.
func TestAPIAuth(t *testing.T) {
	t.Parallel()
	fx := dashboardtest.New(t, dashboard.Config{Token: "t0k"})
	var e dashboard.APIError
	require.Equal(t, http.StatusUnauthorized, apiDo(t, http.DefaultClient, http.MethodGet, fx.Srv.URL+"/api/runs", "", nil, &e))
	require.Equal(t, "unauthorized", e.Code)
	require.Contains(t, e.Error, "Bearer")
	require.Equal(t, http.StatusUnauthorized, apiDo(t, http.DefaultClient, http.MethodGet, fx.Srv.URL+"/api/runs", "", bearer("nope"), &e))
	require.Equal(t, "unauthorized", e.Code)
	require.Equal(t, http.StatusUnauthorized, apiDo(t, http.DefaultClient, http.MethodPost, fx.Srv.URL+"/api/runs/x/replay", `{}`, nil, &e))

	var runs dashboard.APIRuns
	require.Equal(t, http.StatusOK, apiDo(t, http.DefaultClient, http.MethodGet, fx.Srv.URL+"/api/runs", "", bearer("t0k"), &runs))
	require.Empty(t, runs.Runs)
	require.Equal(t, http.StatusNotFound, apiDo(t, http.DefaultClient, http.MethodPost, fx.Srv.URL+"/api/runs/x/replay", `{}`, bearer("t0k"), &e),
		"a bearer client acts without a CSRF token")
	require.Equal(t, "not_found", e.Code)

	// A browser signed in: reads with its cookie, acts only with the
	// page's CSRF token.
	c := dashboardtest.Client(t)
	status, _, _ := dashboardtest.Do(t, c, http.MethodGet, fx.Srv.URL+"/?token=t0k", nil, nil)
	require.Equal(t, http.StatusSeeOther, status)
	_, page, _ := dashboardtest.Do(t, c, http.MethodGet, fx.Srv.URL+"/", nil, nil)
	require.Equal(t, http.StatusOK, apiDo(t, c, http.MethodGet, fx.Srv.URL+"/api/runs", "", nil, &runs))
	require.Equal(t, http.StatusForbidden, apiDo(t, c, http.MethodPost, fx.Srv.URL+"/api/runs/x/replay", `{}`, nil, &e))
	require.Equal(t, "csrf", e.Code)
	require.Equal(t, http.StatusForbidden, apiDo(t, c, http.MethodPost, fx.Srv.URL+"/api/runs/x/replay", `{}`,
		map[string]string{"X-CSRF-Token": "forged"}, &e))
	require.Equal(t, "csrf", e.Code)
	require.Equal(t, http.StatusNotFound, apiDo(t, c, http.MethodPost, fx.Srv.URL+"/api/runs/x/replay", `{}`,
		map[string]string{"X-CSRF-Token": dashboardtest.CSRF(t, page)}, &e), "with the page's token it acts")
	require.Equal(t, http.StatusForbidden, apiDo(t, c, http.MethodGet, fx.Srv.URL+"/api/runs", "",
		map[string]string{"Sec-Fetch-Site": "cross-site"}, &e))

	require.Equal(t, http.StatusNotFound, apiDo(t, http.DefaultClient, http.MethodGet, fx.Srv.URL+"/api/nothing", "", bearer("t0k"), &e))
	require.Equal(t, "not_found", e.Code)
}

// TestAPIReadOnly: a dashboard without an engine reads, and refuses
// actions with 403.
func TestAPIReadOnly(t *testing.T) {
	t.Parallel()
	j, err := journal.NewMemory(0)
	require.NoError(t, err)
	d, err := dashboard.New(dashboard.Config{Journal: j, Token: "t0k", Logger: testenv.Logger(t)})
	require.NoError(t, err)
	srv := httptest.NewServer(d)
	t.Cleanup(srv.Close)
	var e dashboard.APIError
	require.Equal(t, http.StatusForbidden, apiDo(t, http.DefaultClient, http.MethodPost, srv.URL+"/api/flows/f/start", `{"payload":{}}`, bearer("t0k"), &e))
	require.Equal(t, "read_only", e.Code)
}

// TestAPIRuns: the runs list filtered and paged, a run and its timeline,
// each input masked by its flow's secrets; bad parameters are 400, an
// unknown run 404.
func TestAPIRuns(t *testing.T) {
	t.Parallel()
	j, err := journal.NewMemory(0)
	require.NoError(t, err)
	now := time.Now().UTC().Truncate(time.Millisecond)
	input := json.RawMessage(`{"id":"o-1","card":{"number":"4242 4242 4242 4242"},"pin":"1234"}`)
	for i, run := range []struct {
		id, flow string
		status   journal.Status
	}{{"r-1", "shop", journal.Running}, {"r-2", "shop", journal.Failed}, {"r-3", "shop", journal.Running}, {"r-4", "other", journal.Running}} {
		at := now.Add(time.Duration(i) * time.Second)
		require.NoError(t, j.Record(context.Background(), []journal.Event{{RunID: run.id, Flow: run.flow, Key: "start", Kind: journal.KindStart,
			Outcome: "started", StartedAt: at, EndedAt: at, Status: run.status, RunStep: "a", Input: input, Error: map[bool]string{true: "card declined"}[run.status == journal.Failed]}}))
	}
	d, err := dashboard.New(dashboard.Config{Journal: j, Token: "t0k", Logger: testenv.Logger(t), Secrets: map[string][]string{"shop": {"payload.card.number", "pin"}}})
	require.NoError(t, err)
	srv := httptest.NewServer(d)
	t.Cleanup(srv.Close)
	get := func(path string, out any) int {
		return apiDo(t, http.DefaultClient, http.MethodGet, srv.URL+path, "", bearer("t0k"), out)
	}

	var runs dashboard.APIRuns
	require.Equal(t, http.StatusOK, get("/api/runs?flow=shop&limit=2", &runs))
	require.Equal(t, []string{"r-3", "r-2"}, ids(runs.Runs), "newest first, the flow's only")
	require.NotEmpty(t, runs.Next)
	require.JSONEq(t, `{"id":"o-1","card":{"number":"•••• 4242"},"pin":"••••"}`, string(runs.Runs[0].Input), "masked by the flow's secrets")
	var more dashboard.APIRuns
	require.Equal(t, http.StatusOK, get("/api/runs?flow=shop&limit=2&cursor="+url.QueryEscape(runs.Next), &more))
	require.Equal(t, []string{"r-1"}, ids(more.Runs), "the next page")
	require.Empty(t, more.Next, "the last page")
	require.Equal(t, http.StatusOK, get("/api/runs?status=failed", &runs))
	require.Equal(t, []string{"r-2"}, ids(runs.Runs))
	require.Equal(t, http.StatusOK, get("/api/runs?search=declined", &runs))
	require.Equal(t, []string{"r-2"}, ids(runs.Runs), "searched as the runs page searches")
	require.Equal(t, http.StatusOK, get("/api/runs?q=id:r-4", &runs))
	require.Equal(t, []string{"r-4"}, ids(runs.Runs))
	require.JSONEq(t, string(input), string(runs.Runs[0].Input), "a flow without secrets as it is")

	var e dashboard.APIError
	for _, bad := range []string{"status=lost", "limit=0", "limit=1001", "cursor=yesterday", "window=-1h"} {
		require.Equal(t, http.StatusBadRequest, get("/api/runs?"+bad, &e), bad)
		require.Equal(t, "bad_request", e.Code)
	}

	var run map[string]any
	require.Equal(t, http.StatusOK, get("/api/runs/r-2", &run))
	require.Equal(t, "r-2", run["run_id"])
	require.Equal(t, "failed", run["status"])
	require.Equal(t, "card declined", run["error"])
	require.Equal(t, map[string]any{"id": "o-1", "card": map[string]any{"number": "•••• 4242"}, "pin": "••••"}, run["input"])
	require.Equal(t, http.StatusNotFound, get("/api/runs/nope", &e))
	require.Equal(t, "not_found", e.Code)

	var tl map[string]any
	require.Equal(t, http.StatusOK, get("/api/runs/r-2/timeline", &tl))
	require.Equal(t, "r-2", tl["run_id"])
	events := tl["events"].([]any)
	require.Len(t, events, 1)
	require.Equal(t, "start", events[0].(map[string]any)["kind"])
	require.Equal(t, "started", events[0].(map[string]any)["outcome"])
	require.NotContains(t, events[0], "input", "an event's input is not shown")
	require.Equal(t, []any{}, tl["forks"])
	require.Equal(t, http.StatusNotFound, get("/api/runs/nope/timeline", &e))

	var failed dashboard.APIFailed
	require.Equal(t, http.StatusOK, get("/api/failed", &failed))
	require.Len(t, failed.Groups, 1)
	require.Equal(t, int64(1), failed.Total)
	require.Equal(t, "shop", failed.Groups[0].Flow)
	require.Equal(t, int64(1), failed.Groups[0].Runs)
	require.Equal(t, "card declined", failed.Groups[0].Example)
	require.Equal(t, http.StatusOK, get("/api/failed?flow=other", &failed))
	require.Empty(t, failed.Groups)
	require.Equal(t, http.StatusBadRequest, get("/api/failed?window=forever", &e))
}

func ids(runs []journal.Run) []string {
	var out []string
	for _, r := range runs {
		out = append(out, r.ID)
	}
	return out
}

// TestAPIActionsRecordActorAndReason: replay, compensate, signal, cancel
// and start through the API answer what the engine did, and each leaves
// in the run's timeline who asked (the token's name) and why; refusals
// have their status and code.
func TestAPIActionsRecordActorAndReason(t *testing.T) {
	t.Parallel()
	fx := dashboardtest.New(t, dashboard.Config{Token: "t0k", TokenName: "ada"})
	tok := bearer("t0k")
	post := func(path, body string, out any) int {
		return apiDo(t, http.DefaultClient, http.MethodPost, fx.Srv.URL+path, body, tok, out)
	}
	var e dashboard.APIError

	// Replay.
	run := fx.Start(dashboardtest.Order{ID: "o-1", Fail: "declined"}, journal.Failed)
	var a struct {
		dashboard.APIAction
		Result map[string]any `json:"result"`
	}
	require.Equal(t, http.StatusOK, post("/api/runs/"+run+"/replay", `{"reason":"card fixed"}`, &a))
	require.Equal(t, "replay", a.Action)
	require.Equal(t, run, a.RunID)
	require.Equal(t, "ada", a.Actor)
	require.Equal(t, "card fixed", a.Reason)
	require.Equal(t, fx.Flow+".charge", a.Result["to"], "the engine's Moved")
	fx.Wait(run, journal.Completed)
	require.Contains(t, outcomes(t, fx.Srv.URL, run, "t0k"), "replayed by ada: card fixed")
	require.Equal(t, http.StatusConflict, post("/api/runs/"+run+"/replay", `{}`, &e), "a completed run")
	require.Equal(t, "not_replayable", e.Code)
	require.Equal(t, http.StatusBadRequest, post("/api/runs/"+run+"/replay", `{"reason":`, &e), "not JSON")
	require.Equal(t, "bad_request", e.Code)
	require.Equal(t, http.StatusBadRequest, post("/api/runs/"+run+"/replay", `{"why":"x"}`, &e), "a field no action takes")

	// Compensate.
	other := fx.Start(dashboardtest.Order{ID: "o-2", Fail: "declined"}, journal.Failed)
	require.Equal(t, http.StatusOK, post("/api/runs/"+other+"/compensate", `{"reason":"order withdrawn"}`, &a))
	require.Equal(t, "compensate", a.Action)
	fx.Wait(other, journal.Compensated)
	require.Contains(t, outcomes(t, fx.Srv.URL, other, "t0k"), "compensation asked by ada: order withdrawn")
	require.Equal(t, http.StatusConflict, post("/api/runs/"+other+"/compensate", `{}`, &e))
	require.Equal(t, "not_compensable", e.Code)

	// Signal.
	waiting := fx.StartWaiting(dashboardtest.Order{ID: "o-3"})
	require.Equal(t, http.StatusBadRequest, post("/api/runs/"+waiting+"/signal", `{"signal":"approval","payload":{"by":7}}`, &e))
	require.Equal(t, "invalid_payload", e.Code)
	require.Equal(t, http.StatusBadRequest, post("/api/runs/"+waiting+"/signal", `{"signal":"nope","payload":{}}`, &e))
	require.Equal(t, "no_such_wait", e.Code)
	require.Equal(t, http.StatusOK, post("/api/runs/"+waiting+"/signal", `{"signal":"approval","payload":{"by":"ada"},"reason":"approved"}`, &a))
	require.Equal(t, true, a.Result["resumed"])
	fx.Wait(waiting, journal.Completed)
	require.Contains(t, outcomes(t, fx.Srv.URL, waiting, "t0k"), "signal received by ada: approved; the run goes on")

	// Cancel.
	cancelled := fx.StartWaiting(dashboardtest.Order{ID: "o-4"})
	require.Equal(t, http.StatusOK, post("/api/runs/"+cancelled+"/cancel", `{"reason":"not wanted"}`, &a))
	require.Equal(t, "cancel", a.Action)
	r := fx.Wait(cancelled, journal.Cancelled)
	require.Equal(t, "cancelled by ada: not wanted", r.Error)
	require.Contains(t, outcomes(t, fx.Srv.URL, cancelled, "t0k"), "cancelled by ada: not wanted")
	require.Equal(t, http.StatusConflict, post("/api/runs/"+cancelled+"/cancel", `{}`, &e))
	require.Equal(t, "run_ended", e.Code)
	require.Equal(t, http.StatusNotFound, post("/api/runs/nope/cancel", `{}`, &e))
	require.Equal(t, "not_found", e.Code)

	// Start.
	var st struct {
		dashboard.APIAction
		Result map[string]any `json:"result"`
	}
	require.Equal(t, http.StatusCreated, post("/api/flows/"+fx.Flow+"/start", `{"payload":{"id":"o-5"},"reason":"by hand"}`, &st))
	require.Equal(t, "start", st.Action)
	require.NotEmpty(t, st.RunID)
	require.Equal(t, st.RunID, st.Result["run_id"])
	fx.Wait(st.RunID, journal.Completed)
	require.Equal(t, "started by ada: by hand", outcomes(t, fx.Srv.URL, st.RunID, "t0k")[0])
	require.Equal(t, http.StatusBadRequest, post("/api/flows/"+fx.Flow+"/start", `{"payload":{"id":1}}`, &e))
	require.Equal(t, "invalid_payload", e.Code)
	require.Equal(t, http.StatusBadRequest, post("/api/flows/"+fx.Flow+"/start", `{}`, &e), "no payload")
	require.Equal(t, http.StatusNotFound, post("/api/flows/nope/start", `{"payload":{}}`, &e))
	require.Equal(t, "unknown_flow", e.Code)

	// Failed groups: none left.
	var failed dashboard.APIFailed
	require.Equal(t, http.StatusOK, apiDo(t, http.DefaultClient, http.MethodGet, fx.Srv.URL+"/api/failed", "", tok, &failed))
	require.Empty(t, failed.Groups)
}

// TestPageActionsRecordActorAndReason: the run page's forms and the
// flow page's start form record the token's name and the reason given;
// a start without its confirmation ticked starts nothing.
func TestPageActionsRecordActorAndReason(t *testing.T) {
	t.Parallel()
	fx := dashboardtest.New(t, dashboard.Config{TokenName: "ops"})
	c := dashboardtest.Client(t)
	run := fx.Start(dashboardtest.Order{ID: "o-1", Fail: "declined"}, journal.Failed)
	_, page, _ := dashboardtest.Do(t, c, http.MethodGet, fx.Srv.URL+"/runs/"+run, nil, nil)
	require.Contains(t, page, `id="replay-confirm"`)
	require.Contains(t, page, `id="compensate-confirm"`)
	csrf := dashboardtest.CSRF(t, page)
	status, body, _ := dashboardtest.Do(t, c, http.MethodPost, fx.Srv.URL+"/runs/"+run+"/replay", url.Values{"csrf": {csrf}}, nil)
	require.Equal(t, http.StatusBadRequest, status, "not confirmed")
	require.Contains(t, body, "not replayed: tick the confirmation first")
	status, _, _ = dashboardtest.Do(t, c, http.MethodPost, fx.Srv.URL+"/runs/"+run+"/replay",
		url.Values{"csrf": {csrf}, "confirm": {"1"}, "reason": {"bank back"}}, nil)
	require.Equal(t, http.StatusSeeOther, status)
	fx.Wait(run, journal.Completed)
	_, page, _ = dashboardtest.Do(t, c, http.MethodGet, fx.Srv.URL+"/runs/"+run, nil, nil)
	require.Contains(t, page, `data-outcome="replayed by ops: bank back"`)

	status, page, _ = dashboardtest.Do(t, c, http.MethodGet, fx.Srv.URL+"/flows", nil, nil)
	require.Equal(t, http.StatusOK, status)
	require.Contains(t, page, `href="/flows/`+fx.Flow+`"`)
	status, page, _ = dashboardtest.Do(t, c, http.MethodGet, fx.Srv.URL+"/flows/"+fx.Flow, nil, nil)
	require.Equal(t, http.StatusOK, status)
	require.Contains(t, page, `id="start-form"`)
	status, body, _ = dashboardtest.Do(t, c, http.MethodPost, fx.Srv.URL+"/flows/"+fx.Flow+"/start",
		url.Values{"csrf": {csrf}, "payload": {`{"id":"o-7"}`}}, nil)
	require.Equal(t, http.StatusBadRequest, status)
	require.Contains(t, body, "not started: tick the confirmation first")
	require.Contains(t, body, `{&#34;id&#34;:&#34;o-7&#34;}`, "the form keeps what was sent")
	status, body, _ = dashboardtest.Do(t, c, http.MethodPost, fx.Srv.URL+"/flows/"+fx.Flow+"/start",
		url.Values{"csrf": {csrf}, "payload": {`{"id":`}, "confirm": {"1"}}, nil)
	require.Equal(t, http.StatusBadRequest, status)
	require.Contains(t, body, "not JSON")
	status, _, resp := dashboardtest.Do(t, c, http.MethodPost, fx.Srv.URL+"/flows/"+fx.Flow+"/start",
		url.Values{"csrf": {csrf}, "payload": {`{"id":"o-7"}`}, "confirm": {"1"}, "reason": {"retry by hand"}}, nil)
	require.Equal(t, http.StatusSeeOther, status)
	loc := resp.Header.Get("Location")
	require.True(t, strings.HasPrefix(loc, "/runs/") && strings.HasSuffix(loc, "?done=started"), loc)
	started := strings.TrimSuffix(strings.TrimPrefix(loc, "/runs/"), "?done=started")
	fx.Wait(started, journal.Completed)
	_, page, _ = dashboardtest.Do(t, c, http.MethodGet, fx.Srv.URL+loc, nil, nil)
	require.Contains(t, page, "Started: the run")
	require.Contains(t, page, `data-outcome="started by ops: retry by hand"`)
	status, _, _ = dashboardtest.Do(t, c, http.MethodGet, fx.Srv.URL+"/flows/nope", nil, nil)
	require.Equal(t, http.StatusNotFound, status)
}
