package journal

import (
	"context"
	"errors"
	"fmt"
	"strings"
)

// ErrAmbiguousID: a shortened run id begins the ids of several runs.
var ErrAmbiguousID = errors.New("ambiguous run id")

// resolveShown is how many of the runs an ambiguous id begins Resolve
// names: enough to pick from, few enough to read.
const resolveShown = 5

// Resolve finds the run a person means by id: the run with that id, or
// else the one run whose id begins with it (a run id shortened, as
// `acemq-flow dev` prints them). It refuses, with an error matching
// ErrRunNotFound, an id that is neither (and the empty id), and, with one
// matching ErrAmbiguousID, an id that begins the ids of several runs and
// is none of them, naming up to five. It costs one RunsByIDPrefix: a full
// id comes first among the ids it begins.
func Resolve(ctx context.Context, j Journal, id string) (Run, error) {
	if id == "" {
		return Run{}, fmt.Errorf("%w: %q", ErrRunNotFound, id)
	}
	runs, err := j.RunsByIDPrefix(ctx, id, resolveShown+1)
	switch {
	case err != nil:
		return Run{}, fmt.Errorf("look up run %q: %w", id, err)
	case len(runs) == 0:
		return Run{}, fmt.Errorf("%w: %q", ErrRunNotFound, id)
	case runs[0].ID == id || len(runs) == 1:
		return runs[0], nil
	}
	ids := make([]string, 0, resolveShown)
	for _, r := range runs[:min(len(runs), resolveShown)] {
		ids = append(ids, r.ID)
	}
	how := fmt.Sprintf("%d runs:", len(runs))
	if len(runs) > resolveShown {
		how = fmt.Sprintf("more than %d runs, among them", resolveShown)
	}
	return Run{}, fmt.Errorf("%w: %q begins the ids of %s %s (give more of the id)", ErrAmbiguousID, id, how, strings.Join(ids, ", "))
}
