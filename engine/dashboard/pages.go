package dashboard

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"net/http"
	"net/url"
	"slices"
	"strings"
	"time"

	"github.com/acemq/acemq-flow/broker"
	"github.com/acemq/acemq-flow/engine"
	"github.com/acemq/acemq-flow/engine/journal"
)

// windows are the runs list's time windows, as offered.
var windows = []struct{ Value, Label string }{
	{"15m", "last 15 minutes"}, {"1h", "last hour"}, {"6h", "last 6 hours"},
	{"24h", "last 24 hours"}, {"168h", "last 7 days"}, {"", "any time"},
}

type runsPage struct {
	Flow, Status, Window, Q string
	Flows                   []string
	Statuses                []journal.Status
	Windows                 []struct{ Value, Label string }
	Runs                    []journal.Run
	// Older is the address of the next page ("" on the last); Newest the
	// first page's while paging.
	Older, Newest string
	Paging        bool
}

// runs is the runs list.
func (d *dash) runs(w http.ResponseWriter, r *http.Request) {
	q := r.URL.Query()
	p := runsPage{Flow: q.Get("flow"), Status: q.Get("status"), Window: q.Get("window"), Q: strings.TrimSpace(q.Get("q")),
		Statuses: journal.Statuses(), Windows: windows, Flows: d.flowNames()}
	if p.Flow != "" && !slices.Contains(p.Flows, p.Flow) {
		p.Flows = append(p.Flows, p.Flow)
	}
	query := journal.Query{Flow: p.Flow, ErrorContains: p.Q, Limit: d.cfg.PageSize}
	if p.Status != "" {
		st := journal.Status(p.Status)
		if !st.Valid() {
			d.fail(w, r, http.StatusBadRequest, "No such status: "+p.Status+".")
			return
		}
		query.Statuses = []journal.Status{st}
	}
	if p.Window != "" {
		win, err := time.ParseDuration(p.Window)
		if err != nil || win <= 0 {
			d.fail(w, r, http.StatusBadRequest, "No such time window: "+p.Window+".")
			return
		}
		query.Since = d.cfg.Now().Add(-win)
	}
	if b := q.Get("before"); b != "" {
		t, err := time.Parse(time.RFC3339Nano, b)
		if err != nil {
			d.fail(w, r, http.StatusBadRequest, "The page to show is not a time: "+b+".")
			return
		}
		query.Before, p.Paging = t, true
	}
	runs, err := d.journal.Runs(r.Context(), query)
	if err != nil {
		d.journalFailed(w, r, err)
		return
	}
	p.Runs = runs
	link := func(before time.Time) string {
		v := url.Values{}
		for k, s := range map[string]string{"flow": p.Flow, "status": p.Status, "window": p.Window, "q": p.Q} {
			if s != "" {
				v.Set(k, s)
			}
		}
		if !before.IsZero() {
			v.Set("before", before.UTC().Format(time.RFC3339Nano))
		}
		if len(v) == 0 {
			return "/"
		}
		return "/?" + v.Encode()
	}
	if len(runs) == d.cfg.PageSize {
		p.Older = link(runs[len(runs)-1].StartedAt)
	}
	p.Newest = link(time.Time{})
	d.render(w, r, http.StatusOK, "runs", view{Nav: "runs", Title: "Runs", Page: p})
}

// flowNames are the engine's flows, for the filter.
func (d *dash) flowNames() []string {
	if d.eng == nil {
		return nil
	}
	var out []string
	for _, f := range d.eng.Flows() {
		out = append(out, f.Name)
	}
	slices.Sort(out)
	return out
}

// journalFailed answers a journal that did not answer.
func (d *dash) journalFailed(w http.ResponseWriter, r *http.Request, err error) {
	d.log.Error("dashboard: journal query failed", "path", r.URL.Path, "error", err)
	d.fail(w, r, http.StatusBadGateway, "The run journal did not answer: "+err.Error())
}

// stepState is one step of a run's flow and how the run fared there.
type stepState struct {
	Name string
	// State is the last outcome recorded for the step ("" when the run did
	// not reach it).
	State   string
	Current bool
}

type runPage struct {
	Run    journal.Run
	Input  string
	Steps  []stepState
	Events []journal.Event
	// Flash says what the last action did; Error why it did not.
	Flash, Error  string
	CanReplay     bool
	CanCompensate bool
	// Why says why a failed run cannot be replayed here.
	Why string
}

