package journaltest

import (
	"context"
	"errors"
	"fmt"
	"math"
	"math/rand/v2"
	"reflect"
	"slices"
	"sync"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/acemq/acemq-flow/engine/journal"
)

// OpenJoins returns an empty JoinStore for one test; Joins runs its tests
// in parallel, each on a store of its own.
type OpenJoins func(t *testing.T) journal.JoinStore

// Joins runs the join suite against the JoinStores open returns: a join
// opened once, its items paged, branches settled in any order, by many
// workers at once and again (a redelivery), each decision the one
// journal.Decide makes, failures and refusals. Every JoinStore passes it,
// so that a flow's branches join the same whichever store keeps them.
func Joins(t *testing.T, open OpenJoins) {
	tests := map[string]func(*testing.T, journal.JoinStore){
		"opened once":                   openedOnce,
		"items paged":                   itemsPaged,
		"a long list of items":          longItemList,
		"parallel shaped":               parallelShaped,
		"for-each shaped":               forEachShaped,
		"settled once":                  settledOnce,
		"concurrent settles":            concurrentSettles,
		"concurrent opens":              concurrentOpens,
		"failure":                       joinFailure,
		"refusals":                      joinRefusals,
		"unknown joins":                 unknownJoins,
		"joins apart":                   joinsApart,
		"every decision Decide's":       followsDecide,
		"bytes kept exactly, as copies": bytesKept,
	}
	for name, test := range tests {
		t.Run(name, func(t *testing.T) {
			t.Parallel()
			test(t, open(t))
		})
	}
}

// items are the byte slices of texts.
func items(texts ...string) [][]byte {
	out := make([][]byte, len(texts))
	for i, s := range texts {
		out[i] = []byte(s)
	}
	return out
}

// numbered are n items prefix0, prefix1, ...
func numbered(prefix string, n int) [][]byte {
	out := make([][]byte, n)
	for i := range out {
		out[i] = fmt.Appendf(nil, "%s%d", prefix, i)
	}
	return out
}

// openNew opens j, which must be new, and checks what OpenJoin says.
func openNew(t *testing.T, js journal.JoinStore, j journal.Join, its [][]byte) {
	t.Helper()
	st, opened, err := js.OpenJoin(ctxOf(t), j, its)
	require.NoError(t, err)
	require.True(t, opened, "join %q of run %q is new", j.Key, j.RunID)
	require.Equal(t, journal.JoinStatus{Join: j, Dispatched: j.Limit}, st, "a new join has handed out its first Limit branches")
}

// settle settles a branch and returns the decision, without its Item
// once that is checked: a store that hands the item out with the decision
// hands out the one JoinItems has.
func settle(t *testing.T, js journal.JoinStore, run, key string, branch int, s journal.Settled) journal.Decision {
	t.Helper()
	d, err := js.Settle(ctxOf(t), run, key, branch, s)
	require.NoError(t, err, "settle branch %d of %q", branch, key)
	if d.Item != nil {
		require.GreaterOrEqual(t, d.Next, 0, "settle branch %d of %q: an item with a decision that hands none out", branch, key)
		want, err := js.JoinItems(ctxOf(t), run, key, d.Next, 1)
		require.NoError(t, err)
		require.Equal(t, want, [][]byte{d.Item}, "settle branch %d of %q: the item handed out", branch, key)
		d.Item = nil
	}
	return d
}

// ok is a branch that arrived with output and entries of its own.
func ok(branch int) journal.Settled {
	return journal.Settled{OK: true, Output: fmt.Appendf(nil, `{"out":%d}`, branch), Entries: fmt.Appendf(nil, "entries-%d", branch)}
}

func status(t *testing.T, js journal.JoinStore, run, key string) journal.JoinStatus {
	t.Helper()
	st, err := js.JoinStatus(ctxOf(t), run, key)
	require.NoError(t, err)
	return st
}

func arrivals(t *testing.T, js journal.JoinStore, run, key string, from, n int) []journal.Arrival {
	t.Helper()
	a, err := js.Arrivals(ctxOf(t), run, key, from, n)
	require.NoError(t, err)
	return a
}

func branchesOf(as []journal.Arrival) []int {
	out := []int{}
	for _, a := range as {
		out = append(out, a.Branch)
	}
	return out
}

