package dashboard

import (
	"cmp"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"net/url"
	"strings"

	"github.com/acemq/acemq-flow/engine"
	"github.com/acemq/acemq-flow/engine/journal"
)

// DefaultActor is who the timeline says asked for an action taken from
// the dashboard when its Config names no TokenName.
const DefaultActor = "dashboard"

// actionRequest is what an action on a run is asked, from a form or the
// API's JSON: why, the step of a replay from a step, the signal and its
// payload.
type actionRequest struct {
	Reason  string
	Step    string
	Signal  string
	Payload json.RawMessage
}

// actor is who the timeline says took an action from this dashboard.
func (d *Dashboard) actor() string { return cmp.Or(strings.TrimSpace(d.cfg.TokenName), DefaultActor) }

// by is the engine.Action of req, taken from this dashboard.
func (d *Dashboard) by(req actionRequest) engine.Action {
	return engine.Action{Actor: d.actor(), Reason: strings.TrimSpace(req.Reason)}
}

// doReplay replays a failed run, or re-runs a stopped one from req.Step
// when it names one: what the run page's forms and the API's replay do.
func (d *Dashboard) doReplay(ctx context.Context, id string, req actionRequest) (any, error) {
	if req.Step != "" {
		return d.eng.ReplayFrom(ctx, id, engine.ReplayFromRequest{Step: req.Step, Reason: strings.TrimSpace(req.Reason), Actor: d.actor()})
	}
	return d.eng.ReplayWith(ctx, id, d.by(req))
}

// doCompensate compensates a failed run now.
func (d *Dashboard) doCompensate(ctx context.Context, id string, req actionRequest) (any, error) {
	return d.eng.CompensateWith(ctx, id, d.by(req))
}

// doCancel cancels a run that has not ended.
func (d *Dashboard) doCancel(ctx context.Context, id string, req actionRequest) (any, error) {
	a := d.by(req)
	return d.eng.CancelRun(ctx, id, engine.CancelRequest{Reason: a.Reason, Actor: a.Actor})
}

// doSignal sends a run the signal req names with its JSON payload.
func (d *Dashboard) doSignal(ctx context.Context, id string, req actionRequest) (any, error) {
	if strings.TrimSpace(req.Signal) == "" {
		return nil, fmt.Errorf("%w: name the signal to send", errBadInput)
	}
	payload := json.RawMessage(strings.TrimSpace(string(req.Payload)))
	if len(payload) == 0 {
		payload = json.RawMessage(`{}`)
	}
	if !json.Valid(payload) {
		return nil, fmt.Errorf("%w: the payload is not JSON", engine.ErrInvalidPayload)
	}
	return d.eng.SignalWith(ctx, id, req.Signal, payload, d.by(req))
}

// doStart starts a run of flow on payload (JSON).
func (d *Dashboard) doStart(ctx context.Context, flow string, payload json.RawMessage, reason string) (engine.Started, error) {
	payload = json.RawMessage(strings.TrimSpace(string(payload)))
	if !json.Valid(payload) {
		return engine.Started{Flow: flow}, fmt.Errorf("%w: the payload is not JSON", engine.ErrInvalidPayload)
	}
	return d.eng.Start(ctx, flow, payload, engine.StartedBy(engine.Action{Actor: d.actor(), Reason: strings.TrimSpace(reason)}))
}

// formRequest is the actionRequest of an action's form.
func formRequest(r *http.Request) actionRequest {
	return actionRequest{Reason: r.PostFormValue("reason"), Step: r.PostFormValue("step"), Signal: r.PostFormValue("signal"),
		Payload: json.RawMessage(r.PostFormValue("payload"))}
}

// confirmed is do once the form's confirmation is ticked: a form sent
// without it is refused with errNotConfirmed.
func confirmed(r *http.Request, what string, do func(context.Context, string, actionRequest) (any, error)) func(context.Context, string) (any, error) {
	return func(ctx context.Context, id string) (any, error) {
		if r.PostFormValue("confirm") == "" {
			return nil, fmt.Errorf("not %s: %w", what, errNotConfirmed)
		}
		return do(ctx, id, formRequest(r))
	}
}

