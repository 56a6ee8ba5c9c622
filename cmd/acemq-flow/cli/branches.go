package cli

import (
	"errors"
	"fmt"
	"slices"
	"strconv"
	"strings"

	"github.com/acemq/acemq-flow/engine/timeline"
)

// runs show groups a forked run's timeline by branch with package
// timeline; what is here is which of the branches it shows.

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
	if !timeline.Digits(from) || !timeline.Digits(to) {
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

// choose shows (Fork.Show) the branches of f that c picks.
func (c branchChoice) choose(f *timeline.Fork) {
	all := f.All()
	failed := 0
	keep := func(k int, b timeline.Branch) bool {
		switch {
		case len(c.ranges) > 0:
			return slices.ContainsFunc(c.ranges, func(r branchRange) bool {
				return (r.fork == "" || r.fork == f.Step) && b.Branch >= r.from && b.Branch <= r.to
			})
		case c.mode == branchesAll:
			return true
		case c.mode == branchesFailed:
			return b.Status == timeline.StatusFailed || b.Status == timeline.StatusUnresolved || b.Status == timeline.StatusStopped
		case c.mode != branchesSome:
			return false
		case len(all) <= smallFork, k < edgeBranches, k >= len(all)-edgeBranches:
			return true
		case (b.Status == timeline.StatusFailed || b.Status == timeline.StatusUnresolved) && failed < failedBranches:
			failed++
			return true
		}
		return false
	}
	var shown []timeline.Branch
	for k, b := range all {
		if keep(k, b) {
			shown = append(shown, b)
		}
	}
	f.Show(shown)
}
