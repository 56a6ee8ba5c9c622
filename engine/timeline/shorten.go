package timeline

import (
	"fmt"

	"github.com/acemq/acemq-flow/engine/journal"
)

// Runs of alike events (of one kind, step and outcome) longer than
// longRun are shortened to their first keepHead and last keepTail, with
// an event saying how many are left out.
const (
	longRun  = 8
	keepHead = 3
	keepTail = 2
)

// Shorten shortens the runs of alike events (of one kind, step and
// outcome) in a timeline: more than 8 in a row become the first 3, an
// event whose Outcome says how many were left out ("… 99995 more
// compensated", its Key empty), and the last 2. events is not changed.
func Shorten(events []journal.Event) []journal.Event {
	alike := func(a, b journal.Event) bool { return a.Kind == b.Kind && a.Step == b.Step && a.Outcome == b.Outcome }
	var out []journal.Event
	for i := 0; i < len(events); {
		j := i + 1
		for j < len(events) && alike(events[i], events[j]) {
			j++
		}
		if j-i <= longRun {
			out = append(out, events[i:j]...)
		} else {
			out = append(out, events[i:i+keepHead]...)
			out = append(out, journal.Event{Kind: events[i].Kind, Step: events[i].Step,
				Outcome: fmt.Sprintf("… %d more %s", j-i-keepHead-keepTail, events[i].Outcome)})
			out = append(out, events[j-keepTail:j]...)
		}
		i = j
	}
	return out
}
