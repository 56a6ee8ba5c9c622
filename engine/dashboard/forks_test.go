package dashboard_test

import (
	"context"
	"html"
	"net/http"
	"net/http/httptest"
	"regexp"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/acemq/acemq-flow/engine/dashboard"
	"github.com/acemq/acemq-flow/engine/journal"
	"github.com/acemq/acemq-flow/engine/timeline"
	"github.com/acemq/acemq-flow/internal/dashboardtest"
	"github.com/acemq/acemq-flow/internal/testenv"
)

var (
	reFork    = regexp.MustCompile(`(?s)<section class="fork" id="(fork-\d+)" data-join="([^"]*)">(.*?)</section>`)
	reBranch  = regexp.MustCompile(`<tbody class="branch" data-branch="(\d+)" data-status="(\w+)">`)
	reNext    = regexp.MustCompile(`<a href="([^"]*)" class="next"`)
	rePrev    = regexp.MustCompile(`<a href="([^"]*)" class="prev"`)
	reJoinSay = regexp.MustCompile(`data-join-state="([^"]*)"`)
)

// pageFork is one fork as a run page shows it.
type pageFork struct {
	anchor, join, html string
	// branches are the branches shown, "index:status".
	branches   []string
	next, prev string
	joinState  string
}

// getRun fetches a run page at path and returns its forks.
func getRun(t *testing.T, srv *httptest.Server, path string) (string, []pageFork) {
	t.Helper()
	status, body, _ := dashboardtest.Do(t, dashboardtest.Client(t), http.MethodGet, srv.URL+path, nil, nil)
	require.Equal(t, http.StatusOK, status, body)
	var forks []pageFork
	for _, m := range reFork.FindAllStringSubmatch(body, -1) {
		f := pageFork{anchor: m[1], join: m[2], html: m[3]}
		for _, b := range reBranch.FindAllStringSubmatch(m[3], -1) {
			f.branches = append(f.branches, b[1]+":"+b[2])
		}
		if n := reNext.FindStringSubmatch(m[3]); n != nil {
			f.next = html.UnescapeString(n[1])
		}
		if p := rePrev.FindStringSubmatch(m[3]); p != nil {
			f.prev = html.UnescapeString(p[1])
		}
		f.joinState = reJoinSay.FindStringSubmatch(m[3])[1]
		forks = append(forks, f)
	}
	return body, forks
}

// indexes are the branches from..to (inclusive), each "index:status".
func indexes(from, to int, status string) []string {
	var out []string
	for i := from; i <= to; i++ {
		out = append(out, strconv.Itoa(i)+":"+status)
	}
	return out
}