// replay replays one failed run, once its confirmation is ticked, then
// shows it.
func (d *Dashboard) replay(w http.ResponseWriter, r *http.Request) {
	act(d, w, r, "replayed", confirmed(r, "replayed", func(ctx context.Context, id string, req actionRequest) (any, error) {
		req.Step = ""
		return d.doReplay(ctx, id, req)
	}))
}

// replayFrom re-runs a stopped run from the step the form chose, once its
// confirmation is ticked.
func (d *Dashboard) replayFrom(w http.ResponseWriter, r *http.Request) {
	act(d, w, r, "replayed-from", confirmed(r, "replayed", func(ctx context.Context, id string, req actionRequest) (any, error) {
		if req.Step == "" {
			return nil, fmt.Errorf("%w: choose the step to replay from", errBadInput)
		}
		return d.doReplay(ctx, id, req)
	}))
}

// compensate compensates one failed run now, once its confirmation is
// ticked, then shows it.
func (d *Dashboard) compensate(w http.ResponseWriter, r *http.Request) {
	act(d, w, r, "compensating", confirmed(r, "compensated", d.doCompensate))
}

// cancelRun cancels a run that has not ended, once the form's
// confirmation is ticked, with its reason.
func (d *Dashboard) cancelRun(w http.ResponseWriter, r *http.Request) {
	act(d, w, r, "cancelled", confirmed(r, "cancelled", d.doCancel))
}

// signal sends a waiting run the signal of its wait, with the form's JSON
// payload, once its confirmation is ticked.
func (d *Dashboard) signal(w http.ResponseWriter, r *http.Request) {
	act(d, w, r, "signalled", confirmed(r, "signalled", d.doSignal))
}

// errNotConfirmed: an action's form sent without its confirmation ticked.
var errNotConfirmed = errors.New("tick the confirmation first")

// errBadInput: an action asked with something missing or malformed.
var errBadInput = errors.New("bad input")

// act does what an action's form asks to run id, then shows the run: with
// done's flash after a redirect, or the error and its status.
func act(d *Dashboard, w http.ResponseWriter, r *http.Request, done string, do func(context.Context, string) (any, error)) {
	id := r.PathValue("id")
	ctx, cancel := context.WithTimeout(r.Context(), d.cfg.ActionTimeout)
	defer cancel()
	res, err := do(ctx, id)
	if err == nil {
		d.log.Info("dashboard: run "+done, "run_id", id, "actor", d.actor(), "result", fmt.Sprintf("%+v", res), "remote", r.RemoteAddr)
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

// actionStatus is the HTTP status of an action that failed.
func actionStatus(err error) int {
	switch {
	case errors.Is(err, engine.ErrNotReplayable), errors.Is(err, engine.ErrNotCompensable), errors.Is(err, engine.ErrRunEnded),
		errors.Is(err, engine.ErrSignalTaken), errors.Is(err, engine.ErrSignalTimedOut), errors.Is(err, engine.ErrRunInFlight):
		return http.StatusConflict
	case errors.Is(err, engine.ErrInvalidPayload), errors.Is(err, engine.ErrNoSuchWait), errors.Is(err, errNotConfirmed),
		errors.Is(err, errBadInput), errors.Is(err, engine.ErrUnknownStep), errors.Is(err, engine.ErrBranchStep):
		return http.StatusBadRequest
	case errors.Is(err, engine.ErrStepNotReached), errors.Is(err, engine.ErrInputNotKept):
		return http.StatusConflict
	case errors.Is(err, engine.ErrMessageNotFound), errors.Is(err, engine.ErrUnknownFlow), errors.Is(err, journal.ErrRunNotFound):
		return http.StatusNotFound
	default:
		return http.StatusBadGateway
	}
}
