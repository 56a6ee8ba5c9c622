package dashboard

import (
	"context"
	"strings"

	"github.com/acemq/acemq-flow/engine/journal"
)

// exprSigns are what make a search box's text an expression rather than
// error text.
var exprSigns = []string{"==", "!=", ">", "<", " in ", "startsWith", "payload.", "payload["}

// search answers the runs list's search box, by its rules:
//
//   - "id:abc" finds runs whose id begins with abc;
//   - "key:order-42" finds runs with that business key (dsl.Key);
//   - text with ==, !=, <, >, in, startsWith or payload. in it is a where
//     expression (journal.ParseWhere), as runs list --where takes;
//   - anything else is text in the run's error, without case.
//
// It says, in note, when the answer may be partial (a where expression
// the journal could not evaluate whole, matched here on the newest
// journal.MaxScan runs), and refuses, with journal.ErrInvalidWhere, an
// expression that does not compile.
func (d *Dashboard) search(ctx context.Context, q journal.Query, text string) (runs []journal.Run, note string, err error) {
	var w *journal.Where
	switch {
	case text == "":
	case strings.HasPrefix(text, "id:"):
		q.IDPrefix = strings.TrimSpace(strings.TrimPrefix(text, "id:"))
	case strings.HasPrefix(text, "key:"):
		q.BusinessKey = strings.TrimSpace(strings.TrimPrefix(text, "key:"))
	case looksLikeExpr(text):
		if w, err = journal.ParseWhere(text); err != nil {
			return nil, "", err
		}
	default:
		q.ErrorContains = text
	}
	found, err := journal.Find(ctx, d.journal, q, w)
	if err != nil {
		return nil, "", err
	}
	if found.Partial {
		note = "Matched on the newest runs the journal selected only: narrow the flow or the time window to see older matches."
	}
	return found.Runs, note, nil
}

func looksLikeExpr(text string) bool {
	for _, s := range exprSigns {
		if strings.Contains(text, s) {
			return true
		}
	}
	return false
}