// openedOnce: a second OpenJoin returns the join the first opened, as it
// stands, and ignores what it was given.
func openedOnce(t *testing.T, js journal.JoinStore) {
	ctx := ctxOf(t)
	first := journal.Join{RunID: "o1", Key: "fork/0/2", Total: 4, Limit: 2, Parent: []byte(`{"step":2}`)}
	its := items("a", "b", "c", "d")
	openNew(t, js, first, its)
	require.Equal(t, journal.Decision{Next: 2, Last: false, Failed: false}, settle(t, js, "o1", "fork/0/2", 1, ok(1)))

	again := journal.Join{RunID: "o1", Key: "fork/0/2", Total: 3, Limit: 3, Parent: []byte("another parent")}
	st, opened, err := js.OpenJoin(ctx, again, items("x", "y", "z"))
	require.NoError(t, err)
	require.False(t, opened, "the join was open already")
	require.Equal(t, journal.JoinStatus{Join: first, Dispatched: 3, Arrived: 1}, st,
		"the first call's join, its Parent, Total and Limit, as it stands")
	got, err := js.JoinItems(ctx, "o1", "fork/0/2", 0, 10)
	require.NoError(t, err)
	require.Equal(t, its, got, "the second call's items are ignored")
	require.Equal(t, st, status(t, js, "o1", "fork/0/2"))

	// A Parallel's join has no items, and hands out every branch at once.
	par := journal.Join{RunID: "o1", Key: "fork/1/0", Total: 3, Limit: 3, Parent: []byte("p")}
	openNew(t, js, par, nil)
	got, err = js.JoinItems(ctx, "o1", "fork/1/0", 0, 10)
	require.NoError(t, err)
	require.Empty(t, got)
	st, opened, err = js.OpenJoin(ctx, par, nil)
	require.NoError(t, err)
	require.False(t, opened)
	require.Equal(t, journal.JoinStatus{Join: par, Dispatched: 3}, st)
}

// itemsPaged: JoinItems pages through the items in order; past the end
// there are none; a negative start or count is refused.
func itemsPaged(t *testing.T, js journal.JoinStore) {
	ctx := ctxOf(t)
	its := append(items("i0", "i1", "i2"), []byte{}, []byte{0x00, 0xff, 0xfe}, []byte(`{"n":5}`), []byte("i6"))
	openNew(t, js, journal.Join{RunID: "p1", Key: "each/3", Total: 7, Limit: 2}, its)
	for _, c := range []struct {
		from, n int
		want    [][]byte
	}{
		{0, 3, its[:3]}, {3, 3, its[3:6]}, {6, 3, its[6:]}, {7, 3, nil}, {100, 1, nil}, {2, 0, nil}, {0, 100, its}, {4, 1, its[4:5]},
	} {
		got, err := js.JoinItems(ctx, "p1", "each/3", c.from, c.n)
		require.NoError(t, err, "from %d, %d", c.from, c.n)
		if len(c.want) == 0 {
			require.Empty(t, got, "from %d, %d", c.from, c.n)
			continue
		}
		require.Equal(t, c.want, got, "from %d, %d: in order, bytes as given", c.from, c.n)
	}
	for _, c := range [][2]int{{-1, 3}, {0, -1}} {
		_, err := js.JoinItems(ctx, "p1", "each/3", c[0], c[1])
		require.ErrorIs(t, err, journal.ErrInvalidJoin, "from %d, %d", c[0], c[1])
	}
}

// longItemList: a ForEach over thousands of items opens with all of them
// (a store may write a long list another way than a short one).
func longItemList(t *testing.T, js journal.JoinStore) {
	ctx := ctxOf(t)
	const n = 5000
	its := numbered("item-", n)
	openNew(t, js, journal.Join{RunID: "l1", Key: "each/0", Total: n, Limit: 50, Parent: []byte("p")}, its)
	var got [][]byte
	for from := 0; ; from += 1500 {
		page, err := js.JoinItems(ctx, "l1", "each/0", from, 1500)
		require.NoError(t, err)
		if len(page) == 0 {
			break
		}
		require.LessOrEqual(t, len(page), 1500)
		got = append(got, page...)
	}
	require.Equal(t, its, got)
	last, err := js.JoinItems(ctx, "l1", "each/0", n-3, 10)
	require.NoError(t, err)
	require.Equal(t, its[n-3:], last)
}