// TestRunPageShowsForksAPageOfBranchesAtATime: a run page shows each fork
// with what it is, how its branches and its join stand, and a page of
// its branches with their steps; next and previous pages, the branches
// given up or stopped, and one branch by its index are links and a form
// away; the run's own long runs of alike events are shortened.
func TestRunPageShowsForksAPageOfBranchesAtATime(t *testing.T) {
	t.Parallel()
	srv := dashboardtest.Forked(t, "r-1", 120, 60, dashboard.Config{PageSize: 25})
	body, forks := getRun(t, srv, "/runs/r-1")
	require.Len(t, forks, 2)

	fulfil := forks[0]
	require.Equal(t, []string{"fork-0", "0/1/fulfil", "fired"}, []string{fulfil.anchor, fulfil.join, fulfil.joinState})
	require.Contains(t, fulfil.html, "Fork fulfil <span class=\"fork-kind\">parallel, 2 branches</span>")
	require.Contains(t, fulfil.html, "2 handed out,\n  2 arrived, 0 failed, 0 stopped, 0 running.")
	require.Equal(t, []string{"0:arrived", "1:arrived"}, fulfil.branches)
	require.Regexp(t, `(?s)data-branch="0".*<td>pick</td>.*<td>reserve</td>.*branch 0 arrived.*data-branch="1".*<td>book</td>`, fulfil.html)
	require.Empty(t, fulfil.next)
	require.Empty(t, fulfil.prev)

	each := forks[1]
	require.Equal(t, []string{"fork-1", "0/2/each", "failed"}, []string{each.anchor, each.join, each.joinState})
	require.Contains(t, each.html, "for each of 120 items, at most 4 in flight")
	require.Contains(t, each.html, "64 handed out, 56 not handed out,\n  60 arrived, 1 failed, 3 stopped, 0 running.")
	require.Contains(t, each.html, "1–25 of 64 branches</span> (branch 0 to 24)")
	require.Equal(t, indexes(0, 24, "arrived"), each.branches)
	require.Equal(t, "/runs/r-1?fork=0%2F2%2Feach&from=25#fork-1", each.next)
	require.Empty(t, each.prev)
	require.Contains(t, each.html, `<input type="hidden" name="fork" value="0/2/each">`, "a form opens one branch")

	require.Contains(t, body, "… 55 more compensated", "60 items' compensation in a few lines")
	require.Contains(t, body, `<a href="/runs/r-1?timeline=all">Show every event</a>`)
	whole, _ := getRun(t, srv, "/runs/r-1?timeline=all")
	require.NotContains(t, whole, "more compensated")
	require.Equal(t, 60+1, strings.Count(whole, `data-kind="compensation" data-outcome="compensated"`), "every item's, then reserve's")

	_, forks = getRun(t, srv, each.next)
	require.Equal(t, indexes(25, 49, "arrived"), forks[1].branches)
	require.Equal(t, []string{"0:arrived", "1:arrived"}, forks[0].branches, "the other fork stays on its first page")
	require.Equal(t, "/runs/r-1?fork=0%2F2%2Feach#fork-1", forks[1].prev)
	_, forks = getRun(t, srv, forks[1].next)
	last := append(indexes(50, 59, "arrived"), "60:failed", "61:stopped", "62:stopped", "63:stopped")
	require.Equal(t, last, forks[1].branches)
	require.Contains(t, forks[1].html, "51–64 of 64 branches</span> (branch 50 to 63)")
	require.Empty(t, forks[1].next, "the last page")
	require.Equal(t, "/runs/r-1?fork=0%2F2%2Feach&from=25#fork-1", forks[1].prev)

	_, forks = getRun(t, srv, "/runs/r-1?fork=0/2/each&show=failed")
	require.Equal(t, last[10:], forks[1].branches)
	require.Contains(t, forks[1].html, "1–4 of 4 branches given up or stopped")
	require.Contains(t, forks[1].html, `no square for you`)
	_, forks = getRun(t, srv, "/runs/r-1?fork=0/1/fulfil&show=failed")
	require.Empty(t, forks[0].branches)
	require.Contains(t, forks[0].html, "No branches given up or stopped.")

	_, forks = getRun(t, srv, "/runs/r-1?fork=0/2/each&branch=57")
	require.Equal(t, []string{"57:arrived"}, forks[1].branches)
	require.Contains(t, forks[1].html, "item 57 arrived")
	require.Contains(t, forks[1].html, `value="57"`)
	_, forks = getRun(t, srv, "/runs/r-1?fork=0/2/each&branch=100")
	require.Empty(t, forks[1].branches)
	require.Contains(t, forks[1].html, "Branch 100 has no events: it was not handed out.")

	for q, want := range map[string]string{
		"from=-1":                   "The page of branches to show is not a number: -1.",
		"branch=x":                  "Not a branch: x (branches are numbered from 0).",
		"show=the-lot":              "No such choice of branches: the-lot (all or failed).",
		"from=99999999999999999999": "The page of branches to show is not a number: 99999999999999999999.",
	} {
		status, body, _ := dashboardtest.Do(t, dashboardtest.Client(t), http.MethodGet, srv.URL+"/runs/r-1?fork=0/2/each&"+q, nil, nil)
		require.Equal(t, http.StatusBadRequest, status, q)
		require.Contains(t, html.UnescapeString(body), want, q)
	}
}

