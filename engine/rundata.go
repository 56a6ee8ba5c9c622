package engine

import (
	"context"
	"encoding/base64"
	"fmt"
	"slices"

	"github.com/acemq/acemq-flow/patterns"
)

// The most a run's headers carry of what its compensable steps returned:
// headers travel in one AMQP frame (frame_max, 131072 bytes by default)
// beside every other header of the message, so a result larger than
// inlineResult, or one that would take the run state past inlineState, is
// kept in the journal (journal.DataStore) instead, and the header carries
// a reference to it.
const (
	inlineResult = 4 << 10
	inlineState  = 32 << 10
)

// spill keeps the newest entry of st (the step that just completed where
// at says: delivery.at) in the journal when it is too large to travel: it returns
// the state to carry, with a reference in that entry's place, and what to
// put in the journal before the state is sent. Without a journal that
// keeps data, st travels whole, and a run state too large for a frame is a
// hop the broker refuses: the step is then given up and compensated.
func (e *Engine) spill(runID, at string, st runState) (runState, []spill) {
	n := len(st.Compensate)
	if e.data == nil || n == 0 {
		return st, nil
	}
	last := st.Compensate[n-1]
	if last.size() <= inlineResult && stateSize(st) <= inlineState {
		return st, nil
	}
	key := fmt.Sprintf("compensate/%s/%s", at, last.Step)
	carried := runState{Compensate: append(slices.Clip(st.Compensate[:n-1]), compEntry{Step: last.Step, Ref: key})}
	return carried, []spill{{key: key, data: last.inline()}}
}

// stateSize is about how many bytes st takes as its header's JSON.
func stateSize(st runState) int {
	n := len(`{"compensate":[]}`)
	for _, c := range st.Compensate {
		n += len(`{"step":"","data":""},`) + len(c.Step) + len(c.Data) + base64.StdEncoding.EncodedLen(len(c.Data64)) + len(c.Ref)
	}
	return n
}

// putSpills keeps what a hop's run state refers to in the journal, before
// the hop is sent. Putting the same data again is harmless, so a
// redelivery that carries the hop out again puts it again.
func (e *Engine) putSpills(ctx context.Context, runID string, spills []spill) error {
	if len(spills) == 0 {
		return nil
	}
	if e.data == nil {
		return fmt.Errorf("keep %d compensation payloads of run %s: the journal (%T) keeps no data", len(spills), runID, e.journal)
	}
	ctx, cancel := context.WithTimeout(ctx, patterns.DefaultStoreTimeout)
	defer cancel()
	for _, s := range spills {
		if err := e.data.PutData(ctx, runID, s.key, s.data); err != nil {
			return fmt.Errorf("keep a compensation payload of run %s: %w", runID, err)
		}
	}
	return nil
}