// parallelShaped: every branch handed out at open; they settle in any
// order, hand out nothing, and the one settling last is Last.
func parallelShaped(t *testing.T, js journal.JoinStore) {
	j := journal.Join{RunID: "par", Key: "fork/0/1", Total: 3, Limit: 3, Parent: []byte("parent")}
	openNew(t, js, j, nil)
	for i, b := range []int{2, 0, 1} {
		d := settle(t, js, "par", "fork/0/1", b, ok(b))
		require.Equal(t, journal.Decision{Next: -1, Last: i == 2, Failed: false}, d, "branch %d settled %d of 3", b, i+1)
	}
	require.Equal(t, journal.JoinStatus{Join: j, Dispatched: 3, Arrived: 3}, status(t, js, "par", "fork/0/1"))
	as := arrivals(t, js, "par", "fork/0/1", 0, 10)
	require.Equal(t, []int{0, 1, 2}, branchesOf(as), "in branch order, not arrival order")
	for _, a := range as {
		require.Equal(t, ok(a.Branch), a.Settled)
	}
}

// forEachShaped: Total 10, Limit 3: each branch that arrives hands out the
// next one in order, whichever branch it is; the one settling last is
// Last; Arrivals pages through the outputs in branch order.
func forEachShaped(t *testing.T, js journal.JoinStore) {
	const run, key = "fe", "each/0/4"
	j := journal.Join{RunID: run, Key: key, Total: 10, Limit: 3, Parent: []byte("parent")}
	openNew(t, js, j, numbered("item", 10))
	// Branches settle as they finish, not in order: 1 first, then 0, ...
	order := []int{1, 0, 3, 2, 4, 6, 5, 8, 7, 9}
	wantNext := []int{3, 4, 5, 6, 7, 8, 9, -1, -1, -1}
	handedOut := []int{0, 1, 2}
	for i, b := range order {
		require.Contains(t, handedOut, b, "branch %d settles only once handed out", b)
		d := settle(t, js, run, key, b, ok(b))
		require.Equal(t, journal.Decision{Next: wantNext[i], Last: i == len(order)-1}, d, "settle %d (branch %d)", i, b)
		if d.Next >= 0 {
			handedOut = append(handedOut, d.Next)
		}
		st := status(t, js, run, key)
		require.Equal(t, min(10, 3+i+1), st.Dispatched)
		require.Equal(t, i+1, st.Arrived)
		if i == 1 {
			require.Equal(t, []int{0, 1}, branchesOf(arrivals(t, js, run, key, 0, 10)), "only the settled branches")
		}
	}
	require.Equal(t, []int{0, 1, 2, 3, 4, 5, 6, 7, 8, 9}, handedOut, "each branch handed out once, in order")
	require.Equal(t, journal.JoinStatus{Join: j, Dispatched: 10, Arrived: 10}, status(t, js, run, key))
	for _, c := range []struct {
		from, n int
		want    []int
	}{{0, 4, []int{0, 1, 2, 3}}, {4, 4, []int{4, 5, 6, 7}}, {8, 4, []int{8, 9}}, {10, 4, []int{}}, {-5, 2, []int{0, 1}}, {3, 0, []int{}}} {
		as := arrivals(t, js, run, key, c.from, c.n)
		require.Equal(t, c.want, branchesOf(as), "from %d, %d", c.from, c.n)
		for _, a := range as {
			require.Equal(t, ok(a.Branch), a.Settled, "branch %d", a.Branch)
		}
	}
}

// settledOnce: a second Settle of a branch returns the first's decision
// and changes nothing: its Settled is ignored.
func settledOnce(t *testing.T, js journal.JoinStore) {
	const run, key = "s1", "fork/0/3"
	j := journal.Join{RunID: run, Key: key, Total: 3, Limit: 2}
	openNew(t, js, j, nil)
	first := settle(t, js, run, key, 0, journal.Settled{OK: true, Output: []byte("first"), Entries: []byte("e1")})
	require.Equal(t, journal.Decision{Next: 2}, first)
	for _, s := range []journal.Settled{
		{OK: true, Output: []byte("second")},
		{OK: false},
		{OK: true, Output: []byte("first"), Entries: []byte("e1")},
	} {
		require.Equal(t, first, settle(t, js, run, key, 0, s), "a redelivery gets the first decision")
	}
	require.Equal(t, journal.JoinStatus{Join: j, Dispatched: 3, Arrived: 1}, status(t, js, run, key), "counted once, nothing more handed out")
	require.Equal(t, []journal.Arrival{{Branch: 0, Settled: journal.Settled{OK: true, Output: []byte("first"), Entries: []byte("e1")}}},
		arrivals(t, js, run, key, 0, 10), "the first output is kept")

	settle(t, js, run, key, 1, ok(1))
	last := settle(t, js, run, key, 2, journal.Settled{OK: false})
	require.Equal(t, journal.Decision{Next: -1, Last: true}, last)
	require.Equal(t, last, settle(t, js, run, key, 2, ok(2)), "the Last decision too, so that a redelivered last branch fires the join again")
	require.Equal(t, journal.JoinStatus{Join: j, Dispatched: 3, Arrived: 2, Stopped: 1}, status(t, js, run, key))
}

