package cli

import (
	"context"
	"errors"

	"github.com/acemq/acemq-flow/engine/journal"
)

// runIDHelp tells, in the help of every command that takes a run id, that
// it may be shortened.
const runIDHelp = "<run-id> may be shortened to a beginning of it that no other run's id shares (dev prints the\n" +
	"first eight characters); an ambiguous one is refused, naming runs whose ids it begins."

// resolveRunID is the full id of the run a run id given on the command
// line means, as the journal knows it (journal.Resolve: the run with that
// id, or the one run whose id it begins), so that the engine, which takes
// full ids, is given one. An id the journal knows no run by is returned
// as it is: the engine then says it is not found, or, for a replay
// without a database, looks for the run's message by that id in the
// dead-letter queues. An id that begins several runs' ids, or a journal
// that cannot answer, is an error.
func (a *app) resolveRunID(ctx context.Context, j journal.Journal, id string) (string, error) {
	r, err := journal.Resolve(ctx, j, id)
	switch {
	case err == nil:
		return r.ID, nil
	case errors.Is(err, journal.ErrRunNotFound):
		return id, nil
	}
	return "", hintMigrate(a.name, err)
}
