package cli

import (
	"cmp"
	"errors"
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

// Branch statuses, as runs show gives them.
const (
	branchArrived    = "arrived"
	branchFailed     = "failed"
	branchStopped    = "stopped"
	branchRunning    = "running"
	branchUnresolved = "unresolved"
)

// runFork is one fork of a run, its branches grouped from the timeline:
// what runs show prints under the run's own events, and what its JSON
// gives in "forks".
type runFork struct {
	// Step is the fork's step; Join the key its join is kept under.
	Step string `json:"step"`
	Join string `json:"join"`
	// Replay is the replay of the run the fork ran in (0 before any).
	Replay int `json:"replay"`
	// Kind is "parallel" or "foreach" ("" when the timeline does not say).
	Kind string `json:"kind,omitempty"`
	// Total is how many branches (a Parallel's) or items (a ForEach's) the
	// fork has, and InFlight how many items of a ForEach it had in flight
	// at most: 0 when the timeline does not say.
	Total    int `json:"total"`
	InFlight int `json:"in_flight,omitempty"`
	// HandedOut is how many branches were sent on their way: from the
	// join when the journal keeps joins, else the branches the timeline
	// has events of.
	HandedOut int `json:"handed_out"`
	// Arrived, Failed (given up), Unresolved (given up, and what it did
	// could not be undone), Stopped (by another's failure) and Running
	// count the branches with events, by status.
	Arrived    int `json:"arrived"`
	Failed     int `json:"failed"`
	Unresolved int `json:"unresolved,omitempty"`
	Stopped    int `json:"stopped"`
	Running    int `json:"running"`
	// Branches are the branches shown (every one with events with
	// --branches all), by index.
	Branches []runBranch `json:"branches"`
	// Hidden is how many branches with events are not in Branches.
	Hidden int `json:"hidden"`

	all []runBranch
	at  map[int]int
}

// runBranch is one branch of a fork (one item of a ForEach) and its
// events in timeline order.
type runBranch struct {
	Branch int             `json:"branch"`
	Status string          `json:"status"`
	Steps  []journal.Event `json:"steps"`
}

// branch returns the fork's branch i, adding it.
func (f *runFork) branch(i int) *runBranch {
	if k, ok := f.at[i]; ok {
		return &f.all[k]
	}
	f.at[i] = len(f.all)
	f.all = append(f.all, runBranch{Branch: i})
	return &f.all[len(f.all)-1]
}

// groupBranches splits a run's timeline into the run's own events and its
// forks, each with its branches' events, branches in index order, forks in
// the order the timeline first names them.
func groupBranches(events []journal.Event) (own []journal.Event, forks []*runFork) {
	byJoin := map[string]*runFork{}
	fork := func(join string) *runFork {
		if f, ok := byJoin[join]; ok {
			return f
		}
		parts := strings.SplitN(join, "/", 3)
		f := &runFork{Join: join, Step: parts[2], at: map[int]int{}}
		f.Replay, _ = strconv.Atoi(parts[0])
		byJoin[join] = f
		forks = append(forks, f)
		return f
	}
	for _, e := range events {
		if join, ok := forkEvent(e); ok {
			f := fork(join)
			f.Kind, f.Total, f.InFlight = forkShape(e.Outcome)
			own = append(own, e)
			continue
		}
		join, i, ok := branchKey(e.Key)
		if !ok {
			own = append(own, e)
			continue
		}
		b := fork(join).branch(i)
		b.Steps = append(b.Steps, e)
	}
	for _, f := range forks {
		slices.SortFunc(f.all, func(a, b runBranch) int { return cmp.Compare(a.Branch, b.Branch) })
		for k := range f.all {
			b := &f.all[k]
			b.Status = branchStatus(b.Steps)
			switch b.Status {
			case branchArrived:
				f.Arrived++
			case branchFailed:
				f.Failed++
			case branchUnresolved:
				f.Unresolved++
			case branchStopped:
				f.Stopped++
			default:
				f.Running++
			}
			if f.Kind == "" && arrivalKey(b.Steps) {
				// No fork event: an item's arrival still says it is a ForEach.
				f.Kind = "foreach"
			}
		}
		f.HandedOut = len(f.all)
	}
	return own, forks
}

// forkEvent reports whether e is a fork taking its run in ("forked: ..."
// under its step key, step/<replays>/<position>/<attempt>), and the key of
// its join.
func forkEvent(e journal.Event) (string, bool) {
	if e.Kind != journal.KindStep || !strings.HasPrefix(e.Outcome, "forked: ") {
		return "", false
	}
	p := strings.Split(e.Key, "/")
	if len(p) != 4 || p[0] != "step" || !digits(p[1]) || !digits(p[2]) || e.Step == "" {
		return "", false
	}
	return p[1] + "/" + p[2] + "/" + e.Step, true
}

// forkShape reads a fork's outcome: "forked: N branches" (a Parallel) or
// "forked: N items, M in flight" (a ForEach).
func forkShape(outcome string) (kind string, total, inFlight int) {
	if _, err := fmt.Sscanf(outcome, "forked: %d items, %d in flight", &total, &inFlight); err == nil {
		return "foreach", total, inFlight
	}
	if _, err := fmt.Sscanf(outcome, "forked: %d branches", &total); err == nil {
		return "parallel", total, 0
	}
	return "", 0, 0
}

// branchKey says which fork's branch an event of that key belongs to: the
// key of the fork's join and the branch's index.
func branchKey(key string) (join string, branch int, ok bool) {
	p := strings.Split(key, "/")
	switch {
	case len(p) >= 6 && p[0] == "branch":
		// branch/<replays>/<position>/<fork>/<i>/...
		join, branch, ok = joinAt(p, 1)
	case len(p) == 5 && p[0] == "arrived":
		// arrived/<replays>/<position>/<fork>/<i>
		join, branch, ok = joinAt(p, 1)
	case len(p) == 8 && p[0] == "compensation" && digits(p[1]):
		// compensation/<replays>/<replays>/<position>/<fork>/<i>/<k>/<attempt>
		join, branch, ok = joinAt(p, 2)
	}
	return join, branch, ok
}

// joinAt reads a join's key and a branch index from p, from p[at] on:
// <replays>/<position>/<fork>/<i>.
func joinAt(p []string, at int) (string, int, bool) {
	if len(p) < at+4 || !digits(p[at]) || !digits(p[at+1]) || p[at+2] == "" || !digits(p[at+3]) {
		return "", 0, false
	}
	i, err := strconv.Atoi(p[at+3])
	if err != nil {
		return "", 0, false
	}
	return strings.Join(p[at:at+3], "/"), i, true
}

// digits reports whether s is a non-negative decimal number.
func digits(s string) bool {
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
			return branchUnresolved
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
		return branchFailed
	case arrived:
		return branchArrived
	case stopped:
		return branchStopped
	}
	return branchRunning
}