// flashes are the messages an action's redirect can ask for: fixed texts,
// so that the address cannot make the page say anything else.
var flashes = map[string]string{
	"replayed":     "Replayed: the run's message went back to the step that gave it up, with a fresh retry budget.",
	"compensating": "Sent to be compensated: a worker of the flow starts the compensations of the steps it had completed.",
}

// run is one run's page.
func (d *dash) run(w http.ResponseWriter, r *http.Request) {
	p, status, ok := d.runPage(w, r)
	if !ok {
		return
	}
	p.Flash = flashes[r.URL.Query().Get("done")]
	d.showRun(w, r, status, p)
}

// runPage reads what the run page shows; on failure it has answered.
func (d *dash) runPage(w http.ResponseWriter, r *http.Request) (runPage, int, bool) {
	id := r.PathValue("id")
	run, err := d.journal.Run(r.Context(), id)
	if errors.Is(err, journal.ErrRunNotFound) {
		d.fail(w, r, http.StatusNotFound, "The journal has no run "+id+".")
		return runPage{}, 0, false
	}
	if err != nil {
		d.journalFailed(w, r, err)
		return runPage{}, 0, false
	}
	events, err := d.journal.Timeline(r.Context(), id)
	if err != nil && !errors.Is(err, journal.ErrRunNotFound) {
		d.journalFailed(w, r, err)
		return runPage{}, 0, false
	}
	p := runPage{Run: run, Events: events, Input: pretty(run.Input)}
	var info *engine.FlowInfo
	if d.eng != nil {
		if fi, err := d.eng.Flow(run.Flow); err == nil {
			info = &fi
		}
	}
	p.Steps = steps(run, events, info)
	if run.Status == journal.Failed {
		switch {
		case !d.canAct():
			p.Why = "This dashboard is read-only."
		case info == nil:
			p.Why = "This dashboard's engine does not know the flow " + run.Flow + "."
		case strings.HasSuffix(run.DeadLetter, broker.ParkedSuffix):
			p.Why = "Its message was parked in " + run.DeadLetter + ": it could not be read, and replaying it cannot help."
		default:
			p.CanReplay = true
		}
		p.CanCompensate = info != nil && d.canAct() && slices.ContainsFunc(info.Steps, func(s engine.StepInfo) bool { return s.Compensation != "" })
	}
	return p, http.StatusOK, true
}

func (d *dash) showRun(w http.ResponseWriter, r *http.Request, status int, p runPage) {
	refresh := 0
	if !p.Run.Status.Stopped() {
		// A moving run is watched: its page comes again until it stops.
		refresh = 2
	}
	d.render(w, r, status, "run", view{Nav: "runs", Title: "Run " + p.Run.ID, Refresh: refresh, Page: p})
}

// steps is the run's flow, step by step, with how the run fared at each:
// the flow's steps when the engine knows it, else those the timeline
// names.
func steps(run journal.Run, events []journal.Event, info *engine.FlowInfo) []stepState {
	var names []string
	if info != nil {
		for _, s := range info.Steps {
			names = append(names, s.Name)
		}
	}
	state := map[string]string{}
	for _, e := range events {
		switch e.Kind {
		case journal.KindStep, journal.KindSkip, journal.KindHandOff, journal.KindDelay:
			state[e.Step] = e.Outcome
		case journal.KindCompensation:
			if e.Step != "" {
				state[e.Step] = "compensation " + e.Outcome
			}
		default:
			continue
		}
		if e.Step != "" && !slices.Contains(names, e.Step) {
			names = append(names, e.Step)
		}
	}
	out := make([]stepState, len(names))
	for i, n := range names {
		out[i] = stepState{Name: n, State: state[n], Current: n == run.Step}
	}
	return out
}

// pretty indents a JSON input; anything else is shown as it is.
func pretty(raw json.RawMessage) string {
	if len(raw) == 0 {
		return ""
	}
	var b bytes.Buffer
	if err := json.Indent(&b, raw, "", "  "); err != nil {
		return string(raw)
	}
	return b.String()
}

// replay replays one failed run, then shows it.
func (d *dash) replay(w http.ResponseWriter, r *http.Request) {
	d.act(w, r, "replayed", func(ctx context.Context, id string) (engine.Moved, error) { return d.eng.Replay(ctx, id) })
}

// compensate compensates one failed run now, then shows it.
func (d *dash) compensate(w http.ResponseWriter, r *http.Request) {
	d.act(w, r, "compensating", func(ctx context.Context, id string) (engine.Moved, error) { return d.eng.Compensate(ctx, id) })
}

