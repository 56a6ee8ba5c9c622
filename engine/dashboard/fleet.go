package dashboard

import (
	"net/http"
	"time"

	"github.com/acemq/acemq-flow/engine/fleet"
)

// fleetRefresh is how often the fleet page reloads itself, in seconds:
// about a worker's heartbeat interval.
const fleetRefresh = 5

type fleetPage struct {
	fleet.View
	// Broker says whether the dashboard can ask the broker for depths
	// (it has an engine).
	Broker bool
}

// fleetView reads the fleet (package fleet): the workers from the
// journal's reports, the depths from the engine's broker, the steps of
// the engine's flows and of those the workers report.
func (d *Dashboard) fleetView(r *http.Request) (fleet.View, error) {
	src := fleet.Source{Journal: d.journal, Now: d.cfg.Now}
	if d.eng != nil {
		src.Conn, src.Flows = d.eng.Conn(), d.eng.Flows()
	}
	return fleet.Read(r.Context(), src)
}

// fleet is /fleet: the workers, the steps' queues and the ladder.
func (d *Dashboard) fleet(w http.ResponseWriter, r *http.Request) {
	v, err := d.fleetView(r)
	if err != nil {
		// Only a request that ended gets here.
		d.fail(w, r, http.StatusServiceUnavailable, "The fleet was not read: "+err.Error())
		return
	}
	d.render(w, r, http.StatusOK, "fleet", view{Nav: "fleet", Title: "Fleet", Refresh: fleetRefresh, Page: fleetPage{View: v, Broker: d.eng != nil}})
}

// apiFleet is GET /api/fleet: the fleet.View /fleet shows.
func (d *Dashboard) apiFleet(w http.ResponseWriter, r *http.Request) {
	v, err := d.fleetView(r)
	if err != nil {
		apiFail(w, http.StatusServiceUnavailable, "unavailable", "the fleet was not read: "+err.Error())
		return
	}
	apiJSON(w, http.StatusOK, v)
}

// ago is how long before now t was, for a person: "4.2s".
func ago(now, t time.Time) string {
	if t.IsZero() || t.After(now) {
		return "0s"
	}
	return human(now.Sub(t))
}
