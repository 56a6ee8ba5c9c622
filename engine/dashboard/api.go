package dashboard

import (
	"cmp"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"strconv"
	"strings"
	"time"

	"github.com/acemq/acemq-flow/engine"
	"github.com/acemq/acemq-flow/engine/journal"
	"github.com/acemq/acemq-flow/engine/timeline"
)

// The JSON API, under /api: what the pages show, for a script, with the
// same token. A client signs in with the token in an Authorization:
// Bearer header; a browser's session cookie is taken too, but a POST
// with it needs the page's CSRF token (the X-CSRF-Token header or the
// csrf form field), which a bearer client does not. Every answer is JSON;
// an error is {"error": "...", "code": "..."} with its HTTP status.

// MaxAPILimit is the most runs one GET /api/runs answers with.
const MaxAPILimit = 1000

// maxAPIBody bounds an action's JSON body.
const maxAPIBody = 1 << 20

// jsonBody reports whether r says its body is JSON.
func jsonBody(r *http.Request) bool {
	return strings.HasPrefix(strings.ToLower(r.Header.Get("Content-Type")), "application/json")
}

// csrfHeader is the header a cookie-authenticated API client sends the
// page's CSRF token in.
const csrfHeader = "X-CSRF-Token"

// APIError is the body of an API answer that failed: what went wrong, and
// a code a script can switch on ("not_found", "conflict", "bad_request",
// "unauthorized", "forbidden", "read_only", "csrf", "throttled",
// "journal_unavailable", "unavailable", "engine_error", and the engine's refusals:
// "not_replayable", "not_compensable", "run_ended", "unknown_flow",
// "invalid_payload", "no_such_wait", "message_not_found").
type APIError struct {
	Error string `json:"error"`
	Code  string `json:"code"`
}

// APIRuns is the answer of GET /api/runs: a page of runs, newest first,
// their inputs masked by their flows' secrets. Next is the cursor of the
// next page (pass it as cursor=), "" on the last; Note says the answer of
// a search may be partial.
type APIRuns struct {
	Runs []journal.Run `json:"runs"`
	Next string        `json:"next,omitempty"`
	Note string        `json:"note,omitempty"`
}

// APITimeline is the answer of GET /api/runs/{id}/timeline: the run's own
// events, in order, and its forks (their counts by branch status; no
// branch's events).
type APITimeline struct {
	RunID  string           `json:"run_id"`
	Events []journal.Event  `json:"events"`
	Forks  []*timeline.Fork `json:"forks"`
}

// APIFailedGroup is one group of GET /api/failed: failed runs of one
// flow, given up at one step, for errors of one pattern.
type APIFailedGroup struct {
	Key     string    `json:"key"`
	Flow    string    `json:"flow"`
	Step    string    `json:"step"`
	Pattern string    `json:"pattern"`
	Example string    `json:"example"`
	Runs    int64     `json:"runs"`
	Oldest  time.Time `json:"oldest"`
	Newest  time.Time `json:"newest"`
}

// APIFailed is the answer of GET /api/failed: the groups /failed shows,
// the failed runs they hold, and whether there may be more (Capped).
type APIFailed struct {
	Groups []APIFailedGroup `json:"groups"`
	Total  int64            `json:"total"`
	Capped bool             `json:"capped"`
}

// APIAction is the answer of an action: which, on what run, who the
// timeline records asked and why, and what the engine did (its Moved,
// ReplayedFrom, CancelledRun, SignalSent or Started).
type APIAction struct {
	Action string `json:"action"`
	RunID  string `json:"run_id"`
	Actor  string `json:"actor"`
	Reason string `json:"reason,omitempty"`
	Result any    `json:"result"`
}

// APIActionRequest is the JSON body of an action: why (all), the step a
// replay re-runs a stopped run from (replay, optional), the signal and
// its payload (signal), the payload of a start (start).
type APIActionRequest struct {
	Reason  string          `json:"reason"`
	Step    string          `json:"step,omitempty"`
	Signal  string          `json:"signal,omitempty"`
	Payload json.RawMessage `json:"payload,omitempty"`
}

// routeAPI registers the API's routes on d's mux.
func (d *Dashboard) routeAPI() {
	d.mux.Handle("GET /api/runs", d.apiRead(d.apiRuns))
	d.mux.Handle("GET /api/runs/{id}", d.apiRead(d.apiRun))
	d.mux.Handle("GET /api/runs/{id}/timeline", d.apiRead(d.apiTimeline))
	d.mux.Handle("GET /api/failed", d.apiRead(d.apiFailed))
	d.mux.Handle("GET /api/fleet", d.apiRead(d.apiFleet))
	for name, do := range map[string]func(context.Context, string, actionRequest) (any, error){
		"replay": d.doReplay, "compensate": d.doCompensate, "cancel": d.doCancel, "signal": d.doSignal,
	} {
		d.mux.Handle("POST /api/runs/{id}/"+name, d.apiAction(func(w http.ResponseWriter, r *http.Request, req APIActionRequest) {
			d.apiRunAction(w, r, name, req, do)
		}))
	}
	d.mux.Handle("POST /api/flows/{flow}/start", d.apiAction(d.apiStart))
	d.mux.Handle("/api/", d.apiRead(func(w http.ResponseWriter, r *http.Request) {
		apiFail(w, http.StatusNotFound, "not_found", "no such API endpoint: "+r.Method+" "+r.URL.Path)
	}))
}

