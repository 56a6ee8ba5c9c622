package timeline

import (
	"cmp"
	"fmt"
	"slices"
	"strconv"
	"strings"

	"github.com/acemq/acemq-flow/engine/journal"
)

// A run that forks (a Parallel, a ForEach) has in its timeline, besides
// its own events, the events of every branch: a branch's steps are keyed
// "branch/<join>/<i>/...", its arrival back at the fork "arrived/<join>/<i>"
// (or, for all but the arrival that fired the join, under the branch's
// prefix too), and the compensation that undoes a stopped branch's own
// work "compensation/<replays>/<join>/<i>/...". <join> is the fork's join:
// "<replays>/<position>/<fork step>". The fork itself records "forked: N
// branches" or "forked: N items, M in flight" under its own step key, and
// the join fires under "join/<join>/...": both are the run's own events.

// The statuses of a branch.
const (
	// StatusArrived: it came back to its fork with its output.
	StatusArrived = "arrived"
	// StatusFailed: one of its steps was given up.
	StatusFailed = "failed"
	// StatusStopped: another branch's failure stopped it, or its own work
	// was undone.
	StatusStopped = "stopped"
	// StatusRunning: none of the above yet.
	StatusRunning = "running"
	// StatusUnresolved: undoing its own work was given up.
	StatusUnresolved = "unresolved"
)

// The kinds of fork.
const (
	KindParallel = "parallel"
	KindForEach  = "foreach"
)

// Fork is one fork of a run, its branches grouped from the timeline. Its
// JSON is what `runs show --output json` gives in "forks".
type Fork struct {
	// Step is the fork's step; Join the key its join is kept under.
	Step string `json:"step"`
	Join string `json:"join"`
	// Replay is the replay of the run the fork ran in (0 before any).
	Replay int `json:"replay"`
	// Kind is KindParallel or KindForEach ("" when the timeline does not
	// say).
	Kind string `json:"kind,omitempty"`
	// Total is how many branches (a Parallel's) or items (a ForEach's) the
	// fork has, and InFlight how many items of a ForEach it had in flight
	// at most: 0 when the timeline does not say.
	Total    int `json:"total"`
	InFlight int `json:"in_flight,omitempty"`
	// HandedOut is how many branches were sent on their way: from the
	// join when the journal keeps joins (HandedOut), else the branches the
	// timeline has events of.
	HandedOut int `json:"handed_out"`
	// Arrived, Failed (given up), Unresolved (given up, and what it did
	// could not be undone), Stopped (by another's failure) and Running
	// count the branches with events, by status.
	Arrived    int `json:"arrived"`
	Failed     int `json:"failed"`
	Unresolved int `json:"unresolved,omitempty"`
	Stopped    int `json:"stopped"`
	Running    int `json:"running"`
	// Branches are the branches shown (Show), by index.
	Branches []Branch `json:"branches"`
	// Hidden is how many branches with events are not in Branches.
	Hidden int `json:"hidden"`
	// Joined says the join fired: its event is among the run's own.
	Joined bool `json:"-"`
	// State is the join as the journal keeps it (HandedOut), nil when it
	// keeps none.
	State *journal.JoinStatus `json:"-"`

	all []Branch
	at  map[int]int
	// brief says the branches' events are brief (Read from a
	// journal.BriefTimeline) until Fill reads the shown ones whole.
	brief bool
}

// Branch is one branch of a fork (one item of a ForEach) and its events
// in timeline order.
type Branch struct {
	Branch int             `json:"branch"`
	Status string          `json:"status"`
	Steps  []journal.Event `json:"steps"`
}

// Seen is how many branches of the fork have events.
func (f *Fork) Seen() int { return len(f.all) }

// All returns every branch of the fork with events, by index. The slice
// is the fork's own: callers read it, never change it.
func (f *Fork) All() []Branch { return slices.Clip(f.all) }

// Find returns branch i of the fork, and whether it has events.
func (f *Fork) Find(i int) (Branch, bool) {
	k, ok := slices.BinarySearchFunc(f.all, i, func(b Branch, i int) int { return cmp.Compare(b.Branch, i) })
	if !ok {
		return Branch{}, false
	}
	return f.all[k], true
}