// concurrentSettles: workers settle every branch of one join at once, each
// branch twice at the same moment (a redelivery), handing out the next
// branches as their decisions say: every branch is handed out once, both
// settles of a branch get one decision, and exactly one is Last.
func concurrentSettles(t *testing.T, js journal.JoinStore) { ConcurrentSettles(t, js) }

// ConcurrentSettles is the conformance suite's concurrent settles with
// the settles spread over stores, which share one database as the workers
// of one deployment do: workers settle every branch of one join at once,
// each branch twice side by side (a redelivery) through two of the
// stores, and every branch is handed out once, one of them is the last,
// and both settles of a branch get one decision.
func ConcurrentSettles(t *testing.T, stores ...journal.JoinStore) {
	require.NotEmpty(t, stores)
	js := stores[0]
	const (
		run, key       = "c1", "each/0/1"
		total, limit   = 200, 20
		workers        = 6
		redeliveryMark = "redelivered"
	)
	ctx, cancel := context.WithCancel(ctxOf(t))
	defer cancel()
	j := journal.Join{RunID: run, Key: key, Total: total, Limit: limit}
	openNew(t, js, j, nil)

	work := make(chan int, total)
	for b := range limit {
		work <- b
	}
	var (
		mu        sync.Mutex
		handed    = map[int]int{}
		decisions = map[int]journal.Decision{}
		settled   int
		failure   error
	)
	for b := range limit {
		handed[b] = 1
	}
	fail := func(err error) {
		mu.Lock()
		defer mu.Unlock()
		if failure == nil {
			failure = err
		}
		cancel()
	}
	var wg sync.WaitGroup
	for w := range workers {
		wg.Go(func() {
			for {
				var b int
				select {
				case b = <-work:
				case <-ctx.Done():
					return
				}
				var (
					ds   [2]journal.Decision
					errs [2]error
					both sync.WaitGroup
				)
				for i := range 2 {
					both.Go(func() {
						s := ok(b)
						if i == 1 {
							// Entries of its own: whichever of the two
							// the store keeps, it keeps it whole.
							s.Entries = []byte(redeliveryMark)
						}
						ds[i], errs[i] = stores[(w+i)%len(stores)].Settle(ctx, run, key, b, s)
					})
				}
				both.Wait()
				if err := errors.Join(errs[:]...); err != nil {
					fail(fmt.Errorf("branch %d: %w", b, err))
					return
				}
				if !reflect.DeepEqual(ds[0], ds[1]) {
					fail(fmt.Errorf("branch %d settled twice at once: decisions %+v and %+v", b, ds[0], ds[1]))
					return
				}
				mu.Lock()
				decisions[b] = ds[0]
				settled++
				done := settled == total
				if n := ds[0].Next; n >= 0 {
					handed[n]++
					if handed[n] == 1 {
						work <- n
					}
				}
				mu.Unlock()
				if done {
					cancel()
				}
			}
		})
	}
	wg.Wait()
	require.NoError(t, failure)
	require.Len(t, decisions, total, "every branch settled")
	var lasts []int
	for b, d := range decisions {
		require.False(t, d.Failed)
		if d.Last {
			lasts = append(lasts, b)
		}
	}
	require.Len(t, lasts, 1, "exactly one branch is the last")
	for b := range total {
		require.Equal(t, 1, handed[b], "branch %d handed out once", b)
	}
	require.Equal(t, journal.JoinStatus{Join: j, Dispatched: total, Arrived: total}, status(t, js, run, key))
	as := arrivals(t, js, run, key, 0, total+10)
	require.Len(t, as, total)
	for i, a := range as {
		require.Equal(t, i, a.Branch)
		require.Equal(t, ok(i).Output, a.Output)
		require.Contains(t, []string{string(ok(i).Entries), redeliveryMark}, string(a.Entries), "one of the two, whole")
	}
}

