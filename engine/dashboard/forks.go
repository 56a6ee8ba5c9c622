package dashboard

import (
	"fmt"
	"net/url"
	"strconv"
	"strings"

	"github.com/acemq/acemq-flow/engine/timeline"
)

// A run page shows every fork of the run a page of branches at a time.
// Its address says which page of which fork (the others show their
// first): ?fork=<join>&from=<n> pages, show=failed keeps the branches
// given up or stopped, branch=<i> opens one branch. Only the branches of
// the page are rendered, however many the fork has.

// forkView is one fork of a run as its page shows it.
type forkView struct {
	*timeline.Fork
	// Anchor is the fork's id in the page, which its links go back to.
	Anchor string
	// Title says what the fork is ("for each of 100000 items, at most 4
	// in flight").
	Title string
	// JoinState is where its join stands ("fired", "failed", "waiting",
	// "not fired"), JoinDetail what that means.
	JoinState, JoinDetail string
	// NotHandedOut is how many of its branches were not handed out.
	NotHandedOut int
	// GivenUpOnly says the page keeps only branches given up or stopped.
	GivenUpOnly bool
	// Open says the page shows one branch, Opened, asked for with branch=;
	// Missing that it has no events (never handed out, or not yet).
	Open    bool
	Opened  int
	Missing bool
	// From and To are the page's first and last branch, counted among
	// Matched (those the page's filter keeps), from 1.
	From, To, Matched int
	// Prev and Next are the addresses of the pages around this one ("" at
	// either end); Every and GivenUp those of the first page of every
	// branch and of those given up or stopped.
	Prev, Next, Every, GivenUp string
}

// forkQuery is what a run page's address asks of its forks.
type forkQuery struct {
	join   string
	from   int
	failed bool
	branch *int
}

// parseForkQuery reads fork=, from=, show= and branch=; it refuses what
// is not a number where one is wanted, saying why.
func parseForkQuery(q url.Values) (fq forkQuery, why string) {
	fq.join = q.Get("fork")
	switch s := q.Get("show"); s {
	case "", "all":
	case "failed":
		fq.failed = true
	default:
		return fq, "No such choice of branches: " + s + " (all or failed)."
	}
	if s := q.Get("from"); s != "" {
		n, err := strconv.Atoi(s)
		if !timeline.Digits(s) || err != nil {
			return fq, "The page of branches to show is not a number: " + s + "."
		}
		fq.from = n
	}
	if s := strings.TrimSpace(q.Get("branch")); s != "" {
		n, err := strconv.Atoi(s)
		if !timeline.Digits(s) || err != nil {
			return fq, "Not a branch: " + s + " (branches are numbered from 0)."
		}
		fq.branch = &n
	}
	return fq, ""
}

// forkViews are the run's forks with the branches the page shows, size
// at a time.
func forkViews(runID string, forks []*timeline.Fork, fq forkQuery, size int) []forkView {
	out := make([]forkView, 0, len(forks))
	for k, f := range forks {
		v := forkView{Fork: f, Anchor: "fork-" + strconv.Itoa(k), Title: forkTitle(f)}
		v.JoinState, v.JoinDetail = joinState(f)
		v.NotHandedOut = max(f.Total-f.HandedOut, 0)
		link := func(from int, failed bool) string {
			q := url.Values{"fork": {f.Join}}
			if from > 0 {
				q.Set("from", strconv.Itoa(from))
			}
			if failed {
				q.Set("show", "failed")
			}
			return "/runs/" + url.PathEscape(runID) + "?" + q.Encode() + "#" + v.Anchor
		}
		v.Every, v.GivenUp = link(0, false), link(0, true)
		asked := fq.join == f.Join
		switch {
		case asked && fq.branch != nil:
			v.Open, v.Opened = true, *fq.branch
			b, ok := f.Find(v.Opened)
			v.Missing = !ok
			if ok {
				f.Show([]timeline.Branch{b})
			}
		default:
			from := 0
			var keep func(timeline.Branch) bool
			if asked {
				from, v.GivenUpOnly = fq.from, fq.failed
			}
			if v.GivenUpOnly {
				keep = stoppedOrGivenUp
			}
			page, matched := f.Page(from, size, keep)
			f.Show(page)
			v.Matched = matched
			if len(page) > 0 {
				v.From, v.To = from+1, from+len(page)
			}
			if from > 0 {
				v.Prev = link(max(from-size, 0), v.GivenUpOnly)
			}
			if from+len(page) < matched {
				v.Next = link(from+len(page), v.GivenUpOnly)
			}
		}
		out = append(out, v)
	}
	return out
}

// stoppedOrGivenUp keeps the branches that did not arrive for good: given
// up, unresolved or stopped.
func stoppedOrGivenUp(b timeline.Branch) bool {
	switch b.Status {
	case timeline.StatusFailed, timeline.StatusUnresolved, timeline.StatusStopped:
		return true
	}
	return false
}

// forkTitle says what a fork is.
func forkTitle(f *timeline.Fork) string {
	var s string
	switch {
	case f.Kind == timeline.KindForEach && f.Total > 0:
		s = fmt.Sprintf("for each of %d items, at most %d in flight", f.Total, f.InFlight)
	case f.Kind == timeline.KindForEach:
		s = "for each item"
	case f.Kind == timeline.KindParallel:
		s = fmt.Sprintf("parallel, %d branches", f.Total)
	default:
		s = "branches"
	}
	if f.Replay > 0 {
		s += fmt.Sprintf(" (replay %d)", f.Replay)
	}
	return s
}

// joinState is where a fork's join stands: fired (the run went on past
// it), failed (a branch was given up), or waiting for its branches; "not
// fired" when the journal keeps no join to say more.
func joinState(f *timeline.Fork) (state, detail string) {
	switch {
	case f.Joined:
		return "fired", "every branch arrived and the run went on"
	case f.State != nil && f.State.Failed:
		return "failed", "a branch was given up: no more branches are handed out, the others stop at their next step"
	case f.State != nil:
		return "waiting", fmt.Sprintf("%d of %d arrived, %d stopped, %d handed out",
			f.State.Arrived, f.State.Total, f.State.Stopped, f.State.Dispatched)
	case f.Failed+f.Unresolved > 0:
		return "failed", "a branch was given up"
	}
	return "not fired", "not every branch has arrived"
}