// Page returns at most n of the branches keep accepts (nil: every one),
// skipping the first from of them, and how many it accepts in all. A
// negative from counts as 0.
func (f *Fork) Page(from, n int, keep func(Branch) bool) (page []Branch, matched int) {
	from = max(from, 0)
	if keep == nil {
		lo, hi := min(from, len(f.all)), min(from+max(n, 0), len(f.all))
		return slices.Clone(f.all[lo:hi]), len(f.all)
	}
	for _, b := range f.all {
		if !keep(b) {
			continue
		}
		if matched >= from && len(page) < n {
			page = append(page, b)
		}
		matched++
	}
	return page, matched
}

// Show makes bs the branches shown (Branches, never nil) and counts the
// others with events in Hidden.
func (f *Fork) Show(bs []Branch) {
	f.Branches = append([]Branch{}, bs...)
	f.Hidden = len(f.all) - len(bs)
}

// branch returns the fork's branch i, adding it.
func (f *Fork) branch(i int) *Branch {
	if k, ok := f.at[i]; ok {
		return &f.all[k]
	}
	f.at[i] = len(f.all)
	f.all = append(f.all, Branch{Branch: i})
	return &f.all[len(f.all)-1]
}

// Group splits a run's timeline into the run's own events and its forks,
// each with its branches' events, branches in index order, forks in the
// order the timeline first names them. Every fork shows none of its
// branches until Show.
func Group(events []journal.Event) (own []journal.Event, forks []*Fork) {
	byJoin := map[string]*Fork{}
	fork := func(join string) *Fork {
		if f, ok := byJoin[join]; ok {
			return f
		}
		parts := strings.SplitN(join, "/", 3)
		f := &Fork{Join: join, Step: parts[2], at: map[int]int{}}
		f.Replay, _ = strconv.Atoi(parts[0])
		byJoin[join] = f
		forks = append(forks, f)
		return f
	}
	var joins []string
	for _, e := range events {
		if join, ok := forkEvent(e); ok {
			f := fork(join)
			f.Kind, f.Total, f.InFlight = forkShape(e.Outcome)
			own = append(own, e)
			continue
		}
		join, i, ok := branchKey(e.Key)
		if !ok {
			if join, ok := joinedKey(e.Key); ok {
				joins = append(joins, join)
			}
			own = append(own, e)
			continue
		}
		b := fork(join).branch(i)
		b.Steps = append(b.Steps, e)
	}
	for _, join := range joins {
		if f, ok := byJoin[join]; ok {
			f.Joined = true
		}
	}
	for _, f := range forks {
		f.settle()
	}
	return own, forks
}

// settle sorts the fork's branches, gives each its status and counts
// them.
func (f *Fork) settle() {
	slices.SortFunc(f.all, func(a, b Branch) int { return cmp.Compare(a.Branch, b.Branch) })
	f.at = nil
	for k := range f.all {
		b := &f.all[k]
		b.Status = branchStatus(b.Steps)
		switch b.Status {
		case StatusArrived:
			f.Arrived++
		case StatusFailed:
			f.Failed++
		case StatusUnresolved:
			f.Unresolved++
		case StatusStopped:
			f.Stopped++
		default:
			f.Running++
		}
		if f.Kind == "" && arrivalKey(b.Steps) {
			// No fork event: an item's arrival still says it is a ForEach.
			f.Kind = KindForEach
		}
	}
	f.HandedOut = len(f.all)
	f.Show(nil)
}

// forkEvent reports whether e is a fork taking its run in ("forked: ..."
// under its step key, step/<replays>/<position>/<attempt>), and the key of
// its join.
func forkEvent(e journal.Event) (string, bool) {
	if e.Kind != journal.KindStep || !strings.HasPrefix(e.Outcome, "forked: ") {
		return "", false
	}
	p := strings.Split(e.Key, "/")
	if len(p) != 4 || p[0] != "step" || !Digits(p[1]) || !Digits(p[2]) || e.Step == "" {
		return "", false
	}
	return p[1] + "/" + p[2] + "/" + e.Step, true
}

// forkShape reads a fork's outcome: "forked: N branches" (a Parallel) or
// "forked: N items, M in flight" (a ForEach).
func forkShape(outcome string) (kind string, total, inFlight int) {
	if _, err := fmt.Sscanf(outcome, "forked: %d items, %d in flight", &total, &inFlight); err == nil {
		return KindForEach, total, inFlight
	}
	if _, err := fmt.Sscanf(outcome, "forked: %d branches", &total); err == nil {
		return KindParallel, total, 0
	}
	return "", 0, 0
}

