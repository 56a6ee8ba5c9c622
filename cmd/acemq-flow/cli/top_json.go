package cli

import (
	"context"
	"math"
	"time"

	"github.com/spf13/cobra"

	"github.com/acemq/acemq-flow/engine/fleet"
)

// topDocument is what top -o json prints: the endpoints and whether each
// answered, the rows top shows (a flow's, then its steps'), and the fleet
// (null without a broker or a database to read it from).
type topDocument struct {
	At         time.Time     `json:"at"`
	Endpoints  []topEndpoint `json:"endpoints"`
	Rows       []topRow      `json:"rows"`
	Fleet      *fleet.View   `json:"fleet"`
	FleetError string        `json:"fleet_error,omitempty"`
}

// topEndpoint is a metrics endpoint: up when it answered, else why not.
type topEndpoint struct {
	URL   string `json:"url"`
	Up    bool   `json:"up"`
	Error string `json:"error,omitempty"`
}

// topRow is a row of top: a flow (no step) or a step. A figure top does
// not know is null.
type topRow struct {
	Flow string `json:"flow"`
	Step string `json:"step,omitempty"`
	// PerSecond is runs leaving the flow, or the step's completions, per
	// second; FailedPerSecond the failed ones.
	PerSecond       *float64 `json:"per_second"`
	FailedPerSecond *float64 `json:"failed_per_second"`
	InFlight        float64  `json:"in_flight"`
	P50             *float64 `json:"p50_seconds"`
	P99             *float64 `json:"p99_seconds"`
	Queue           *float64 `json:"queue"`
	DeadLetters     float64  `json:"dead_letters"`
}

// known is v, or nil when it is unknown (NaN).
func known(v float64) *float64 {
	if math.IsNaN(v) {
		return nil
	}
	return &v
}

// topJSON reads the endpoints and the fleet twice, m's interval apart, so
// that the rates are over that interval, and prints what top would show
// as one JSON document.
func topJSON(ctx context.Context, cmd *cobra.Command, m *topModel) error {
	m.record(m.scrapeAll().(scrapedMsg), time.Now())
	select {
	case <-ctx.Done():
		return ctx.Err()
	case <-time.After(m.interval):
	}
	m.record(m.scrapeAll().(scrapedMsg), time.Now())
	doc := topDocument{At: m.refreshed, Endpoints: make([]topEndpoint, len(m.sources)), Rows: []topRow{}, Fleet: m.view}
	for i, src := range m.sources {
		doc.Endpoints[i] = topEndpoint{URL: src, Up: m.errs[i] == nil}
		if m.errs[i] != nil {
			doc.Endpoints[i].Error = m.errs[i].Error()
		}
	}
	if m.viewErr != nil {
		doc.FleetError = m.viewErr.Error()
	}
	for _, r := range sortRows(m.rows, sortName, false) {
		doc.Rows = append(doc.Rows, topRow{Flow: r.flow, Step: r.step, PerSecond: known(r.rate), FailedPerSecond: known(r.failRate),
			InFlight: r.inFlight, P50: known(r.p50), P99: known(r.p99), Queue: known(r.queue), DeadLetters: r.dlq})
	}
	return writeJSON(cmd.OutOrStdout(), doc)
}