func (d *dash) act(w http.ResponseWriter, r *http.Request, done string, do func(context.Context, string) (engine.Moved, error)) {
	id := r.PathValue("id")
	ctx, cancel := context.WithTimeout(r.Context(), d.cfg.ActionTimeout)
	defer cancel()
	moved, err := do(ctx, id)
	if err == nil {
		d.log.Info("dashboard: run "+done, "run_id", id, "flow", moved.Flow, "from", moved.From, "to", moved.To, "remote", r.RemoteAddr)
		http.Redirect(w, r, "/runs/"+url.PathEscape(id)+"?done="+done, http.StatusSeeOther)
		return
	}
	d.log.Warn("dashboard: run not "+done, "run_id", id, "error", err)
	p, _, ok := d.runPage(w, r)
	if !ok {
		return
	}
	p.Error = err.Error()
	d.showRun(w, r, actionStatus(err), p)
}

// actionStatus is the HTTP status of a replay or compensation that failed.
func actionStatus(err error) int {
	switch {
	case errors.Is(err, engine.ErrNotReplayable), errors.Is(err, engine.ErrNotCompensable):
		return http.StatusConflict
	case errors.Is(err, engine.ErrMessageNotFound), errors.Is(err, engine.ErrUnknownFlow):
		return http.StatusNotFound
	default:
		return http.StatusBadGateway
	}
}

type failedPage struct {
	Groups []group
	// Total is the failed runs grouped; Capped says there may be more.
	Total  int
	Capped bool
	Max    int
}

// failed groups failed runs.
func (d *dash) failed(w http.ResponseWriter, r *http.Request) {
	runs, capped, err := d.failedRuns(r.Context())
	if err != nil {
		d.journalFailed(w, r, err)
		return
	}
	p := failedPage{Groups: groupFailed(runs), Total: len(runs), Capped: capped, Max: d.cfg.MaxGroupReplay}
	d.render(w, r, http.StatusOK, "failed", view{Nav: "failed", Title: "Failed runs", Page: p})
}

func (d *dash) failedRuns(ctx context.Context) ([]journal.Run, bool, error) {
	runs, err := d.journal.Runs(ctx, journal.Query{Statuses: []journal.Status{journal.Failed}, Limit: d.cfg.MaxFailed})
	return runs, len(runs) == d.cfg.MaxFailed, err
}

type confirmPage struct {
	Group group
	// Runs are those the replay will take, oldest first.
	Runs []journal.Run
}

type replayResult struct {
	RunID string
	Moved engine.Moved
	Error string
}

type resultsPage struct {
	Group   group
	Results []replayResult
	OK      int
}

// replayGroup shows what replaying a group will do (how many runs, which)
// and, once confirmed, replays exactly those runs, one after the other.
func (d *dash) replayGroup(w http.ResponseWriter, r *http.Request) {
	key := r.PostFormValue("group")
	runs, _, err := d.failedRuns(r.Context())
	if err != nil {
		d.journalFailed(w, r, err)
		return
	}
	var g *group
	for _, c := range groupFailed(runs) {
		if c.Key == key {
			g = &c
			break
		}
	}
	if r.PostFormValue("confirm") == "" {
		if g == nil {
			d.fail(w, r, http.StatusNotFound, "That group has no failed runs any more.")
			return
		}
		take := slices.Clone(g.Runs)
		slices.Reverse(take)
		if len(take) > d.cfg.MaxGroupReplay {
			take = take[:d.cfg.MaxGroupReplay]
		}
		d.render(w, r, http.StatusOK, "confirm", view{Nav: "failed", Title: "Replay a group", Page: confirmPage{Group: *g, Runs: take}})
		return
	}
	ids := r.PostForm["run"]
	if len(ids) > d.cfg.MaxGroupReplay {
		d.fail(w, r, http.StatusBadRequest, "More runs than one group replay takes.")
		return
	}
	p := resultsPage{}
	if g != nil {
		p.Group = *g
	}
	for _, id := range ids {
		ctx, cancel := context.WithTimeout(r.Context(), d.cfg.ActionTimeout)
		moved, err := d.eng.Replay(ctx, id)
		cancel()
		res := replayResult{RunID: id, Moved: moved}
		if err != nil {
			res.Error = err.Error()
		} else {
			p.OK++
		}
		p.Results = append(p.Results, res)
	}
	d.log.Info("dashboard: group replayed", "flow", p.Group.Flow, "step", p.Group.Step, "pattern", p.Group.Pattern,
		"replayed", p.OK, "refused", len(ids)-p.OK, "remote", r.RemoteAddr)
	d.render(w, r, http.StatusOK, "results", view{Nav: "failed", Title: "Group replayed", Page: p})
}
