package dashboard

import (
	"bytes"
	"cmp"
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"net/url"
	"slices"
	"strings"
	"time"

	"github.com/acemq/acemq-flow/broker"
	"github.com/acemq/acemq-flow/engine"
	"github.com/acemq/acemq-flow/engine/journal"
	"github.com/acemq/acemq-flow/engine/timeline"
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
	// Note says the search's answer may be partial (see search).
	Note string
}

// runs is the runs list.
func (d *Dashboard) runs(w http.ResponseWriter, r *http.Request) {
	q := r.URL.Query()
	p := runsPage{Flow: q.Get("flow"), Status: q.Get("status"), Window: q.Get("window"), Q: strings.TrimSpace(q.Get("q")),
		Statuses: journal.Statuses(), Windows: windows, Flows: d.flowNames()}
	if p.Flow != "" && !slices.Contains(p.Flows, p.Flow) {
		p.Flows = append(p.Flows, p.Flow)
	}
	query := journal.Query{Flow: p.Flow, Limit: d.cfg.PageSize}
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
	runs, note, err := d.search(r.Context(), query, p.Q)
	switch {
	case errors.Is(err, journal.ErrInvalidWhere):
		d.fail(w, r, http.StatusBadRequest, "The search is not an expression over a run: "+err.Error())
		return
	case err != nil:
		d.journalFailed(w, r, err)
		return
	}
	p.Runs, p.Note = runs, note
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
func (d *Dashboard) flowNames() []string {
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
func (d *Dashboard) journalFailed(w http.ResponseWriter, r *http.Request, err error) {
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
	Run journal.Run
	// Input is the run's input, indented, its secrets masked (redact).
	Input string
	Steps []stepState
	// Events are the run's own events (its forks' branches have theirs
	// in Forks), long runs of alike ones shortened unless the address
	// asks for the whole timeline (timeline=all): Shortened says some
	// were, Whole is the address that shows them all.
	Events    []journal.Event
	Shortened bool
	Whole     string
	Forks     []forkView
	// Parent is the run whose Child step started this one (nil for a run
	// that is nobody's child); Children the child runs it started, the
	// first maxChildren of them, of Started in all.
	Parent   *childLink
	Children []childLink
	Started  int
	// Flash says what the last action did; Error why it did not.
	Flash, Error  string
	CanReplay     bool
	CanCompensate bool
	// CanCancel offers to cancel a run that has not ended; Signal is the
	// WaitFor a waiting run waits at, whose signal the page offers to send
	// ("" for none), and SignalUntil when the wait times out.
	CanCancel   bool
	Signal      string
	SignalUntil *time.Time
	// Why says why a failed run cannot be replayed here.
	Why string
	// ReplayFrom are the steps a stopped run (completed, ended, failed,
	// compensated) can be re-run from here (engine.ReplayFrom): those of
	// its flow's current route whose input the journal kept; TooLarge
	// those it reached whose input was too large to keep.
	ReplayFrom []string
	TooLarge   []string
}

// flashes are the messages an action's redirect can ask for: fixed texts,
// so that the address cannot make the page say anything else.
var flashes = map[string]string{
	"replayed":     "Replayed: the run's message went back to the step that gave it up, with a fresh retry budget.",
	"compensating": "Sent to be compensated: a worker of the flow starts the compensations of the steps it had completed.",
	"cancelled":    "Cancelled: no further step of it starts, and what it completed is being compensated.",
	"signalled":    "Signal sent: the run goes on with it (or takes it when it reaches its wait).",
	"started":      "Started: the run's first message is on its way.",
	"replayed-from": "Replayed from the step chosen: it runs again on the input it had there, on the flow's current version, " +
		"and so does every step after it. Nothing was compensated first.",
}

// run is one run's page.
func (d *Dashboard) run(w http.ResponseWriter, r *http.Request) {
	p, status, ok := d.runPage(w, r)
	if !ok {
		return
	}
	p.Flash = flashes[r.URL.Query().Get("done")]
	d.showRun(w, r, status, p)
}

// runPage reads what the run page shows; on failure it has answered.
func (d *Dashboard) runPage(w http.ResponseWriter, r *http.Request) (runPage, int, bool) {
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
	fq, why := parseForkQuery(r.URL.Query())
	if why != "" {
		d.fail(w, r, http.StatusBadRequest, why)
		return runPage{}, 0, false
	}
	// The timeline is read and grouped with the branches' events brief
	// (where the journal can); only a page of each fork's branches is
	// read whole and rendered.
	own, forks, err := timeline.Read(r.Context(), d.journal, id)
	if err != nil && !errors.Is(err, journal.ErrRunNotFound) {
		d.journalFailed(w, r, err)
		return runPage{}, 0, false
	}
	if err := timeline.HandedOut(r.Context(), d.journal, id, forks); err != nil {
		d.journalFailed(w, r, err)
		return runPage{}, 0, false
	}
	p := runPage{Run: run, Input: pretty(d.redact(run.Flow, run.Input)), Forks: forkViews(id, forks, fq, d.cfg.PageSize)}
	if err := timeline.Fill(r.Context(), d.journal, id, forks); err != nil {
		d.journalFailed(w, r, err)
		return runPage{}, 0, false
	}
	if parent, step, ok := timeline.Parent(own); ok {
		p.Parent = &childLink{Run: parent, Step: step}
	}
	if p.Children, p.Started, err = d.children(r.Context(), own, forks); err != nil {
		d.journalFailed(w, r, err)
		return runPage{}, 0, false
	}
	var info *engine.FlowInfo
	if d.eng != nil {
		if fi, err := d.eng.Flow(run.Flow); err == nil {
			info = &fi
		}
	}
	p.Steps = steps(run, own, info)
	p.Events = own
	if r.URL.Query().Get("timeline") != "all" {
		p.Events = timeline.Shorten(own)
		p.Shortened = len(p.Events) < len(own)
		p.Whole = "/runs/" + url.PathEscape(id) + "?timeline=all"
	}
	if !run.Status.Stopped() && info != nil && d.canAct() {
		p.CanCancel = true
		if run.Status == journal.Waiting && slices.ContainsFunc(info.Steps, func(s engine.StepInfo) bool { return s.Name == run.Step && s.Wait != nil }) {
			p.Signal, p.SignalUntil = run.Step, run.DueAt
		}
	}
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
	if info != nil && d.canAct() && engine.ReplayableFrom(run.Status) {
		steps, err := d.eng.ReplaySteps(r.Context(), id)
		if err != nil {
			d.journalFailed(w, r, err)
			return runPage{}, 0, false
		}
		for _, s := range steps {
			if s.Kept {
				p.ReplayFrom = append(p.ReplayFrom, s.Step)
			} else {
				p.TooLarge = append(p.TooLarge, s.Step)
			}
		}
	}
	return p, http.StatusOK, true
}

func (d *Dashboard) showRun(w http.ResponseWriter, r *http.Request, status int, p runPage) {
	refresh := 0
	if !p.Run.Status.Stopped() {
		// A moving run is watched: its page comes again until it stops.
		refresh = 2
	}
	d.render(w, r, status, "run", view{Nav: "runs", Title: "Run " + p.Run.ID, Refresh: refresh, Page: p})
}

// steps is the run's flow, step by step, with how the run fared at each
// by its own events (a fork's branches are shown with the fork): the
// flow's steps when the engine knows it (not those on a branch), else
// those the events name.
func steps(run journal.Run, events []journal.Event, info *engine.FlowInfo) []stepState {
	var names []string
	if info != nil {
		for _, s := range info.Steps {
			if s.OnFork == "" {
				names = append(names, s.Name)
			}
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

type failedPage struct {
	Groups []group
	// Total is the failed runs grouped; Capped says there may be more.
	Total  int64
	Capped bool
	Max    int
	// Replaying is the address of the group replay running, if any.
	Replaying string
	// Flow and Window are the filters, Flows and Windows what the form
	// offers.
	Flow, Window string
	Flows        []string
	Windows      []struct{ Value, Label string }
}

// failed groups failed runs (see failedGroups), of the page's flow and
// time window (the whole journal unless it asks).
func (d *Dashboard) failed(w http.ResponseWriter, r *http.Request) {
	rg, window, why, ok := d.rangeOf(r, "")
	if !ok {
		d.fail(w, r, http.StatusBadRequest, why)
		return
	}
	groups, total, capped, err := d.failedGroups(r.Context(), rg)
	if err != nil {
		d.journalFailed(w, r, err)
		return
	}
	p := failedPage{Groups: groups, Total: total, Capped: capped, Max: d.cfg.MaxGroupReplay, Flow: rg.Flow, Window: window,
		Flows: d.flowNames(), Windows: append([]struct{ Value, Label string }{{"", "any time"}}, chartWindows...)}
	if p.Flow != "" && !slices.Contains(p.Flows, p.Flow) {
		p.Flows = append(p.Flows, p.Flow)
	}
	if gr := d.replays.current(); gr != nil {
		p.Replaying = "/failed/replay/" + url.PathEscape(gr.ID)
	}
	d.render(w, r, http.StatusOK, "failed", view{Nav: "failed", Title: "Failed runs", Page: p})
}

type confirmPage struct {
	Group group
	// Runs are those the replay will take, oldest first.
	Runs []journal.Run
}

// replayGroup shows what replaying a group will do (how many runs, which)
// and, once confirmed, starts replaying exactly those runs in the
// background, in one pass over their dead-letter queue, and sends the
// browser to the replay's page (GET: reloading it replays nothing again).
// While one group replay runs, another is not started: the browser is
// sent to the one running.
func (d *Dashboard) replayGroup(w http.ResponseWriter, r *http.Request) {
	key := r.PostFormValue("group")
	g, take, err := d.findGroup(r.Context(), key)
	if err != nil {
		d.journalFailed(w, r, err)
		return
	}
	if r.PostFormValue("confirm") == "" {
		if g == nil {
			d.fail(w, r, http.StatusNotFound, "That group has no failed runs any more.")
			return
		}
		d.render(w, r, http.StatusOK, "confirm", view{Nav: "failed", Title: "Replay a group", Page: confirmPage{Group: *g, Runs: take}})
		return
	}
	ids := r.PostForm["run"]
	switch {
	case len(ids) > d.cfg.MaxGroupReplay:
		d.fail(w, r, http.StatusBadRequest, "More runs than one group replay takes.")
		return
	case len(ids) == 0:
		d.fail(w, r, http.StatusBadRequest, "No runs to replay.")
		return
	}
	var asked group
	if g != nil {
		asked = *g
	}
	gr, started, err := d.replays.start(d.eng, asked, ids, d.cfg.GroupReplayTimeout, d.groupReplayed)
	if err != nil {
		d.fail(w, r, http.StatusServiceUnavailable, "The dashboard is shutting down: replay the group once it is back.")
		return
	}
	to := "/failed/replay/" + url.PathEscape(gr.ID)
	if started {
		d.log.Info("dashboard: group replay started", "flow", asked.Flow, "step", asked.Step, "pattern", asked.Pattern,
			"runs", len(ids), "replay", gr.ID, "remote", r.RemoteAddr)
	} else {
		to += "?busy=1"
	}
	http.Redirect(w, r, to, http.StatusSeeOther)
}

// groupReplayed logs what a group replay came to.
func (d *Dashboard) groupReplayed(gr *groupReplay) {
	c, res, err, _, _ := gr.snapshot()
	args := []any{"flow", gr.Group.Flow, "step", gr.Group.Step, "pattern", gr.Group.Pattern, "replay", gr.ID,
		"asked", len(gr.Runs), "replayed", c.Replayed, "not_found", c.NotFound, "not_failed", c.NotFailed, "interrupted", res.Interrupted}
	if err != nil {
		d.log.Warn("dashboard: group replay failed", append(args, "error", err)...)
		return
	}
	d.log.Info("dashboard: group replayed", args...)
}

// replayRow is one run of a group replay's result.
type replayRow struct {
	RunID string
	// Outcome is "replayed", "not-found", "not-failed" or "not-reached".
	Outcome string
	// From is the dead-letter queue it was in, To the step queue it went
	// back to (replayed runs of a group the page knew).
	From, To string
}

type groupReplayPage struct {
	ID    string
	Group group
	Asked int
	// Counts are the counts so far (all of them once Done).
	Counts  replayCounts
	Done    bool
	Started time.Time
	Ended   time.Time
	// Busy says the browser asked for another replay while this one ran.
	Busy        bool
	Interrupted bool
	Error       string
	Rows        []replayRow
}

// groupReplayPage shows a group replay: its progress while it runs (the
// page comes again every second), what it came to once done.
func (d *Dashboard) groupReplayPage(w http.ResponseWriter, r *http.Request) {
	gr, ok := d.replays.get(r.PathValue("id"))
	if !ok {
		d.fail(w, r, http.StatusNotFound, fmt.Sprintf("No such group replay: the dashboard keeps the last %d, until it restarts.", keptReplays))
		return
	}
	c, res, err, ended, done := gr.snapshot()
	p := groupReplayPage{ID: gr.ID, Group: gr.Group, Asked: len(gr.Runs), Counts: c, Done: done, Started: gr.Started,
		Ended: ended, Busy: r.URL.Query().Get("busy") != ""}
	if !done {
		d.render(w, r, http.StatusOK, "replaying", view{Nav: "failed", Title: "Replaying a group", Refresh: 1, Page: p})
		return
	}
	p.Interrupted = res.Interrupted
	if err != nil {
		p.Error = err.Error()
	}
	outcome := map[string]string{}
	for _, id := range res.Replayed {
		outcome[id] = "replayed"
	}
	for _, id := range res.NotFound {
		outcome[id] = "not-found"
	}
	for _, id := range res.NotFailed {
		outcome[id] = "not-failed"
	}
	from := map[string]string{}
	for _, run := range gr.Group.Runs {
		from[run.ID] = run.DeadLetter
	}
	for _, id := range gr.Runs {
		row := replayRow{RunID: id, Outcome: cmp.Or(outcome[id], "not-reached")}
		if row.Outcome == "replayed" && from[id] != "" {
			row.From, row.To = from[id], strings.TrimSuffix(from[id], broker.DeadLetterSuffix)
		}
		p.Rows = append(p.Rows, row)
	}
	d.render(w, r, http.StatusOK, "results", view{Nav: "failed", Title: "Group replayed", Page: p})
}
