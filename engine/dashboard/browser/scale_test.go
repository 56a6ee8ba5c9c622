package browser

import (
	"context"
	"fmt"
	"net/http"
	"net/http/httptest"
	"os"
	"sort"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/chromedp/chromedp"
	"github.com/stretchr/testify/require"

	"github.com/acemq/acemq-flow/engine/dashboard"
	"github.com/acemq/acemq-flow/engine/journal"
	"github.com/acemq/acemq-flow/internal/journalbench"
	"github.com/acemq/acemq-flow/internal/testenv"
)

// scaleRuns is how many runs TestInABrowserAtScale loads: the journal
// benchmark's 1,000,000 with ACEMQ_SCALE=1 (about a minute to load), else
// 20,000 made the same way.
func scaleRuns() int {
	if os.Getenv("ACEMQ_SCALE") != "" {
		return journalbench.Runs
	}
	return 20_000
}

// TestInABrowserAtScale drives the dashboard in headless Chromium on a
// PostgreSQL journal made by the journal benchmark's generator
// (journalbench: 1,000,000 runs under ACEMQ_SCALE=1, else 20,000, in
// tables of its own, dropped after), and checks what each page shows
// against the generator's runs counted in Go (journalbench.RunOf): a
// payload search typed in the runs list finds every run of the customer
// in the window, newest first, with its status; a run found opens with
// its input; the failed page groups every failed run of the journal by
// flow; the 30-day chart's columns add up to every run started and every
// run failed, and its totals to each status's runs. At 1,000,000 runs it
// keeps the screenshots docs/dashboard-search.png, -failed.png and
// -charts.png (ACEMQ_SCREENSHOTS=docs).
func TestInABrowserAtScale(t *testing.T) {
	t.Parallel()
	n := scaleRuns()
	ctx, cancel := context.WithTimeout(t.Context(), 5*time.Minute)
	defer cancel()
	end := time.Now().UTC().Truncate(time.Second)
	set := journalbench.ForTest(ctx, t, "acemq_browser", n, end)
	d, err := dashboard.New(dashboard.Config{Journal: set.Journal, Logger: testenv.Logger(t), Now: func() time.Time { return end }})
	require.NoError(t, err)
	t.Cleanup(func() { require.NoError(t, d.Close(context.Background())) })
	srv := httptest.NewServer(d)
	t.Cleanup(srv.Close)

	// What the pages should show, from the generator's runs.
	var ada []string
	adaStatus := map[string]string{}
	byStatus := map[journal.Status]int64{}
	failedByFlow := map[string]int64{}
	var failed, failedCharted int64
	for i := 1; i <= n; i++ {
		r := set.Run(i)
		byStatus[r.Status]++
		if r.Customer == "Ada" && !r.StartedAt.Before(end.Add(-24*time.Hour)) {
			ada = append(ada, r.ID)
			adaStatus[r.ID] = string(r.Status)
		}
		if r.Status == journal.Failed {
			failed++
			failedByFlow[r.Flow]++
		}
		if journal.FailedStatus(r.Status) {
			failedCharted++
		}
	}
	require.NotEmpty(t, ada)
	bctx := browser(t)
	opened := dialogs(t, bctx)
	// The README's pictures are of the million runs only, each well under
	// the repository's 1 MB a file: the top of a long page (the window's
	// 1280×900) rather than all of it.
	shot := func(t *testing.T, name string, whole bool) {
		if n != journalbench.Runs {
			return
		}
		capture := chromedp.CaptureScreenshot()
		if whole {
			capture = chromedp.FullScreenshot(100)
		}
		if png := keepScreenshot(t, bctx, name, capture); png != nil {
			require.Less(t, len(png), 300<<10, "%s.png", name)
		}
	}

	t.Run("a payload search in the runs list", func(t *testing.T) {
		require.Equal(t, int64(http.StatusOK), open(t, bctx, srv.URL+"/"))
		require.NoError(t, chromedp.Do(bctx,
			chromedp.SetValue(chromedp.ID("f-window"), "24h"),
			chromedp.SendKeys(chromedp.ID("f-q"), `payload.customer == "Ada"`),
		))
		resp, err := chromedp.RunResponse(bctx, chromedp.Submit(chromedp.ID("f-q")))
		require.NoError(t, err)
		require.Equal(t, int64(http.StatusOK), resp.Status)
		rows := eval[[]string](t, bctx, `[...document.querySelectorAll("#runs tr[data-run]")].map(r => r.dataset.run + " " + r.dataset.status)`)
		var want []string
		for _, id := range ada {
			want = append(want, id+" "+adaStatus[id])
		}
		require.Equal(t, want, rows, "every run of Ada's in the last 24 hours, newest first")
		require.Equal(t, 0, eval[int](t, bctx, `document.querySelectorAll("#search-note").length`), "found by the journal, not partial")
		shot(t, "dashboard-search", true)

		_, err = chromedp.RunResponse(bctx, chromedp.Click(`#runs tr[data-run="`+ada[0]+`"] a`, chromedp.NodeVisible))
		require.NoError(t, err)
		require.Equal(t, ada[0], text(t, bctx, "run-id"))
		require.Equal(t, adaStatus[ada[0]], text(t, bctx, "status"))
		require.Contains(t, text(t, bctx, "input"), `"customer": "Ada"`)
	})

	t.Run("every failed run grouped", func(t *testing.T) {
		require.Equal(t, int64(http.StatusOK), open(t, bctx, srv.URL+"/failed"))
		require.True(t, strings.HasPrefix(text(t, bctx, "failed-summary"), fmt.Sprintf("%d failed runs,", failed)),
			"every failed run of the journal: %s", text(t, bctx, "failed-summary"))
		groups := eval[[]string](t, bctx, `[...document.querySelectorAll(".group")].map(g =>
			g.querySelector("h2").textContent + "|" + g.querySelector(".pattern").textContent + "|" + g.querySelector(".count").textContent)`)
		var want []string
		for flow, k := range failedByFlow {
			i, err := strconv.Atoi(strings.TrimPrefix(flow, "flow-"))
			require.NoError(t, err)
			want = append(want, fmt.Sprintf("%s › step%d|charge: card declined (code <n>)|%d", flow, i%5, k))
		}
		sort.Strings(want)
		sort.Strings(groups)
		require.Equal(t, want, groups, "one group a flow, with its failed runs")
		shot(t, "dashboard-failed", false)
	})

	t.Run("the 30-day chart counts every run", func(t *testing.T) {
		require.Equal(t, int64(http.StatusOK), open(t, bctx, srv.URL+"/charts"))
		require.NoError(t, chromedp.Do(bctx, chromedp.SetValue(chromedp.ID("r-window"), "720h")))
		resp, err := chromedp.RunResponse(bctx, chromedp.Submit(chromedp.ID("r-window")))
		require.NoError(t, err)
		require.Equal(t, int64(http.StatusOK), resp.Status)
		sum := func(class string) int64 {
			return eval[int64](t, bctx, `[...document.querySelectorAll("rect.`+class+`")].reduce((n, r) => n + Number(r.textContent.split(": ")[1]), 0)`)
		}
		require.Equal(t, int64(n), sum("started"), "every run started in the 30 days")
		require.Equal(t, failedCharted, sum("failed"), "every run failed and not replayed")
		require.Contains(t, text(t, bctx, "charts-summary"), fmt.Sprintf("%d runs started", n))
		for st, k := range byStatus {
			require.Equal(t, strconv.FormatInt(k, 10), eval[string](t, bctx, `document.querySelector('#totals td[data-status="`+string(st)+`"]').textContent`), st)
		}
		shot(t, "dashboard-charts", true)
	})
	require.Equal(t, int32(0), opened.Load(), "no page opened a dialog")
}