// apiJSON writes v as JSON with status.
func apiJSON(w http.ResponseWriter, status int, v any) {
	w.Header().Set("Content-Type", "application/json")
	w.WriteHeader(status)
	enc := json.NewEncoder(w)
	enc.SetEscapeHTML(true)
	_ = enc.Encode(v)
}

// apiFail answers an APIError.
func apiFail(w http.ResponseWriter, status int, code, msg string) {
	apiJSON(w, status, APIError{Error: msg, Code: code})
}

// apiGuard answers a request without the token (401), from an address
// refused for its wrong tokens (429) or from another site (403), and
// reports whether it may go on and whether it came with a bearer token.
func (d *Dashboard) apiGuard(w http.ResponseWriter, r *http.Request) (ok, bearer bool) {
	ok, bearer, wait := d.authenticated(w, r)
	switch {
	case wait > 0:
		w.Header().Set("Retry-After", strconv.Itoa(int((wait+time.Second-1)/time.Second)))
		apiFail(w, http.StatusTooManyRequests, "throttled", "too many wrong tokens from this address: try again later")
		return false, bearer
	case !ok && bearer:
		w.Header().Set("WWW-Authenticate", `Bearer realm="acemq-flow dashboard", error="invalid_token"`)
		apiFail(w, http.StatusUnauthorized, "unauthorized", "that token is not the dashboard's")
		return false, bearer
	case !ok:
		w.Header().Set("WWW-Authenticate", `Bearer realm="acemq-flow dashboard"`)
		apiFail(w, http.StatusUnauthorized, "unauthorized", "the API wants the dashboard's token: Authorization: Bearer <token>")
		return false, bearer
	case r.Header.Get("Sec-Fetch-Site") == "cross-site":
		apiFail(w, http.StatusForbidden, "forbidden", "a request from another site was refused")
		return false, bearer
	}
	return true, bearer
}

// apiRead guards a GET of the API.
func (d *Dashboard) apiRead(h http.HandlerFunc) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if ok, _ := d.apiGuard(w, r); ok {
			h(w, r)
		}
	})
}

// apiAction guards an action of the API: the token, an engine to act
// with, the CSRF token of a cookie-authenticated request; then it reads
// the JSON body (an empty body is an empty request).
func (d *Dashboard) apiAction(h func(http.ResponseWriter, *http.Request, APIActionRequest)) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		ok, bearer := d.apiGuard(w, r)
		if !ok {
			return
		}
		if !d.canAct() {
			apiFail(w, http.StatusForbidden, "read_only", "this dashboard is read-only")
			return
		}
		if !bearer && !d.apiCSRFValid(r) && (d.cfg.Token != "" || !jsonBody(r)) {
			// A browser signed in by cookie could be led by another page:
			// the page's CSRF token says it was this dashboard's. Without
			// a token, a JSON body says the same (a browser sends one to
			// another site only after a preflight, which is not answered).
			apiFail(w, http.StatusForbidden, "csrf", "a request signed in by cookie needs the page's CSRF token ("+csrfHeader+" header)")
			return
		}
		var req APIActionRequest
		dec := json.NewDecoder(http.MaxBytesReader(w, r.Body, maxAPIBody))
		dec.DisallowUnknownFields()
		if err := dec.Decode(&req); err != nil && !errors.Is(err, io.EOF) {
			apiFail(w, http.StatusBadRequest, "bad_request", "the body is not the action's JSON: "+err.Error())
			return
		}
		h(w, r, req)
	})
}

// apiCSRFValid: the request carries the signature of its CSRF cookie's
// nonce, in the X-CSRF-Token header or the csrf form field.
func (d *Dashboard) apiCSRFValid(r *http.Request) bool {
	c, err := r.Cookie(csrfCookie)
	if err != nil || c.Value == "" {
		return false
	}
	tok := r.Header.Get(csrfHeader)
	if tok == "" && strings.HasPrefix(r.Header.Get("Content-Type"), "application/x-www-form-urlencoded") {
		return d.csrfValid(r)
	}
	return tok != "" && equal(tok, d.sign(c.Value))
}

