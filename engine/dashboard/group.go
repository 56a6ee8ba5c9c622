package dashboard

import (
	"cmp"
	"crypto/sha256"
	"encoding/hex"
	"regexp"
	"slices"
	"strings"
	"time"

	"github.com/acemq/acemq-flow/engine/journal"
)

// maxPattern bounds a group's error pattern: the start of an error says
// what it is; a stack trace's tail would split groups for nothing.
const maxPattern = 300

var (
	reUUID   = regexp.MustCompile(`[0-9a-fA-F]{8}-[0-9a-fA-F]{4}-[0-9a-fA-F]{4}-[0-9a-fA-F]{4}-[0-9a-fA-F]{12}`)
	reIDWord = regexp.MustCompile(`[A-Za-z0-9_.\-]*[0-9][A-Za-z0-9_.\-]*`)
	reNumber = regexp.MustCompile(`[0-9]+(?:\.[0-9]+)?`)
	reSpace  = regexp.MustCompile(`\s+`)
)

// normalize is the pattern of an error text that runs of one cause share:
// UUIDs and long words with digits in them (ids, hashes, queue names of a
// test) become <id>, other numbers <n>, and runs of white space one space.
func normalize(err string) string {
	s := reUUID.ReplaceAllString(err, "<id>")
	s = reIDWord.ReplaceAllStringFunc(s, func(w string) string {
		if len(w) >= 8 {
			return "<id>"
		}
		return reNumber.ReplaceAllString(w, "<n>")
	})
	s = strings.TrimSpace(reSpace.ReplaceAllString(s, " "))
	if len(s) > maxPattern {
		s = strings.ToValidUTF8(s[:maxPattern], "") + "…"
	}
	return s
}

// group is failed runs of one flow, given up at one step, for errors of
// one pattern.
type group struct {
	Key     string
	Flow    string
	Step    string
	Pattern string
	// Example is the newest run's error as it was.
	Example string
	// Runs are the group's runs, newest first.
	Runs   []journal.Run
	Oldest time.Time
	Newest time.Time
}

// Count is how many runs the group holds.
func (g group) Count() int { return len(g.Runs) }

// groupKey identifies a group in a form: short, and the same for the same
// flow, step and pattern.
func groupKey(flow, step, pattern string) string {
	h := sha256.Sum256([]byte(flow + "\x00" + step + "\x00" + pattern))
	return hex.EncodeToString(h[:8])
}

// groupFailed groups runs (newest first) by flow, step and error pattern:
// the biggest group first, then the one that failed last.
func groupFailed(runs []journal.Run) []group {
	idx := map[string]int{}
	var out []group
	for _, r := range runs {
		p := normalize(r.Error)
		k := groupKey(r.Flow, r.Step, p)
		i, ok := idx[k]
		if !ok {
			i = len(out)
			idx[k] = i
			out = append(out, group{Key: k, Flow: r.Flow, Step: r.Step, Pattern: p, Example: r.Error, Oldest: failedAt(r), Newest: failedAt(r)})
		}
		g := &out[i]
		g.Runs = append(g.Runs, r)
		if at := failedAt(r); at.Before(g.Oldest) {
			g.Oldest = at
		} else if at.After(g.Newest) {
			g.Newest = at
		}
	}
	slices.SortStableFunc(out, func(a, b group) int {
		if c := cmp.Compare(len(b.Runs), len(a.Runs)); c != 0 {
			return c
		}
		return b.Newest.Compare(a.Newest)
	})
	return out
}

// failedAt is when a failed run stopped.
func failedAt(r journal.Run) time.Time {
	if r.EndedAt != nil {
		return *r.EndedAt
	}
	return r.UpdatedAt
}