// TestRunPageLinksChildAndParentRuns: a run's page lists the child runs
// its steps started, with their status, and links each from the step
// that started it, in a branch too; a child's page links its parent.
func TestRunPageLinksChildAndParentRuns(t *testing.T) {
	t.Parallel()
	j, err := journal.NewMemory(0)
	require.NoError(t, err)
	now := time.Now()
	ev := func(run, key string, seq int64, kind journal.Kind, step, outcome string, st journal.Status) journal.Event {
		return journal.Event{RunID: run, Flow: "unit.parent", Key: key, Seq: seq, Kind: kind, Step: step, Outcome: outcome,
			StartedAt: now, EndedAt: now, Status: st, RunStep: step}
	}
	child := func(run, parent, step string, st journal.Status) []journal.Event {
		start := ev(run, "start", journal.Seq(0, 0, 1, 0), journal.KindStart, "", timeline.StartedBy(parent, step), journal.Running)
		start.Flow, start.RunStep = "unit.child", "pack"
		done := ev(run, "step/0/0/1", journal.Seq(0, 1, 1, 2), journal.KindStep, "pack", "completed", st)
		done.Flow = "unit.child"
		return []journal.Event{start, done}
	}
	events := []journal.Event{
		ev("p-1", "start", journal.Seq(0, 0, 1, 0), journal.KindStart, "", "started", journal.Running),
		ev("p-1", "child/0/0/1", journal.Seq(0, 1, 1, 2), journal.KindStep, "ship", timeline.StartedChild("p-1.ship"), journal.Running),
		ev("p-1", "step/0/1/1", journal.Seq(0, 2, 0, 1), journal.KindStep, "each", "forked: 2 items, 2 in flight", journal.Running),
		ev("p-1", "branch/0/1/each/1/child/0/0/1/each/1/0/1", journal.Seq(0, 2, 1<<14|1<<10|1, 2), journal.KindStep, "wrap",
			timeline.StartedChild("p-1.0.0.1.each.1.0.wrap"), ""),
	}
	events = append(events, child("p-1.ship", "p-1", "ship", journal.Completed)...)
	events = append(events, child("p-1.0.0.1.each.1.0.wrap", "p-1", "wrap", journal.Failed)...)
	require.NoError(t, j.Record(t.Context(), events))
	h, err := dashboard.New(dashboard.Config{Journal: j, Logger: testenv.Logger(t)})
	require.NoError(t, err)
	srv := httptest.NewServer(h)
	t.Cleanup(srv.Close)
	t.Cleanup(func() { require.NoError(t, h.Close(context.Background())) })

	body, forks := getRun(t, srv, "/runs/p-1")
	require.Regexp(t, `(?s)<table class="children" id="children">.*`+
		`<a href="/runs/p-1.ship" class="id">p-1.ship</a></td><td>ship</td><td><span class="status status-completed">completed</span>.*`+
		`<a href="/runs/p-1.0.0.1.each.1.0.wrap" class="id">p-1.0.0.1.each.1.0.wrap</a></td><td>wrap</td><td><span class="status status-failed">failed`, body)
	require.NotContains(t, body, `id="more-children"`)
	require.Contains(t, body, `<a href="/runs/p-1.ship" class="child-link">started child run p-1.ship</a>`, "linked from its step")
	require.Len(t, forks, 1)
	require.Equal(t, []string{"1:running"}, forks[0].branches)
	require.Contains(t, forks[0].html, `<a href="/runs/p-1.0.0.1.each.1.0.wrap" class="child-link">started child run p-1.0.0.1.each.1.0.wrap</a>`)
	require.NotContains(t, body, `id="parent"`, "p-1 is nobody's child")

	body, forks = getRun(t, srv, "/runs/p-1.ship")
	require.Empty(t, forks)
	require.Contains(t, body, `<dt>Child of</dt><dd id="parent"><a href="/runs/p-1" class="id">p-1</a> (its step ship)</dd>`)
	require.NotContains(t, body, `id="children"`)
}

// TestRunPageOfAHundredThousandItems: the page of a run whose ForEach
// went over 100,000 items renders a page of branches, not 100,000 of
// them, in well under a second or two; the journal's timeline query
// still reads every event of the run (some 200,000), and grouping them
// is one pass.
func TestRunPageOfAHundredThousandItems(t *testing.T) {
	t.Parallel()
	srv := dashboardtest.Forked(t, "r-big", 100_000, 50_000, dashboard.Config{})
	c := dashboardtest.Client(t)
	for _, path := range []string{"/runs/r-big", "/runs/r-big?fork=0/2/each&from=50000", "/runs/r-big?fork=0/2/each&branch=50000"} {
		began := time.Now()
		status, body, _ := dashboardtest.Do(t, c, http.MethodGet, srv.URL+path, nil, nil)
		took := time.Since(began)
		t.Logf("%s: %s, %d bytes", path, took, len(body))
		require.Equal(t, http.StatusOK, status)
		require.Less(t, len(body), 1<<20, "a page, not the run")
		require.Less(t, took, 10*time.Second)
		require.True(t, strings.Contains(body, "50004 handed out, 49996 not handed out,\n  50000 arrived, 1 failed, 3 stopped, 0 running."), "the counts")
	}
}

// BenchmarkRunPageOfAHundredThousandItems is the run page of a ForEach of
// 100,000 items, every one arrived, on the memory journal.
func BenchmarkRunPageOfAHundredThousandItems(b *testing.B) {
	srv := dashboardtest.Forked(b, "r-big", 100_000, 100_000, dashboard.Config{})
	c := srv.Client()
	for b.Loop() {
		resp, err := c.Get(srv.URL + "/runs/r-big?fork=0/2/each&from=50000")
		require.NoError(b, err)
		require.Equal(b, http.StatusOK, resp.StatusCode)
		require.NoError(b, resp.Body.Close())
	}
}
