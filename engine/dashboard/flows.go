package dashboard

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"net/url"

	"github.com/acemq/acemq-flow/engine"
)

type flowsPage struct {
	Flows []engine.FlowInfo
}

// flowsList lists the engine's flows, each linking to its page.
func (d *Dashboard) flowsList(w http.ResponseWriter, r *http.Request) {
	var p flowsPage
	if d.eng != nil {
		p.Flows = d.eng.Flows()
	}
	d.render(w, r, http.StatusOK, "flows", view{Nav: "flows", Title: "Flows", Page: p})
}

type flowPage struct {
	Flow engine.FlowInfo
	// Payload is what the start form holds: the flow's example payload,
	// indented, or what was sent when the start failed.
	Payload string
	Reason  string
	Error   string
	CanAct  bool
}

// flowPage is a flow's page: its steps and, on a dashboard that acts, a
// form to start a run of it, prefilled with the flow's example payload.
func (d *Dashboard) flowPage(w http.ResponseWriter, r *http.Request) {
	p, ok := d.flowOf(w, r)
	if !ok {
		return
	}
	d.render(w, r, http.StatusOK, "flow", view{Nav: "flows", Title: "Flow " + p.Flow.Name, Page: p})
}

// flowOf is the page of the flow the address names; on failure it has
// answered.
func (d *Dashboard) flowOf(w http.ResponseWriter, r *http.Request) (flowPage, bool) {
	name := r.PathValue("flow")
	if d.eng == nil {
		d.fail(w, r, http.StatusNotFound, "This dashboard has no engine: it knows no flows, only their runs.")
		return flowPage{}, false
	}
	fi, err := d.eng.Flow(name)
	if err != nil {
		d.fail(w, r, http.StatusNotFound, "This dashboard's engine does not know the flow "+name+".")
		return flowPage{}, false
	}
	return flowPage{Flow: fi, Payload: pretty(fi.ExamplePayload), CanAct: d.canAct()}, true
}

// startRun starts a run of the flow on the form's payload once its
// confirmation is ticked, then shows the run; a start refused shows the
// flow's page again with the form as it was sent and why.
func (d *Dashboard) startRun(w http.ResponseWriter, r *http.Request) {
	p, ok := d.flowOf(w, r)
	if !ok {
		return
	}
	p.Payload, p.Reason = r.PostFormValue("payload"), r.PostFormValue("reason")
	ctx, cancel := context.WithTimeout(r.Context(), d.cfg.ActionTimeout)
	defer cancel()
	var (
		res engine.Started
		err = fmt.Errorf("not started: %w", errNotConfirmed)
	)
	if r.PostFormValue("confirm") != "" {
		res, err = d.doStart(ctx, p.Flow.Name, json.RawMessage(p.Payload), p.Reason)
	}
	if err != nil {
		d.log.Warn("dashboard: run not started", "flow", p.Flow.Name, "error", err)
		p.Error = err.Error()
		status := actionStatus(err)
		if errors.Is(err, engine.ErrUnknownFlow) {
			status = http.StatusNotFound
		}
		d.render(w, r, status, "flow", view{Nav: "flows", Title: "Flow " + p.Flow.Name, Page: p})
		return
	}
	d.log.Info("dashboard: run started", "flow", p.Flow.Name, "run_id", res.RunID, "actor", d.actor(), "remote", r.RemoteAddr)
	http.Redirect(w, r, "/runs/"+url.PathEscape(res.RunID)+"?done=started", http.StatusSeeOther)
}
