package journal

import (
	"context"
	"errors"
	"fmt"
	"math"
)

// ErrJoinNotFound: a JoinStore keeps no join under that run and key: it was
// never opened, or went with its run.
var ErrJoinNotFound = errors.New("join not found")

// ErrInvalidJoin is what a JoinStore's refusals match: a join, branch or
// item it cannot keep (an empty or non-Text run id or key, a total or
// limit out of range, a branch beyond the join's total).
var ErrInvalidJoin = errors.New("invalid join")

// Join is one fork of a run that its branches come back to: Total branches
// (the branches of a Parallel, the items of a ForEach), at most Limit of
// them dispatched before the first has settled. Parent is what the join
// needs to go on once every branch has arrived (opaque to the store).
type Join struct {
	RunID, Key string
	Total      int
	Limit      int
	Parent     []byte
}

// JoinStatus is where a join stands.
type JoinStatus struct {
	Join
	// Dispatched is how many branches were handed out (branches 0 to
	// Dispatched-1); Arrived and Stopped how many settled, with an
	// output or without one.
	Dispatched, Arrived, Stopped int
	// Failed says a branch was given up: no more branches are handed out,
	// and those still running stop at their next step.
	Failed bool
}

// Settled is how a branch ended: OK with its Output and its Entries (what
// the run's compensation needs of it, opaque to the store), or stopped
// (failed or cancelled, its own work already undone).
type Settled struct {
	OK      bool
	Output  []byte
	Entries []byte
}

// Decision is what settling a branch came to, the same on every call for
// that branch: Next is the branch to hand out now (-1 for none), Last says
// this branch was the last one in flight (every branch handed out has
// settled), and Failed whether the join had failed by then. A Last
// decision that is not Failed fires the join; a Failed one compensates
// what the arrived branches did.
type Decision struct {
	Next   int
	Last   bool
	Failed bool
	// Item is item Next of a ForEach when the store read it with the
	// decision (the SQL journal does, in the settle's statement); nil
	// otherwise, and JoinItems has it.
	Item []byte
}

// Arrival is one settled branch, as Arrivals returns it.
type Arrival struct {
	Branch int
	Settled
}

// JoinStore is a journal that also keeps the state of runs' joins, which
// every worker must agree on: which branches arrived with what, and what
// each arrival decided. Every method is safe to call again with the same
// arguments (a redelivery does): OpenJoin returns the join first opened,
// Settle the decision first made. Joins live as long as their run in the
// journal and go with it. Both shipped journals implement it; with the
// Memory journal only one process can run a flow's branches.
type JoinStore interface {
	// OpenJoin records j with its items (the ForEach's, in order; nil for
	// a Parallel) and hands out its first min(Limit, Total) branches. A
	// join already open under the run and key is returned as it is, with
	// opened false, and items are ignored.
	OpenJoin(ctx context.Context, j Join, items [][]byte) (st JoinStatus, opened bool, err error)
	// JoinItems returns at most n of the join's items from index from.
	JoinItems(ctx context.Context, runID, key string, from, n int) ([][]byte, error)
	// FailJoin marks the join failed: no more branches are handed out.
	FailJoin(ctx context.Context, runID, key string) error
	// Settle records how branch ended, once: a second call returns the
	// first call's decision and ignores s.
	Settle(ctx context.Context, runID, key string, branch int, s Settled) (Decision, error)
	// JoinStatus returns where the join stands, or ErrJoinNotFound.
	JoinStatus(ctx context.Context, runID, key string) (JoinStatus, error)
	// Arrivals returns at most n settled branches from branch from on, in
	// branch order.
	Arrivals(ctx context.Context, runID, key string, from, n int) ([]Arrival, error)
}

// MaxJoinTotal is the most branches a join can have: branch numbers are
// 32-bit, as attempt counts are (Event.Validate), so that every JoinStore
// can keep them (the PostgreSQL journal's are integer columns).
const MaxJoinTotal = math.MaxInt32

// CheckJoin refuses, with an error matching ErrInvalidJoin, a join no
// JoinStore can keep: an empty or non-Text run id or key, a Total below 1
// or above MaxJoinTotal, or a Limit below 1 or above Total.
func CheckJoin(j Join) error {
	if err := checkJoinKey(j.RunID, j.Key); err != nil {
		return err
	}
	if j.Total < 1 || j.Total > MaxJoinTotal || j.Limit < 1 || j.Limit > j.Total {
		return fmt.Errorf("%w: join %q of run %q: total %d, limit %d; want total between 1 and %d and limit between 1 and total",
			ErrInvalidJoin, j.Key, j.RunID, j.Total, j.Limit, MaxJoinTotal)
	}
	return nil
}

func checkJoinKey(runID, key string) error {
	if runID == "" || key == "" || !Text(runID) || !Text(key) {
		return fmt.Errorf("%w: join %q of run %q: want non-empty UTF-8 text without NUL bytes", ErrInvalidJoin, key, runID)
	}
	return nil
}

// Decide is the rule every JoinStore's Settle follows, applied to st (the
// join before this branch settled) for a branch that settled as s: the
// counts are updated in st and the decision returned.
func Decide(st *JoinStatus, s Settled) Decision {
	if s.OK {
		st.Arrived++
	} else {
		st.Stopped++
	}
	d := Decision{Next: -1, Failed: st.Failed}
	if s.OK && !st.Failed && st.Dispatched < st.Total {
		d.Next = st.Dispatched
		st.Dispatched++
	}
	d.Last = st.Arrived+st.Stopped == st.Dispatched
	return d
}
