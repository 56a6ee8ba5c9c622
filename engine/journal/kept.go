package journal

import (
	"context"
	"errors"
	"fmt"
)

// Kept is what a unit of work that must happen once (a step, a
// compensation) leaves under its key in the idempotency store, written by
// the Writer in the commit of a batch of events: the result the unit
// produced, for a redelivery to carry out again instead of doing the work
// again (patterns.ResultStore's Complete), or, Confirmed, that the result
// was carried out and recorded, so that the key is a duplicate from now on
// and nothing is kept (patterns.Confirmer's Confirm).
type Kept struct {
	// Key is the unit's key in the idempotency store.
	Key string
	// Result is what the unit produced, to keep (nil: nothing, with
	// Confirmed).
	Result []byte
	// Confirmed says the key's work was carried out and recorded with the
	// batch: its result is dropped. A Keeper that cannot write the batch
	// in one commit keeps Result first, records the events, and confirms
	// last.
	Confirmed bool
}

// ErrNoKeeper: the Writer was asked to keep a unit's result and was given
// no Keeper.
var ErrNoKeeper = errors.New("journal writer: no keeper for units' results")

// Keeper writes a batch of a journal's events together with what units of
// work keep under their keys, in one commit when it can: an idempotency
// store on the journal's database (persistence.SQLIdempotencyStore beside a
// persistence.SQLJournal) writes both in one statement, so that a step's
// result and the record of what it came to are durable together or not at
// all.
type Keeper interface {
	// RecordKept records events in j and writes kept: in one commit, or
	// else the results first, then the events, then the confirmations,
	// so that stopping half way loses nothing (a redelivery finds a result
	// kept and carries it out, recording its events again). A key kept
	// twice in kept ends as the later says. When it returns an error, any
	// part may have been written: every part is safe to write again.
	RecordKept(ctx context.Context, j Journal, events []Event, kept []Kept) error
}

// Keep queues events to be recorded and k to be written by the writer's
// Keeper with them, in one batch, and waits until they, and everything
// queued before them, are written, bounded by ctx. It refuses a writer
// without a Keeper (ErrNoKeeper) and an empty key.
func (w *Writer) Keep(ctx context.Context, k Kept, events ...Event) error {
	if w.cfg.Keeper == nil {
		return ErrNoKeeper
	}
	if k.Key == "" {
		return fmt.Errorf("journal writer: keep: %w: empty key", ErrInvalidEvent)
	}
	if err := w.queueItem(ctx, item{events: events, kept: []Kept{k}}); err != nil {
		return err
	}
	return w.Flush(ctx)
}

// Confirm queues the confirmation of key (Kept.Confirmed) and returns: it
// is written with the next batch that has something else to write, or on
// its own after 20 ms, after everything queued before it. It
// refuses a writer without a Keeper (ErrNoKeeper), and returns
// ErrWriterClosed once Close has begun.
func (w *Writer) Confirm(ctx context.Context, key string) error {
	if w.cfg.Keeper == nil {
		return ErrNoKeeper
	}
	if key == "" {
		return fmt.Errorf("journal writer: confirm: %w: empty key", ErrInvalidEvent)
	}
	return w.queueItem(ctx, item{kept: []Kept{{Key: key, Confirmed: true}}, lazy: true})
}