// runsQuery is the journal query and the search text of a runs list's
// parameters: flow, status (one, or several comma-separated), window (a
// duration back from now), q or search (the search box's text, see
// search), before or cursor (the page after a run started then), and
// limit (at most max; def when absent). It refuses, with errBadInput, a
// value that is none of these.
func runsQuery(q url.Values, now time.Time, def, most int) (journal.Query, string, error) {
	query := journal.Query{Flow: q.Get("flow"), Limit: def}
	if s := q.Get("status"); s != "" {
		for _, one := range strings.Split(s, ",") {
			st := journal.Status(strings.TrimSpace(one))
			if !st.Valid() {
				return query, "", fmt.Errorf("%w: no such status: %s", errBadInput, one)
			}
			query.Statuses = append(query.Statuses, st)
		}
	}
	if s := q.Get("window"); s != "" {
		win, err := time.ParseDuration(s)
		if err != nil || win <= 0 {
			return query, "", fmt.Errorf("%w: no such time window: %s", errBadInput, s)
		}
		query.Since = now.Add(-win)
	}
	if b := cmp.Or(q.Get("cursor"), q.Get("before")); b != "" {
		t, err := time.Parse(time.RFC3339Nano, b)
		if err != nil {
			return query, "", fmt.Errorf("%w: the cursor is not a time: %s", errBadInput, b)
		}
		query.Before = t
	}
	if s := q.Get("limit"); s != "" {
		n, err := strconv.Atoi(s)
		if err != nil || n < 1 || n > most {
			return query, "", fmt.Errorf("%w: limit %s: want 1 to %d", errBadInput, s, most)
		}
		query.Limit = n
	}
	return query, strings.TrimSpace(cmp.Or(q.Get("q"), q.Get("search"))), nil
}

// apiRuns is GET /api/runs: the runs list, searched as the runs page
// searches (search).
func (d *Dashboard) apiRuns(w http.ResponseWriter, r *http.Request) {
	query, text, err := runsQuery(r.URL.Query(), d.cfg.Now(), d.cfg.PageSize, MaxAPILimit)
	if err != nil {
		apiFail(w, http.StatusBadRequest, "bad_request", err.Error())
		return
	}
	runs, note, err := d.search(r.Context(), query, text)
	switch {
	case errors.Is(err, journal.ErrInvalidWhere):
		apiFail(w, http.StatusBadRequest, "bad_request", "the search is not an expression over a run: "+err.Error())
		return
	case err != nil:
		d.apiJournalFailed(w, r, err)
		return
	}
	out := APIRuns{Runs: d.redactRuns(runs), Note: note}
	if len(runs) == query.Limit {
		out.Next = runs[len(runs)-1].StartedAt.UTC().Format(time.RFC3339Nano)
	}
	apiJSON(w, http.StatusOK, out)
}

// redactRuns are runs with their inputs masked (redact), as the run page
// shows them.
func (d *Dashboard) redactRuns(runs []journal.Run) []journal.Run {
	out := make([]journal.Run, len(runs))
	for i, run := range runs {
		run.Input = d.redact(run.Flow, run.Input)
		out[i] = run
	}
	return out
}

// apiRun is GET /api/runs/{id}: the run, its input masked.
func (d *Dashboard) apiRun(w http.ResponseWriter, r *http.Request) {
	id := r.PathValue("id")
	run, err := d.journal.Run(r.Context(), id)
	if err != nil {
		d.apiRunFailed(w, r, id, err)
		return
	}
	run.Input = d.redact(run.Flow, run.Input)
	apiJSON(w, http.StatusOK, run)
}

// apiTimeline is GET /api/runs/{id}/timeline: the run's own events and
// its forks, read as the run page reads them.
func (d *Dashboard) apiTimeline(w http.ResponseWriter, r *http.Request) {
	id := r.PathValue("id")
	if _, err := d.journal.Run(r.Context(), id); err != nil {
		d.apiRunFailed(w, r, id, err)
		return
	}
	own, forks, err := timeline.Read(r.Context(), d.journal, id)
	if err != nil && !errors.Is(err, journal.ErrRunNotFound) {
		d.apiJournalFailed(w, r, err)
		return
	}
	if err := timeline.HandedOut(r.Context(), d.journal, id, forks); err != nil {
		d.apiJournalFailed(w, r, err)
		return
	}
	if own == nil {
		own = []journal.Event{}
	}
	if forks == nil {
		forks = []*timeline.Fork{}
	}
	apiJSON(w, http.StatusOK, APITimeline{RunID: id, Events: own, Forks: forks})
}

