package main

import (
	"encoding/json"
	"fmt"
	"io"
	"strconv"
	"text/tabwriter"
	"time"
)

// row is one scenario's result.
type row struct {
	Scenario int    `json:"scenario"`
	Name     string `json:"name"`
	// Sent counts the runs started; Completed those the journal shows
	// ended as they should (completed, or compensated for the saga).
	Sent      int `json:"sent"`
	Completed int `json:"completed"`
	// Lost counts runs that never ended and whose message is in no queue.
	Lost int `json:"lost"`
	// Deployed says the scenario replaced its workers with another version
	// of its flow; Stranded then counts the runs the journal still shows
	// running or waiting, or with a message left in a queue of the flow's
	// (an old step's among them), once every worker stopped.
	Deployed bool `json:"deployed,omitempty"`
	Stranded int  `json:"stranded"`
	// DuplicateDeliveries is the node's count of messages delivered again
	// after the connection or channel they were delivered on died unacked.
	DuplicateDeliveries int64 `json:"duplicate_deliveries"`
	// DoubleEffects counts steps' effects applied once too often.
	DoubleEffects int `json:"double_effects"`
	// Joins counts the joins that fired (a Parallel's or a ForEach's,
	// once per run each); JoinsTwice the firings beyond the first of one.
	Joins      int `json:"joins"`
	JoinsTwice int `json:"joins_fired_twice"`
	// Signals counts the runs sent a signal (a flow with a WaitFor);
	// LostSignals those that did not go on past their wait with the
	// signal they were sent.
	Signals     int `json:"signals"`
	LostSignals int `json:"lost_signals"`
	// Limit is the concurrency limit per key of the flow's limited step
	// (0: it has none); MostInStep the most runs of one key seen in that
	// step at once, across every worker.
	Limit      int      `json:"limit"`
	MostInStep int      `json:"most_in_step"`
	Seconds    float64  `json:"seconds"`
	OK         bool     `json:"ok"`
	Notes      []string `json:"notes,omitempty"`
}

// clean says the row's counts are those of a scenario that passed: every
// run sent completed, none lost or stranded, no effect applied and no join
// fired twice, no signal lost and no limit exceeded.
func (r row) clean() bool {
	return r.Sent > 0 && r.Completed == r.Sent && r.Lost == 0 && r.Stranded == 0 && r.DoubleEffects == 0 && r.JoinsTwice == 0 &&
		r.LostSignals == 0 && r.MostInStep <= r.Limit
}

// report prints rows as a table with each scenario's notes under it, or
// as one JSON document.
func report(w io.Writer, format string, rows []row) error {
	if format == "json" {
		enc := json.NewEncoder(w)
		enc.SetIndent("", "  ")
		return enc.Encode(rows)
	}
	tw := tabwriter.NewWriter(w, 0, 0, 2, ' ', 0)
	fmt.Fprintln(tw, "scenario\tsent\tcompleted\tlost\tduplicate deliveries\tjoins fired twice\tlost signals\tmost in limited step\tstranded\tdouble effects\ttime\tresult")
	for _, r := range rows {
		result := "ok"
		if !r.OK {
			result = "FAILED"
		}
		// A flow without forks has no join to fire twice.
		joins := "-"
		if r.Joins > 0 {
			joins = strconv.Itoa(r.JoinsTwice)
		}
		// Nor one without a WaitFor a signal to lose, nor one without a
		// limited step a limit.
		lostSignals, most := "-", "-"
		if r.Signals > 0 {
			lostSignals = strconv.Itoa(r.LostSignals)
		}
		if r.Limit > 0 {
			most = fmt.Sprintf("%d (limit %d)", r.MostInStep, r.Limit)
		}
		// Nor one that deployed no other version of its flow a stranded
		// run (a run left unfinished is "unfinished" in its notes).
		stranded := "-"
		if r.Deployed {
			stranded = strconv.Itoa(r.Stranded)
		}
		fmt.Fprintf(tw, "%d. %s\t%d\t%d\t%d\t%d\t%s\t%s\t%s\t%s\t%d\t%s\t%s\n", r.Scenario, r.Name, r.Sent, r.Completed, r.Lost,
			r.DuplicateDeliveries, joins, lostSignals, most, stranded, r.DoubleEffects,
			time.Duration(r.Seconds*float64(time.Second)).Round(100*time.Millisecond), result)
	}
	if err := tw.Flush(); err != nil {
		return err
	}
	for _, r := range rows {
		for _, n := range r.Notes {
			if _, err := fmt.Fprintf(w, "  %d: %s\n", r.Scenario, n); err != nil {
				return err
			}
		}
	}
	return nil
}
