package journal

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"regexp"
	"slices"
	"strings"
	"time"
)

// ErrInvalidRange: an aggregate asked of a range that is not one (Until
// before Since, buckets of no width or too many of them).
var ErrInvalidRange = errors.New("invalid aggregate range")

// Range is what an aggregate counts: runs of Flow ("" every flow) whose
// time (their start for Totals and a bucket's Started, when they failed
// for a bucket's Failed and FailedGroups) is at or after Since and before
// Until (zero: unbounded).
type Range struct {
	Flow         string
	Since, Until time.Time
}

// Check refuses, with ErrInvalidRange, an Until before Since.
func (r Range) Check() error {
	if !r.Since.IsZero() && !r.Until.IsZero() && r.Until.Before(r.Since) {
		return fmt.Errorf("%w: until %s is before since %s", ErrInvalidRange, r.Until.Format(time.RFC3339), r.Since.Format(time.RFC3339))
	}
	return nil
}

// in reports whether t is in r.
func (r Range) in(t time.Time) bool {
	return (r.Since.IsZero() || !t.Before(r.Since)) && (r.Until.IsZero() || t.Before(r.Until))
}

// StatusCount is how many runs are in one status.
type StatusCount struct {
	Status Status `json:"status"`
	Runs   int64  `json:"runs"`
}

// Bucket is one bucket of a chart: the runs that started in [At,
// At+width) (the last bucket of a range ends at its Until) and those that
// failed then (see FailedStatus).
type Bucket struct {
	At      time.Time `json:"at"`
	Started int64     `json:"started"`
	Failed  int64     `json:"failed"`
}

// Chart is what a chart of a range shows: its buckets, oldest first, and
// the runs started in the range by status (what Totals answers of it),
// whose sum is the sum of the buckets' Started.
type Chart struct {
	Buckets []Bucket      `json:"buckets"`
	Totals  []StatusCount `json:"totals"`
}

// MaxBuckets is the most buckets Chart answers.
const MaxBuckets = 10_000

// FailedStatus reports whether a run in status s counts as failed in a
// chart: given up, and not replayed since (Failed, Compensating,
// Compensated, Unresolved). It failed at FailedAt.
func FailedStatus(s Status) bool {
	switch s {
	case Failed, Compensating, Compensated, Unresolved:
		return true
	}
	return false
}

// FailedAt is when a failed run stopped: its EndedAt, or its last change
// while compensating.
func FailedAt(r Run) time.Time {
	if r.EndedAt != nil {
		return *r.EndedAt
	}
	return r.UpdatedAt
}

// FailedGroup is the failed runs (status Failed) of one flow, given up at
// one step, with errors of one pattern (ErrorPattern).
type FailedGroup struct {
	Flow    string `json:"flow"`
	Step    string `json:"step"`
	Pattern string `json:"pattern"`
	// Example is the error of one of the group's runs, as it was.
	Example string `json:"example"`
	Runs    int64  `json:"runs"`
	// Oldest and Newest are when the group's first and last runs failed
	// (FailedAt).
	Oldest time.Time `json:"oldest"`
	Newest time.Time `json:"newest"`
}

// Key identifies the group in a form: short, and the same for the same
// flow, step and pattern.
func (g FailedGroup) Key() string { return GroupKey(g.Flow, g.Step, g.Pattern) }

// GroupKey is FailedGroup.Key of a flow, step and pattern.
func GroupKey(flow, step, pattern string) string {
	h := sha256.Sum256([]byte(flow + "\x00" + step + "\x00" + pattern))
	return hex.EncodeToString(h[:8])
}

// GroupRef names a failed group.
type GroupRef struct {
	Flow, Step, Pattern string
}

