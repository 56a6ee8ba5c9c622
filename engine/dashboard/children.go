package dashboard

import (
	"context"
	"errors"
	"fmt"

	"github.com/acemq/acemq-flow/engine/journal"
	"github.com/acemq/acemq-flow/engine/timeline"
)

// maxChildren is how many of its child runs a run page lists, with their
// status: a ForEach of a Child step has one per item, each linked from
// its branch's steps anyway.
const maxChildren = 20

// childLink is a run linked from another's page: a child run it started
// (by Step, in Status), or its parent (whose Step started it).
type childLink struct {
	Run    string
	Step   string
	Status journal.Status
}

// children are the child runs the run's steps started (its own, then its
// branches'), the first maxChildren with their status as the journal has
// it ("" when it has not recorded the child yet), and how many it started
// in all.
func (d *Dashboard) children(ctx context.Context, own []journal.Event, forks []*timeline.Fork) ([]childLink, int, error) {
	var out []childLink
	started := 0
	add := func(events []journal.Event) {
		for _, e := range events {
			run, ok := timeline.Child(e)
			if !ok {
				continue
			}
			started++
			if len(out) < maxChildren {
				out = append(out, childLink{Run: run, Step: e.Step})
			}
		}
	}
	add(own)
	for _, f := range forks {
		for _, b := range f.All() {
			add(b.Steps)
		}
	}
	for i := range out {
		run, err := d.journal.Run(ctx, out[i].Run)
		switch {
		case errors.Is(err, journal.ErrRunNotFound):
		case err != nil:
			return nil, 0, fmt.Errorf("child run %s: %w", out[i].Run, err)
		default:
			out[i].Status = run.Status
		}
	}
	return out, started, nil
}