// concurrentOpens: workers opening one join at once, each with a Parent
// and items of its own: one opens it, every other gets that join.
func concurrentOpens(t *testing.T, js journal.JoinStore) {
	const openers = 8
	var (
		wg     sync.WaitGroup
		sts    [openers]journal.JoinStatus
		opened [openers]bool
		errs   [openers]error
	)
	for i := range openers {
		wg.Go(func() {
			j := journal.Join{RunID: "co", Key: "each/1", Total: 5 + i, Limit: 2, Parent: fmt.Appendf(nil, "parent %d", i)}
			sts[i], opened[i], errs[i] = js.OpenJoin(ctxOf(t), j, numbered(fmt.Sprintf("opener%d-", i), 5+i))
		})
	}
	wg.Wait()
	winner := -1
	for i := range openers {
		require.NoError(t, errs[i])
		if opened[i] {
			require.Equal(t, -1, winner, "openers %d and %d both opened it", winner, i)
			winner = i
		}
	}
	require.NotEqual(t, -1, winner, "one opener opened it")
	want := journal.JoinStatus{Join: journal.Join{RunID: "co", Key: "each/1", Total: 5 + winner, Limit: 2,
		Parent: fmt.Appendf(nil, "parent %d", winner)}, Dispatched: 2}
	for i := range openers {
		require.Equal(t, want, sts[i], "opener %d sees the winner's join", i)
	}
	got, err := js.JoinItems(ctxOf(t), "co", "each/1", 0, 100)
	require.NoError(t, err)
	require.Equal(t, numbered(fmt.Sprintf("opener%d-", winner), 5+winner), got, "the winner's items, all of them")
}

// joinFailure: after FailJoin nothing more is handed out and every
// decision says Failed; stopped branches count apart; the last handed-out
// branch to settle is Last.
func joinFailure(t *testing.T, js journal.JoinStore) {
	ctx := ctxOf(t)
	const run, key = "f1", "each/0/7"
	j := journal.Join{RunID: run, Key: key, Total: 10, Limit: 3}
	openNew(t, js, j, nil)
	require.Equal(t, journal.Decision{Next: 3}, settle(t, js, run, key, 0, ok(0)))
	require.NoError(t, js.FailJoin(ctx, run, key))
	require.NoError(t, js.FailJoin(ctx, run, key), "failing it again changes nothing")
	st := status(t, js, run, key)
	require.True(t, st.Failed)
	require.Equal(t, 4, st.Dispatched)

	require.Equal(t, journal.Decision{Next: -1, Failed: true}, settle(t, js, run, key, 1, ok(1)), "no more branches once failed")
	require.Equal(t, journal.Decision{Next: -1, Failed: true}, settle(t, js, run, key, 2, journal.Settled{OK: false}))
	require.Equal(t, journal.Decision{Next: -1, Failed: true, Last: true}, settle(t, js, run, key, 3, ok(3)),
		"the last of the branches handed out")
	require.Equal(t, journal.JoinStatus{Join: j, Dispatched: 4, Arrived: 3, Stopped: 1, Failed: true}, status(t, js, run, key))
	require.Equal(t, journal.Decision{Next: 3}, settle(t, js, run, key, 0, ok(0)), "a decision made before the failure stays")
	_, err := js.Settle(ctx, run, key, 4, ok(4))
	require.ErrorIs(t, err, journal.ErrInvalidJoin, "branch 4 was never handed out")
	as := arrivals(t, js, run, key, 0, 10)
	require.Equal(t, []int{0, 1, 2, 3}, branchesOf(as), "the stopped branch is an arrival too, for compensation to read")
	require.False(t, as[2].OK)
	require.True(t, as[3].OK)

	// A branch that stops while the join has not failed hands out nothing
	// (journal.Decide); only arrivals do.
	const key2 = "each/1/7"
	openNew(t, js, journal.Join{RunID: run, Key: key2, Total: 4, Limit: 2}, nil)
	require.Equal(t, journal.Decision{Next: -1}, settle(t, js, run, key2, 0, journal.Settled{OK: false}))
	require.Equal(t, journal.Decision{Next: 2}, settle(t, js, run, key2, 1, ok(1)))
	require.Equal(t, journal.JoinStatus{Join: journal.Join{RunID: run, Key: key2, Total: 4, Limit: 2}, Dispatched: 3, Arrived: 1, Stopped: 1},
		status(t, js, run, key2))
}