// ErrInvalidBranches: --branches or --branch named no choice runs show has.
var ErrInvalidBranches = errors.New("invalid branch selection")

// Which branches runs show shows by default: every branch of a fork with
// at most smallFork of them, else the first and last edgeBranches and at
// most failedBranches of those given up.
const (
	smallFork      = 8
	edgeBranches   = 3
	failedBranches = 10
)

// branchChoice is which branches of a run's forks runs show shows:
// --branches (some, all, failed, none) and --branch (indexes, ranges,
// either for one fork).
type branchChoice struct {
	mode   string
	ranges []branchRange
}

// branchRange is branches from to to (inclusive), of the fork called
// fork ("": of every fork).
type branchRange struct {
	fork     string
	from, to int
}

// The values of --branches.
const (
	branchesSome   = "some"
	branchesAll    = "all"
	branchesFailed = "failed"
	branchesNone   = "none"
)

// parseBranchChoice checks --branches and --branch.
func parseBranchChoice(mode string, specs []string) (branchChoice, error) {
	c := branchChoice{mode: strings.ToLower(strings.TrimSpace(mode))}
	switch c.mode {
	case branchesSome, branchesAll, branchesFailed, branchesNone:
	default:
		return c, fmt.Errorf("%w: --branches %q: want some, all, failed or none", ErrInvalidBranches, mode)
	}
	for _, s := range specs {
		r, err := parseBranchRange(s)
		if err != nil {
			return c, err
		}
		c.ranges = append(c.ranges, r)
	}
	return c, nil
}

// parseBranchRange reads one --branch: N, A-B, or either after a fork's
// name and a colon (each:57).
func parseBranchRange(s string) (branchRange, error) {
	var r branchRange
	spec := strings.TrimSpace(s)
	if fork, rest, ok := strings.Cut(spec, ":"); ok {
		r.fork, spec = fork, rest
	}
	bad := func() (branchRange, error) {
		return r, fmt.Errorf("%w: --branch %q: want a branch's index (57), a range (100-199), or either after a fork's name (each:57)", ErrInvalidBranches, s)
	}
	from, to, isRange := strings.Cut(spec, "-")
	if !isRange {
		to = from
	}
	var err error
	if !digits(from) || !digits(to) {
		return bad()
	}
	if r.from, err = strconv.Atoi(from); err != nil {
		return bad()
	}
	if r.to, err = strconv.Atoi(to); err != nil || r.to < r.from {
		return bad()
	}
	return r, nil
}

// choose fills f.Branches with the branches c shows, and f.Hidden with how
// many it leaves out.
func (c branchChoice) choose(f *runFork) {
	failed := 0
	keep := func(k int, b runBranch) bool {
		switch {
		case len(c.ranges) > 0:
			return slices.ContainsFunc(c.ranges, func(r branchRange) bool {
				return (r.fork == "" || r.fork == f.Step) && b.Branch >= r.from && b.Branch <= r.to
			})
		case c.mode == branchesAll:
			return true
		case c.mode == branchesFailed:
			return b.Status == branchFailed || b.Status == branchUnresolved || b.Status == branchStopped
		case c.mode != branchesSome:
			return false
		case len(f.all) <= smallFork, k < edgeBranches, k >= len(f.all)-edgeBranches:
			return true
		case (b.Status == branchFailed || b.Status == branchUnresolved) && failed < failedBranches:
			failed++
			return true
		}
		return false
	}
	f.Branches = []runBranch{}
	for k, b := range f.all {
		if keep(k, b) {
			f.Branches = append(f.Branches, b)
		}
	}
	f.Hidden = len(f.all) - len(f.Branches)
}