// apiFailed is GET /api/failed: the failed groups of a flow and window,
// as /failed computes them (failedGroups).
func (d *Dashboard) apiFailed(w http.ResponseWriter, r *http.Request) {
	rg, _, why, ok := d.rangeOf(r, "")
	if !ok {
		apiFail(w, http.StatusBadRequest, "bad_request", why)
		return
	}
	groups, total, capped, err := d.failedGroups(r.Context(), rg)
	if err != nil {
		d.apiJournalFailed(w, r, err)
		return
	}
	out := APIFailed{Groups: []APIFailedGroup{}, Total: total, Capped: capped}
	for _, g := range groups {
		out.Groups = append(out.Groups, APIFailedGroup{Key: g.Key, Flow: g.Flow, Step: g.Step, Pattern: g.Pattern, Example: g.Example,
			Runs: g.N, Oldest: g.Oldest, Newest: g.Newest})
	}
	apiJSON(w, http.StatusOK, out)
}

// apiRunAction is POST /api/runs/{id}/{replay,compensate,cancel,signal}:
// the action do, as the run page's form does it.
func (d *Dashboard) apiRunAction(w http.ResponseWriter, r *http.Request, name string, req APIActionRequest,
	do func(context.Context, string, actionRequest) (any, error)) {
	id := r.PathValue("id")
	if _, err := d.journal.Run(r.Context(), id); errors.Is(err, journal.ErrRunNotFound) {
		d.apiRunFailed(w, r, id, err)
		return
	}
	ctx, cancel := context.WithTimeout(r.Context(), d.cfg.ActionTimeout)
	defer cancel()
	res, err := do(ctx, id, actionRequest{Reason: req.Reason, Step: req.Step, Signal: req.Signal, Payload: req.Payload})
	if err != nil {
		d.log.Warn("dashboard api: run not "+name, "run_id", id, "error", err)
		apiFail(w, actionStatus(err), actionCode(err), err.Error())
		return
	}
	a := d.by(actionRequest{Reason: req.Reason})
	d.log.Info("dashboard api: "+name, "run_id", id, "actor", a.Actor, "remote", r.RemoteAddr)
	apiJSON(w, http.StatusOK, APIAction{Action: name, RunID: id, Actor: a.Actor, Reason: a.Reason, Result: res})
}

// apiStart is POST /api/flows/{flow}/start: a run of the flow on the
// body's payload.
func (d *Dashboard) apiStart(w http.ResponseWriter, r *http.Request, req APIActionRequest) {
	flow := r.PathValue("flow")
	if len(req.Payload) == 0 {
		apiFail(w, http.StatusBadRequest, "bad_request", `the body wants the run's payload: {"payload": {...}}`)
		return
	}
	ctx, cancel := context.WithTimeout(r.Context(), d.cfg.ActionTimeout)
	defer cancel()
	res, err := d.doStart(ctx, flow, req.Payload, req.Reason)
	if err != nil {
		d.log.Warn("dashboard api: run not started", "flow", flow, "error", err)
		apiFail(w, actionStatus(err), actionCode(err), err.Error())
		return
	}
	a := d.by(actionRequest{Reason: req.Reason})
	d.log.Info("dashboard api: started", "run_id", res.RunID, "flow", flow, "actor", a.Actor, "remote", r.RemoteAddr)
	apiJSON(w, http.StatusCreated, APIAction{Action: "start", RunID: res.RunID, Actor: a.Actor, Reason: a.Reason, Result: res})
}

// apiRunFailed answers a run the journal did not give.
func (d *Dashboard) apiRunFailed(w http.ResponseWriter, r *http.Request, id string, err error) {
	if errors.Is(err, journal.ErrRunNotFound) {
		apiFail(w, http.StatusNotFound, "not_found", "the journal has no run "+id)
		return
	}
	d.apiJournalFailed(w, r, err)
}

// apiJournalFailed answers a journal that did not answer.
func (d *Dashboard) apiJournalFailed(w http.ResponseWriter, r *http.Request, err error) {
	d.log.Error("dashboard api: journal query failed", "path", r.URL.Path, "error", err)
	apiFail(w, http.StatusBadGateway, "journal_unavailable", "the run journal did not answer: "+err.Error())
}

// actionCode is the APIError code of an action that failed.
func actionCode(err error) string {
	for _, c := range []struct {
		err  error
		code string
	}{
		{engine.ErrNotReplayable, "not_replayable"}, {engine.ErrNotCompensable, "not_compensable"}, {engine.ErrRunEnded, "run_ended"},
		{engine.ErrUnknownFlow, "unknown_flow"}, {engine.ErrInvalidPayload, "invalid_payload"}, {engine.ErrNoSuchWait, "no_such_wait"},
		{engine.ErrMessageNotFound, "message_not_found"}, {journal.ErrRunNotFound, "not_found"},
	} {
		if errors.Is(err, c.err) {
			return c.code
		}
	}
	switch actionStatus(err) {
	case http.StatusConflict:
		return "conflict"
	case http.StatusBadRequest:
		return "bad_request"
	case http.StatusNotFound:
		return "not_found"
	default:
		return "engine_error"
	}
}