// joinRefusals: what no store can keep is refused with ErrInvalidJoin, and
// nothing is opened.
func joinRefusals(t *testing.T, js journal.JoinStore) {
	ctx := ctxOf(t)
	tooMany := journal.MaxJoinTotal
	tooMany++ // wraps where int is 32 bits: refused all the same
	for name, c := range map[string]struct {
		j   journal.Join
		its [][]byte
	}{
		"no run id":             {journal.Join{Key: "k", Total: 1, Limit: 1}, nil},
		"no key":                {journal.Join{RunID: "bad", Total: 1, Limit: 1}, nil},
		"NUL in the key":        {journal.Join{RunID: "bad", Key: "k\x00", Total: 1, Limit: 1}, nil},
		"run id not UTF-8":      {journal.Join{RunID: "bad\xff", Key: "k", Total: 1, Limit: 1}, nil},
		"no branches":           {journal.Join{RunID: "bad", Key: "k", Total: 0, Limit: 1}, nil},
		"negative total":        {journal.Join{RunID: "bad", Key: "k", Total: -1, Limit: 1}, nil},
		"too many branches":     {journal.Join{RunID: "bad", Key: "k", Total: tooMany, Limit: 1}, nil},
		"no limit":              {journal.Join{RunID: "bad", Key: "k", Total: 3, Limit: 0}, nil},
		"limit above the total": {journal.Join{RunID: "bad", Key: "k", Total: 3, Limit: 4}, nil},
		"fewer items":           {journal.Join{RunID: "bad", Key: "k", Total: 3, Limit: 1}, items("a", "b")},
		"more items":            {journal.Join{RunID: "bad", Key: "k", Total: 3, Limit: 1}, items("a", "b", "c", "d")},
		"no items for a total":  {journal.Join{RunID: "bad", Key: "k", Total: 3, Limit: 1}, [][]byte{}},
	} {
		_, opened, err := js.OpenJoin(ctx, c.j, c.its)
		require.ErrorIs(t, err, journal.ErrInvalidJoin, name)
		require.False(t, opened, name)
	}
	_, err := js.JoinStatus(ctx, "bad", "k")
	require.ErrorIs(t, err, journal.ErrJoinNotFound, "a refused join is not opened")

	openNew(t, js, journal.Join{RunID: "ref", Key: "k", Total: 10, Limit: 3}, nil)
	for _, b := range []int{3, 9, 10, -1, math.MaxInt32, math.MinInt32, tooMany} {
		_, err := js.Settle(ctx, "ref", "k", b, ok(0))
		require.ErrorIs(t, err, journal.ErrInvalidJoin, "branch %d was never handed out", b)
	}
	require.Equal(t, 3, status(t, js, "ref", "k").Dispatched, "refused settles change nothing")
	require.Equal(t, 0, status(t, js, "ref", "k").Arrived)

	for _, id := range [][2]string{{"", "k"}, {"ref", ""}, {"ref\x00", "k"}, {"ref", "k\xff"}} {
		run, key := id[0], id[1]
		_, err := js.JoinItems(ctx, run, key, 0, 1)
		require.ErrorIs(t, err, journal.ErrInvalidJoin, "JoinItems %q %q", run, key)
		require.ErrorIs(t, js.FailJoin(ctx, run, key), journal.ErrInvalidJoin, "FailJoin %q %q", run, key)
		_, err = js.Settle(ctx, run, key, 0, ok(0))
		require.ErrorIs(t, err, journal.ErrInvalidJoin, "Settle %q %q", run, key)
		_, err = js.JoinStatus(ctx, run, key)
		require.ErrorIs(t, err, journal.ErrInvalidJoin, "JoinStatus %q %q", run, key)
		_, err = js.Arrivals(ctx, run, key, 0, 1)
		require.ErrorIs(t, err, journal.ErrInvalidJoin, "Arrivals %q %q", run, key)
	}
}

