package timeline

import (
	"context"
	"errors"
	"fmt"

	"github.com/acemq/acemq-flow/engine/journal"
)

// HandedOut asks j, when it keeps joins (journal.JoinStore), where each
// fork's join stands: it sets the fork's State, counts the branches handed
// out from it (those whose events are still to come too) and takes its
// Total when the timeline did not say. A fork whose join j does not have,
// or a journal that keeps none, keeps the count of its branches with
// events. It fails only when j does not answer.
func HandedOut(ctx context.Context, j journal.Journal, runID string, forks []*Fork) error {
	js, ok := j.(journal.JoinStore)
	if !ok {
		return nil
	}
	for _, f := range forks {
		st, err := js.JoinStatus(ctx, runID, f.Join)
		switch {
		case errors.Is(err, journal.ErrJoinNotFound):
			continue
		case err != nil:
			return fmt.Errorf("join of fork %s: %w", f.Step, err)
		}
		// What resumes the run once joined is no reader's business.
		st.Parent = nil
		f.State = &st
		f.HandedOut = max(st.Dispatched, f.HandedOut)
		if f.Total == 0 {
			f.Total = st.Total
		}
	}
	return nil
}