// branchKey says which fork's branch an event of that key belongs to: the
// key of the fork's join (a part of key) and the branch's index. It reads
// key in place: a timeline of 100,000 branches has some 200,000 keys.
func branchKey(key string) (string, int, bool) {
	head, rest, _ := strings.Cut(key, "/")
	switch head {
	case "branch":
		// branch/<replays>/<position>/<fork>/<i>/...
		join, branch, _, more, ok := joinIn(rest)
		return join, branch, ok && more
	case "arrived":
		// arrived/<replays>/<position>/<fork>/<i>
		join, branch, _, more, ok := joinIn(rest)
		return join, branch, ok && !more
	case "compensation":
		// compensation/<replays>/<replays>/<position>/<fork>/<i>/<k>/<attempt>
		replays, rest, found := strings.Cut(rest, "/")
		if !found || !Digits(replays) {
			return "", 0, false
		}
		join, branch, rest, more, ok := joinIn(rest)
		return join, branch, ok && more && strings.Count(rest, "/") == 1
	}
	return "", 0, false
}

// joinedKey reports whether key is the key of an event of the delivery
// that fired a join (join/<replays>/<position>/<fork>/...), and the join's.
func joinedKey(key string) (string, bool) {
	p := strings.SplitN(key, "/", 5)
	if len(p) < 5 || p[0] != "join" || !Digits(p[1]) || !Digits(p[2]) || p[3] == "" {
		return "", false
	}
	return strings.Join(p[1:4], "/"), true
}

// joinIn reads "<replays>/<position>/<fork>/<i>" from the front of s: the
// join's key (a part of s), the branch's index, and whether a "/" follows
// the index (more) and what follows it (rest).
func joinIn(s string) (join string, branch int, rest string, more, ok bool) {
	replays, r, found := strings.Cut(s, "/")
	if !found || !Digits(replays) {
		return "", 0, "", false, false
	}
	position, r, found := strings.Cut(r, "/")
	if !found || !Digits(position) {
		return "", 0, "", false, false
	}
	fork, r, found := strings.Cut(r, "/")
	if !found || fork == "" {
		return "", 0, "", false, false
	}
	index, r, more := strings.Cut(r, "/")
	if !Digits(index) {
		return "", 0, "", false, false
	}
	i, err := strconv.Atoi(index)
	if err != nil {
		return "", 0, "", false, false
	}
	return s[:len(replays)+len(position)+len(fork)+2], i, r, more, true
}

// Digits reports whether s is a non-negative decimal number, as branch
// indexes and the parts of keys are written: digits only, no sign.
func Digits(s string) bool {
	if s == "" {
		return false
	}
	for _, c := range s {
		if c < '0' || c > '9' {
			return false
		}
	}
	return true
}

// arrivalKey reports whether a branch's events hold an item's arrival.
func arrivalKey(events []journal.Event) bool {
	return slices.ContainsFunc(events, func(e journal.Event) bool { return strings.HasPrefix(e.Outcome, "item ") })
}

// branchStatus is where a branch stands by its events: unresolved when
// undoing its own work was given up, failed when one of its steps was
// given up, arrived when it came back to its fork, stopped when another
// branch's failure stopped it (or its own work was undone), and running
// otherwise.
func branchStatus(events []journal.Event) string {
	var failed, arrived, stopped bool
	for _, e := range events {
		switch {
		case e.Kind == journal.KindCompensation && e.Outcome == "compensation_failed":
			return StatusUnresolved
		case e.Kind == journal.KindCompensation:
			stopped = true
		case e.Outcome == "failed" || e.Outcome == "parked":
			failed = true
		case strings.HasPrefix(e.Key, "arrived/") || strings.Contains(e.Key, "/arrived/"):
			arrived = true
		case strings.HasPrefix(e.Outcome, "stopped"):
			stopped = true
		}
	}
	switch {
	case failed:
		return StatusFailed
	case arrived:
		return StatusArrived
	case stopped:
		return StatusStopped
	}
	return StatusRunning
}