// unknownJoins: every method taking a run and a key says ErrJoinNotFound
// for a join never opened, under a run or key that has others.
func unknownJoins(t *testing.T, js journal.JoinStore) {
	ctx := ctxOf(t)
	openNew(t, js, journal.Join{RunID: "u1", Key: "k", Total: 2, Limit: 2}, nil)
	for _, id := range [][2]string{{"u1", "other"}, {"u2", "k"}, {"nobody", "nothing"}} {
		run, key := id[0], id[1]
		_, err := js.JoinItems(ctx, run, key, 0, 1)
		require.ErrorIs(t, err, journal.ErrJoinNotFound, "JoinItems %q %q", run, key)
		require.ErrorIs(t, js.FailJoin(ctx, run, key), journal.ErrJoinNotFound, "FailJoin %q %q", run, key)
		_, err = js.Settle(ctx, run, key, 0, ok(0))
		require.ErrorIs(t, err, journal.ErrJoinNotFound, "Settle %q %q", run, key)
		_, err = js.JoinStatus(ctx, run, key)
		require.ErrorIs(t, err, journal.ErrJoinNotFound, "JoinStatus %q %q", run, key)
		_, err = js.Arrivals(ctx, run, key, 0, 1)
		require.ErrorIs(t, err, journal.ErrJoinNotFound, "Arrivals %q %q", run, key)
		require.False(t, errors.Is(err, journal.ErrInvalidJoin))
	}
	require.False(t, status(t, js, "u1", "k").Failed, "nothing touched the open join")
}

// joinsApart: joins of one key in other runs, and of other keys in one
// run, are apart.
func joinsApart(t *testing.T, js journal.JoinStore) {
	ctx := ctxOf(t)
	a := journal.Join{RunID: "a1", Key: "fork/0/1", Total: 2, Limit: 1, Parent: []byte("a")}
	b := journal.Join{RunID: "a2", Key: "fork/0/1", Total: 3, Limit: 1, Parent: []byte("b")}
	c := journal.Join{RunID: "a1", Key: "fork/1/1", Total: 2, Limit: 2, Parent: []byte("c")}
	openNew(t, js, a, items("a0", "a1"))
	openNew(t, js, b, items("b0", "b1", "b2"))
	openNew(t, js, c, nil)
	require.Equal(t, journal.Decision{Next: 1}, settle(t, js, "a1", "fork/0/1", 0, ok(0)))
	require.NoError(t, js.FailJoin(ctx, "a1", "fork/1/1"))
	require.Equal(t, journal.JoinStatus{Join: a, Dispatched: 2, Arrived: 1}, status(t, js, "a1", "fork/0/1"))
	require.Equal(t, journal.JoinStatus{Join: b, Dispatched: 1}, status(t, js, "a2", "fork/0/1"))
	require.Equal(t, journal.JoinStatus{Join: c, Dispatched: 2, Failed: true}, status(t, js, "a1", "fork/1/1"))
	require.Empty(t, arrivals(t, js, "a2", "fork/0/1", 0, 10))
	require.Empty(t, arrivals(t, js, "a1", "fork/1/1", 0, 10))
	got, err := js.JoinItems(ctx, "a2", "fork/0/1", 0, 10)
	require.NoError(t, err)
	require.Equal(t, items("b0", "b1", "b2"), got)
	require.Equal(t, journal.Decision{Next: 1}, settle(t, js, "a2", "fork/0/1", 0, ok(0)), "the same branch of another run")
}