// Aggregator is a journal that counts over all its runs, not a page of
// them: the dashboard's totals, charts and failed groups. Both shipped
// journals implement it; the PostgreSQL one by GROUP BY statements that
// read indexes only.
type Aggregator interface {
	// Totals counts the runs started in r by status, every status listed
	// (zero counts too), in Statuses' order. It refuses a range that is
	// not one (ErrInvalidRange).
	Totals(ctx context.Context, r Range) ([]StatusCount, error)
	// Chart counts, per bucket of width from r.Since to r.Until (both
	// required), the runs of r.Flow started in it and the runs that failed
	// in it (FailedStatus, at FailedAt), every bucket listed, oldest
	// first; and the runs started in r by status, as Totals does, in the
	// same reading. It refuses a range without both ends, a width under a
	// second, and more than MaxBuckets buckets (ErrInvalidRange).
	Chart(ctx context.Context, r Range, width time.Duration) (Chart, error)
	// FailedGroups groups the runs in status Failed that failed in r by
	// flow, step and ErrorPattern, the biggest group first (then the one
	// that failed last, then by flow, step and pattern), at most limit
	// groups (DefaultLimit when 0 or less).
	FailedGroups(ctx context.Context, r Range, limit int) ([]FailedGroup, error)
	// FailedGroupRuns returns the runs of group g that failed in r
	// (g.Flow wins over r.Flow), the first to fail first, at most limit
	// (DefaultLimit when 0 or less).
	FailedGroupRuns(ctx context.Context, g GroupRef, r Range, limit int) ([]Run, error)
}

// MaxPattern bounds an error pattern (ErrorPattern), in bytes: the start
// of an error says what it is; a stack trace's tail would split groups for
// nothing.
const MaxPattern = 300

var (
	reUUID   = regexp.MustCompile(`[0-9a-fA-F]{8}-[0-9a-fA-F]{4}-[0-9a-fA-F]{4}-[0-9a-fA-F]{4}-[0-9a-fA-F]{12}`)
	reIDWord = regexp.MustCompile(`[A-Za-z0-9_.\-]*[0-9][A-Za-z0-9_.\-]*`)
	reNumber = regexp.MustCompile(`[0-9]+(?:\.[0-9]+)?`)
	reSpace  = regexp.MustCompile(`\s+`)
)

// ErrorPattern is the pattern of an error text that runs of one cause
// share: UUIDs and words of 8 bytes or more with a digit in them (ids,
// hashes, queue names of a test) become <id>, other numbers <n>, runs of
// white space one space, and the whole is cut at MaxPattern bytes (on a
// rune boundary, marked by "…"). Applied to a pattern it gives the
// pattern again.
func ErrorPattern(err string) string {
	s := reUUID.ReplaceAllString(err, "<id>")
	s = reIDWord.ReplaceAllStringFunc(s, func(w string) string {
		if len(w) >= 8 {
			return "<id>"
		}
		return reNumber.ReplaceAllString(w, "<n>")
	})
	s = strings.TrimSpace(reSpace.ReplaceAllString(s, " "))
	if len(s) > MaxPattern {
		s = strings.ToValidUTF8(s[:MaxPattern], "") + "…"
	}
	return s
}

// MergeGroups folds groups whose flow, step and ErrorPattern of their
// pattern are the same into one (counts added, the widest span), and
// sorts them as FailedGroups does: what a journal that groups by a
// pattern before its cut and trim answers.
func MergeGroups(groups []FailedGroup) []FailedGroup {
	idx := map[GroupRef]int{}
	out := make([]FailedGroup, 0, len(groups))
	for _, g := range groups {
		g.Pattern = ErrorPattern(g.Pattern)
		k := GroupRef{g.Flow, g.Step, g.Pattern}
		i, ok := idx[k]
		if !ok {
			idx[k] = len(out)
			out = append(out, g)
			continue
		}
		cur := &out[i]
		cur.Runs += g.Runs
		if g.Oldest.Before(cur.Oldest) {
			cur.Oldest = g.Oldest
		}
		if g.Newest.After(cur.Newest) {
			cur.Newest, cur.Example = g.Newest, g.Example
		}
	}
	SortGroups(out)
	return out
}

// SortGroups sorts groups the biggest first, then the one that failed
// last, then by flow, step and pattern.
func SortGroups(groups []FailedGroup) {
	slices.SortFunc(groups, func(a, b FailedGroup) int {
		switch {
		case a.Runs != b.Runs:
			if a.Runs > b.Runs {
				return -1
			}
			return 1
		case !a.Newest.Equal(b.Newest):
			return b.Newest.Compare(a.Newest)
		}
		return strings.Compare(a.Flow+"\x00"+a.Step+"\x00"+a.Pattern, b.Flow+"\x00"+b.Step+"\x00"+b.Pattern)
	})
}