// followsDecide: random runs of settles (arrived or stopped), redeliveries,
// failures and refused branches, each decision and status compared with
// what journal.Decide gives.
func followsDecide(t *testing.T, js journal.JoinStore) {
	ctx := ctxOf(t)
	for seed := range uint64(8) {
		rnd := rand.New(rand.NewPCG(seed, 22))
		total := 1 + rnd.IntN(24)
		j := journal.Join{RunID: "m", Key: fmt.Sprint("join/", seed), Total: total, Limit: 1 + rnd.IntN(total), Parent: []byte{byte(seed)}}
		openNew(t, js, j, nil)
		model := journal.JoinStatus{Join: j, Dispatched: j.Limit}
		decisions := map[int]journal.Decision{}
		kept := map[int]journal.Settled{}
		lasts := 0
		for {
			var inFlight, done []int
			for b := range model.Dispatched {
				if _, ok := decisions[b]; ok {
					done = append(done, b)
				} else {
					inFlight = append(inFlight, b)
				}
			}
			if len(inFlight) == 0 {
				break
			}
			switch r := rnd.IntN(12); {
			case r == 0 && !model.Failed:
				require.NoError(t, js.FailJoin(ctx, j.RunID, j.Key))
				model.Failed = true
			case r == 1 && len(done) > 0:
				b := done[rnd.IntN(len(done))]
				require.Equal(t, decisions[b], settle(t, js, j.RunID, j.Key, b, journal.Settled{OK: rnd.IntN(2) == 0, Output: []byte("again")}),
					"seed %d: branch %d again", seed, b)
			case r == 2:
				_, err := js.Settle(ctx, j.RunID, j.Key, model.Dispatched+rnd.IntN(3), ok(0))
				require.ErrorIs(t, err, journal.ErrInvalidJoin, "seed %d: a branch not handed out", seed)
			default:
				b := inFlight[rnd.IntN(len(inFlight))]
				s := ok(b)
				if rnd.IntN(5) == 0 {
					s = journal.Settled{OK: false}
				}
				want := journal.Decide(&model, s)
				require.Equal(t, want, settle(t, js, j.RunID, j.Key, b, s), "seed %d: branch %d", seed, b)
				decisions[b], kept[b] = want, s
				if want.Last {
					lasts++
				}
			}
			require.Equal(t, model, status(t, js, j.RunID, j.Key), "seed %d", seed)
		}
		require.Equal(t, 1, lasts, "seed %d: one Last, when nothing is in flight", seed)
		var want []journal.Arrival
		for b := range model.Dispatched {
			want = append(want, journal.Arrival{Branch: b, Settled: kept[b]})
		}
		require.Equal(t, want, arrivals(t, js, j.RunID, j.Key, 0, total), "seed %d", seed)
	}
}

// bytesKept: a Parent, items, outputs and entries are kept byte for byte
// (not as text), nil apart from empty, and a store keeps copies: changing
// what was given or returned changes nothing it keeps.
func bytesKept(t *testing.T, js journal.JoinStore) {
	ctx := ctxOf(t)
	parent := []byte{0x00, 0xff, 0xc3, 0x28, '\\', 'x'}
	its := [][]byte{{0x00}, {0xff, 0xfe}, {}, []byte("plain")}
	j := journal.Join{RunID: "b1", Key: "each/9", Total: 4, Limit: 4, Parent: slices.Clone(parent)}
	openNew(t, js, j, its)
	j.Parent[0] = 'X'
	its[0][0] = 'X'
	st := status(t, js, "b1", "each/9")
	require.Equal(t, parent, st.Parent)
	st.Parent[1] = 'Y'
	require.Equal(t, parent, status(t, js, "b1", "each/9").Parent, "the status handed out is a copy")
	got, err := js.JoinItems(ctx, "b1", "each/9", 0, 10)
	require.NoError(t, err)
	require.Equal(t, [][]byte{{0x00}, {0xff, 0xfe}, {}, []byte("plain")}, got)
	require.NotNil(t, got[2], "an empty item is empty, not nil")

	settled := []journal.Settled{
		{OK: true, Output: []byte{0x00, 0xff}, Entries: []byte{0xfe, 0x00}},
		{OK: true, Output: []byte{}, Entries: nil},
		{OK: true, Output: nil, Entries: []byte{}},
		{OK: false},
	}
	for b, s := range settled {
		given := journal.Settled{OK: s.OK, Output: slices.Clone(s.Output), Entries: slices.Clone(s.Entries)}
		settle(t, js, "b1", "each/9", b, given)
		if len(given.Output) > 0 {
			given.Output[0] = 'X'
		}
	}
	as := arrivals(t, js, "b1", "each/9", 0, 10)
	require.Len(t, as, 4)
	for b, a := range as {
		require.Equal(t, settled[b], a.Settled, "branch %d", b)
		require.Equal(t, settled[b].Output == nil, a.Output == nil, "branch %d: nil output is nil, empty is empty", b)
		require.Equal(t, settled[b].Entries == nil, a.Entries == nil, "branch %d: nil entries are nil, empty are empty", b)
	}
	as[0].Output[0] = 'Z'
	require.Equal(t, settled[0].Output, arrivals(t, js, "b1", "each/9", 0, 1)[0].Output, "arrivals handed out are copies")
}
