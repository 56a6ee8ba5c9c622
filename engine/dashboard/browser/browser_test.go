// Package browser holds the dashboard's tests in a real headless Chromium,
// driven with chromedp: a module of its own, so that the library's module
// does not require a browser driver.
package browser

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"os"
	"path/filepath"
	"sync/atomic"
	"testing"
	"time"

	"github.com/chromedp/cdproto/page"
	"github.com/chromedp/chromedp"
	"github.com/stretchr/testify/require"

	"github.com/acemq/acemq-flow/broker"
	"github.com/acemq/acemq-flow/engine/dashboard"
	"github.com/acemq/acemq-flow/engine/journal"
	"github.com/acemq/acemq-flow/internal/dashboardtest"
	"github.com/acemq/acemq-flow/internal/testenv"
)

// chromiumPath is where Debian's chromium package puts the browser.
const chromiumPath = "/usr/bin/chromium"

// screenshotsEnv names the folder (from the repository's root, where
// go.work is) the browser tests write the dashboard's screenshots to, when
// set: ACEMQ_SCREENSHOTS=docs refreshes the README's pictures.
const screenshotsEnv = "ACEMQ_SCREENSHOTS"

// browser starts headless Chromium for the test, with a profile of its
// own, and returns a tab's context; both go when the test ends. Without
// Chromium the test is skipped, or fails under ACEMQ_REQUIRE_SERVICES=1.
func browser(t *testing.T) context.Context {
	t.Helper()
	if _, err := os.Stat(chromiumPath); err != nil {
		if testenv.Required() {
			t.Fatalf("%s is missing and ACEMQ_REQUIRE_SERVICES=1: install it with apt-get install -y chromium", chromiumPath)
		}
		t.Skipf("install Chromium (apt-get install -y chromium) to run the browser tests: %v", err)
	}
	profile, err := os.MkdirTemp("", "acemq-chromium-")
	require.NoError(t, err)
	alloc, cancelAlloc := chromedp.NewExecAllocator(context.Background(),
		chromedp.ExecPath(chromiumPath),
		chromedp.Headless,
		chromedp.NoSandbox, // as root on the test machines
		chromedp.DisableGPU,
		chromedp.Flag("disable-quic", true),
		chromedp.NoFirstRun,
		chromedp.NoDefaultBrowserCheck,
		chromedp.Flag("disable-background-networking", true),
		chromedp.Flag("disable-component-update", true),
		chromedp.Flag("disable-sync", true),
		chromedp.Flag("disable-dev-shm-usage", true),
		chromedp.UserDataDir(profile),
		chromedp.WindowSize(1280, 900),
	)
	ctx, cancel := chromedp.NewContext(alloc, chromedp.WithLogf(t.Logf))
	t.Cleanup(func() {
		cancel()
		cancelAlloc()
		// The browser's helpers can still write to the profile for a
		// moment after it exited.
		require.Eventually(t, func() bool { return os.RemoveAll(profile) == nil }, 10*time.Second, 50*time.Millisecond)
	})
	require.NoError(t, chromedp.Do(ctx), "start %s", chromiumPath)
	// Every action of the test gets this long; the browser itself lives
	// until the test ends.
	tctx, tcancel := context.WithTimeout(ctx, 90*time.Second)
	t.Cleanup(tcancel)
	return tctx
}

// dialogs counts the JavaScript dialogs (alert, confirm, prompt) the tab
// opens from now on, and dismisses each, until the test ends.
func dialogs(t *testing.T, ctx context.Context) *atomic.Int32 {
	t.Helper()
	wctx, stop := context.WithCancel(ctx)
	events := chromedp.Events(wctx, page.JavascriptDialogOpening)
	var n atomic.Int32
	done := make(chan struct{})
	go func() {
		defer close(done)
		for _, err := range events {
			if err != nil {
				return
			}
			n.Add(1)
			_, _ = chromedp.Call(wctx, page.HandleJavaScriptDialog, page.HandleJavaScriptDialogParams{Accept: false})
		}
	}()
	t.Cleanup(func() { stop(); <-done })
	return &n
}

// screenshot keeps the page as docs/<name>.png when ACEMQ_SCREENSHOTS is
// set, and returns the PNG it kept (nil when none).
func screenshot(t *testing.T, ctx context.Context, name string) []byte {
	t.Helper()
	return keepScreenshot(t, ctx, name, chromedp.FullScreenshot(100))
}

// keepScreenshot keeps what capture takes as docs/<name>.png when
// ACEMQ_SCREENSHOTS is set, and returns it (nil when not kept).
func keepScreenshot(t *testing.T, ctx context.Context, name string, capture chromedp.Action[[]byte]) []byte {
	t.Helper()
	dir := os.Getenv(screenshotsEnv)
	if dir == "" {
		return nil
	}
	if !filepath.IsAbs(dir) {
		root, err := repositoryRoot()
		require.NoError(t, err)
		dir = filepath.Join(root, dir)
	}
	png, err := chromedp.Run(ctx, capture)
	require.NoError(t, err)
	require.NoError(t, os.WriteFile(filepath.Join(dir, name+".png"), png, 0o644))
	return png
}

// repositoryRoot is the folder holding go.work, above the test's own.
func repositoryRoot() (string, error) {
	dir, err := os.Getwd()
	if err != nil {
		return "", err
	}
	for {
		if _, err := os.Stat(filepath.Join(dir, "go.work")); err == nil {
			return dir, nil
		}
		parent := filepath.Dir(dir)
		if parent == dir {
			return "", errors.New("no go.work above the test")
		}
		dir = parent
	}
}

func text(t *testing.T, ctx context.Context, id string) string {
	t.Helper()
	s, err := chromedp.Run(ctx, chromedp.Text(chromedp.ID(id)))
	require.NoError(t, err, "#%s", id)
	return s
}

func eval[T any](t *testing.T, ctx context.Context, js string) T {
	t.Helper()
	v, err := chromedp.Run(ctx, chromedp.Evaluate[T](js))
	require.NoError(t, err, js)
	return v
}

func open(t *testing.T, ctx context.Context, url string) int64 {
	t.Helper()
	resp, err := chromedp.Run(ctx, chromedp.NavigateResponse(url))
	require.NoError(t, err, url)
	return resp.Status
}

// TestInABrowser drives the dashboard in headless Chromium, on a real
// journal fed by an engine on the loopback: the runs list shows the runs,
// a failed run's page shows its error and replays it, and an error
// holding a script is shown as text without running it.
func TestInABrowser(t *testing.T) {
	t.Parallel()
	fx := dashboardtest.New(t, dashboard.Config{})
	ctx := browser(t)
	opened := dialogs(t, ctx)

	done := []string{fx.Start(dashboardtest.Order{ID: "o-1"}, journal.Completed), fx.Start(dashboardtest.Order{ID: "o-2"}, journal.Completed)}
	declined := fx.Start(dashboardtest.Order{ID: "o-3", Fail: "card 4242 declined for order 17"}, journal.Failed)
	fx.Start(dashboardtest.Order{ID: "o-4", Fail: "card 1881 declined for order 18"}, journal.Failed)
	script := fx.Start(dashboardtest.Order{ID: "o-5", Fail: "<script>alert(1)</script>"}, journal.Failed)
	done = append(done, fx.Start(dashboardtest.Order{ID: "o-6"}, journal.Completed))

	t.Run("the runs list shows the runs", func(t *testing.T) {
		require.Equal(t, int64(http.StatusOK), open(t, ctx, fx.Srv.URL+"/"))
		require.NoError(t, chromedp.Do(ctx, chromedp.WaitVisible(chromedp.ID("runs"))))
		ids := eval[[]string](t, ctx, `[...document.querySelectorAll("#runs tr[data-run]")].map(r => r.dataset.run)`)
		require.Len(t, ids, 6)
		for _, id := range append(done, declined, script) {
			require.Contains(t, ids, id)
		}
		status := eval[string](t, ctx, `document.querySelector('#runs tr[data-run="`+declined+`"]').dataset.status`)
		require.Equal(t, "failed", status)
		screenshot(t, ctx, "dashboard-runs")

		require.NoError(t, chromedp.Do(ctx,
			chromedp.SetValue(chromedp.ID("f-status"), "failed"),
			chromedp.SendKeys(chromedp.ID("f-q"), "4242"),
		))
		_, err := chromedp.RunResponse(ctx, chromedp.Submit(chromedp.ID("f-q")))
		require.NoError(t, err)
		ids = eval[[]string](t, ctx, `[...document.querySelectorAll("#runs tr[data-run]")].map(r => r.dataset.run)`)
		require.Equal(t, []string{declined}, ids, "filtered by status and error text")
	})

	t.Run("an error holding a script is text", func(t *testing.T) {
		before := opened.Load()
		require.Equal(t, int64(http.StatusOK), open(t, ctx, fx.Srv.URL+"/runs/"+script))
		require.Contains(t, text(t, ctx, "run-error"), "<script>alert(1)</script>")
		require.Equal(t, 0, eval[int](t, ctx, `document.querySelectorAll("main script, #run-error *").length`),
			"no element came from the error")
		require.Equal(t, int64(http.StatusOK), open(t, ctx, fx.Srv.URL+"/?q=script"))
		cell := eval[string](t, ctx, `document.querySelector('#runs tr[data-run="`+script+`"] td.err').textContent`)
		require.Contains(t, cell, "<script>alert(1)</script>")
		require.Equal(t, before, opened.Load(), "no dialog opened")
	})

	t.Run("failed runs are grouped", func(t *testing.T) {
		require.Equal(t, int64(http.StatusOK), open(t, ctx, fx.Srv.URL+"/failed"))
		patterns := eval[[]string](t, ctx, `[...document.querySelectorAll(".group .pattern")].map(p => p.textContent)`)
		require.Equal(t, []string{`step "charge": fatal: card <n> declined for order <n>`, `step "charge": fatal: <script>alert(<n>)</script>`}, patterns,
			"two runs declined, whatever the numbers, first")
		counts := eval[[]string](t, ctx, `[...document.querySelectorAll(".group .count")].map(p => p.textContent)`)
		require.Equal(t, []string{"2", "1"}, counts)
	})

	t.Run("a failed run shows its error and is replayed", func(t *testing.T) {
		require.Equal(t, int64(http.StatusOK), open(t, ctx, fx.Srv.URL+"/runs/"+declined))
		require.Equal(t, "failed", text(t, ctx, "status"))
		require.Contains(t, text(t, ctx, "run-error"), "card 4242 declined for order 17")
		failedRow := eval[string](t, ctx, `document.querySelector('#timeline tr[data-outcome="failed"]').textContent`)
		require.Contains(t, failedRow, "charge")
		require.Contains(t, failedRow, "card 4242 declined for order 17")
		screenshot(t, ctx, "dashboard-run")

		require.NoError(t, chromedp.Do(ctx, chromedp.Click(chromedp.ID("replay"))))
		require.False(t, eval[bool](t, ctx, `document.getElementById("replay-form").checkValidity()`), "the confirmation is not ticked")
		require.Equal(t, journal.Failed, fx.Wait(declined, journal.Failed).Status, "nothing was sent")
		require.NoError(t, chromedp.Do(ctx, chromedp.Click(chromedp.ID("replay-confirm"))))
		resp, err := chromedp.RunResponse(ctx, chromedp.Click(chromedp.ID("replay")))
		require.NoError(t, err)
		require.Equal(t, int64(http.StatusOK), resp.Status)
		require.Contains(t, text(t, ctx, "flash"), "Replayed")
		require.Contains(t, []string{"running", "completed"}, text(t, ctx, "status"))

		fx.Wait(declined, journal.Completed)
		require.Equal(t, int64(http.StatusOK), open(t, ctx, fx.Srv.URL+"/runs/"+declined))
		require.Equal(t, "completed", text(t, ctx, "status"))
		kinds := eval[[]string](t, ctx, `[...document.querySelectorAll("#timeline tr[data-kind]")].map(r => r.dataset.kind + ":" + r.dataset.outcome)`)
		require.Contains(t, kinds, "replay:replayed by dashboard")
		require.Equal(t, "step:completed", kinds[len(kinds)-1])
	})

	t.Run("the charts draw the last hour", func(t *testing.T) {
		require.Equal(t, int64(http.StatusOK), open(t, ctx, fx.Srv.URL+"/charts"))
		started := eval[int](t, ctx, `[...document.querySelectorAll("rect.started")].reduce((n, r) => n + Number(r.textContent.split(": ")[1]), 0)`)
		require.Equal(t, 6, started, "every run started this hour, in one column or two")
		require.Equal(t, 2, eval[int](t, ctx, `[...document.querySelectorAll("rect.failed")].reduce((n, r) => n + Number(r.textContent.split(": ")[1]), 0)`),
			"two runs failed and were not replayed since")
		require.Equal(t, 2, eval[int](t, ctx, `document.querySelectorAll("#chart-latency rect.p99").length`), "validate and charge")
		require.Equal(t, int32(0), opened.Load(), "no page opened a dialog")
	})

}

// TestInABrowserTheTokenIsRequired: with a token, a browser gets 401 and
// the login form, and the page it asked for once it signed in.
func TestInABrowserTheTokenIsRequired(t *testing.T) {
	t.Parallel()
	fx := dashboardtest.New(t, dashboard.Config{Token: "browser-t0ken"})
	ctx := browser(t)
	require.Equal(t, int64(http.StatusUnauthorized), open(t, ctx, fx.Srv.URL+"/failed"))
	require.NoError(t, chromedp.Do(ctx, chromedp.WaitVisible(chromedp.ID("token")), chromedp.SendKeys(chromedp.ID("token"), "wrong")))
	resp, err := chromedp.RunResponse(ctx, chromedp.Click(chromedp.ID("login")))
	require.NoError(t, err)
	require.Equal(t, int64(http.StatusUnauthorized), resp.Status)
	require.Contains(t, text(t, ctx, "login-error"), "not the dashboard's")

	require.NoError(t, chromedp.Do(ctx, chromedp.SendKeys(chromedp.ID("token"), "browser-t0ken")))
	resp, err = chromedp.RunResponse(ctx, chromedp.Click(chromedp.ID("login")))
	require.NoError(t, err)
	require.Equal(t, int64(http.StatusOK), resp.Status)
	loc, err := chromedp.Run(ctx, chromedp.Location())
	require.NoError(t, err)
	require.Equal(t, fx.Srv.URL+"/failed", loc, "back to the page it asked for")
	require.Equal(t, "No failed runs.", text(t, ctx, "no-failed"))
}

// TestInABrowserGroupReplay: in headless Chromium, a group of 150 failed
// runs is replayed from /failed: the confirmation asks for all of them,
// confirming leads at once to the replay's page, which shows its progress
// and follows it by itself until it shows the result (every run
// replayed); that page can be reloaded without replaying anything again;
// every run completes, replayed once.
func TestInABrowserGroupReplay(t *testing.T) {
	t.Parallel()
	const n = 150
	// Each run's lookup takes 20 ms: the replay takes three seconds or so,
	// long enough for its progress page to be seen.
	fx := dashboardtest.New(t, dashboard.Config{}, 20*time.Millisecond)
	ctx := browser(t)
	opened := dialogs(t, ctx)
	var orders []dashboardtest.Order
	for i := range n {
		orders = append(orders, dashboardtest.Order{ID: fmt.Sprint(i), Fail: fmt.Sprintf("card %d declined", 1000+i)})
	}
	ids := fx.StartAll(orders, journal.Failed)
	fx.H.WaitDepth(fx.Flow+".charge"+broker.DeadLetterSuffix, n, 10*time.Second)

	require.Equal(t, int64(http.StatusOK), open(t, ctx, fx.Srv.URL+"/failed"))
	resp, err := chromedp.RunResponse(ctx, chromedp.Click(`.group button.replay-group`, chromedp.NodeVisible))
	require.NoError(t, err)
	require.Equal(t, int64(http.StatusOK), resp.Status)
	require.Equal(t, fmt.Sprintf("Replay %d runs?", n), text(t, ctx, "confirm-title"))

	resp, err = chromedp.RunResponse(ctx, chromedp.Click(chromedp.ID("confirm")))
	require.NoError(t, err)
	require.Equal(t, int64(http.StatusOK), resp.Status)
	require.Equal(t, fmt.Sprintf("Replaying %d runs…", n), text(t, ctx, "replaying"), "the answer comes before the replay is done")
	require.Equal(t, n, eval[int](t, ctx, `Number(document.getElementById("progress").max)`))
	screenshot(t, ctx, "dashboard-group-replaying")
	require.NoError(t, chromedp.Do(ctx, chromedp.WaitVisible(chromedp.ID("results"))), "the page follows the replay to its end")
	require.Equal(t, fmt.Sprintf("Replayed %d of %d runs", n, n), text(t, ctx, "replayed"))
	outcomes := eval[[]string](t, ctx, `[...document.querySelectorAll("#results tr[data-run]")].map(r => r.dataset.outcome)`)
	require.Len(t, outcomes, n)
	for _, o := range outcomes {
		require.Equal(t, "replayed", o)
	}
	loc, err := chromedp.Run(ctx, chromedp.Location())
	require.NoError(t, err)
	require.Regexp(t, `/failed/replay/[A-Z0-9]+$`, loc, "an address to come back to")
	screenshot(t, ctx, "dashboard-group-replay")

	require.Equal(t, int64(http.StatusOK), open(t, ctx, loc))
	require.Equal(t, fmt.Sprintf("Replayed %d of %d runs", n, n), text(t, ctx, "replayed"), "reloaded")
	for _, id := range ids {
		fx.Wait(id, journal.Completed)
	}
	for _, id := range ids {
		require.Equal(t, 1, fx.Replays(id), "run %s replayed once", id)
		require.Equal(t, 2, fx.Charges(id), "run %s charged once more", id)
	}
	require.Equal(t, int32(0), opened.Load(), "no page opened a dialog")
}

// TestInABrowserBranches: a run whose ForEach went over a thousand items
// shows each fork with a page of its branches, each with its steps and
// status; the next page is a click away, the branches given up or
// stopped another, and one branch opens by its number.
func TestInABrowserBranches(t *testing.T) {
	t.Parallel()
	srv := dashboardtest.Forked(t, "r-forked", 1000, 700, dashboard.Config{PageSize: 20})
	ctx := browser(t)
	opened := dialogs(t, ctx)
	branches := func(fork string) []string {
		return eval[[]string](t, ctx, `[...document.querySelectorAll("#`+fork+` tbody.branch")].map(b => b.dataset.branch + ":" + b.dataset.status)`)
	}

	require.Equal(t, int64(http.StatusOK), open(t, ctx, srv.URL+"/runs/r-forked"))
	require.Equal(t, []string{"0:arrived", "1:arrived"}, branches("fork-0"))
	require.Equal(t, "fired", eval[string](t, ctx, `document.querySelector("#fork-0 .join").dataset.joinState`))
	require.Equal(t, []string{"pick", "reserve", "fulfil"},
		eval[[]string](t, ctx, `[...document.querySelectorAll('#fork-0 tbody[data-branch="0"] tr')].map(r => r.cells[r.cells.length - 8].textContent)`),
		"branch 0's steps, then its arrival")
	each := branches("fork-1")
	require.Len(t, each, 20)
	require.Equal(t, "0:arrived", each[0])
	require.Contains(t, text(t, ctx, "fork-1"), "704 handed out, 296 not handed out")
	require.Equal(t, "failed", eval[string](t, ctx, `document.querySelector("#fork-1 .join").dataset.joinState`))
	screenshot(t, ctx, "dashboard-branches")

	_, err := chromedp.RunResponse(ctx, chromedp.Click(`#fork-1 a.next`, chromedp.NodeVisible))
	require.NoError(t, err)
	each = branches("fork-1")
	require.Equal(t, []string{"20:arrived", "39:arrived"}, []string{each[0], each[19]}, "the second page")
	require.Equal(t, []string{"0:arrived", "1:arrived"}, branches("fork-0"), "the other fork as it was")

	_, err = chromedp.RunResponse(ctx, chromedp.Click(`#fork-1 .fork-nav a[href*="show=failed"]`, chromedp.NodeVisible))
	require.NoError(t, err)
	require.Equal(t, []string{"700:failed", "701:stopped", "702:stopped", "703:stopped"}, branches("fork-1"))
	require.Contains(t, eval[string](t, ctx, `document.querySelector('#fork-1 tbody[data-branch="700"]').textContent`), "no square for you")

	require.NoError(t, chromedp.Do(ctx, chromedp.SetValue(`#fork-1 input.branch-no`, "512")))
	_, err = chromedp.RunResponse(ctx, chromedp.Submit(`#fork-1 input.branch-no`))
	require.NoError(t, err)
	require.Equal(t, []string{"512:arrived"}, branches("fork-1"))
	require.Contains(t, eval[string](t, ctx, `document.querySelector('#fork-1 tbody[data-branch="512"]').textContent`), "item 512 arrived")
	loc, err := chromedp.Run(ctx, chromedp.Location())
	require.NoError(t, err)
	require.Contains(t, loc, "branch=512")
	require.Contains(t, loc, "#fork-1", "back at the fork")
	require.Equal(t, int32(0), opened.Load(), "no page opened a dialog")
}

// TestInABrowserSignalAndCancel: a waiting run's page says what it waits
// for; its form sends the signal typed in, and the run completes. Another
// run's Cancel button does nothing until its confirmation is ticked, then
// cancels the run with the reason typed in.
func TestInABrowserSignalAndCancel(t *testing.T) {
	t.Parallel()
	fx := dashboardtest.New(t, dashboard.Config{})
	ctx := browser(t)
	waiting := fx.StartWaiting(dashboardtest.Order{ID: "o-1"})
	require.Equal(t, int64(http.StatusOK), open(t, ctx, fx.Srv.URL+"/runs/"+waiting))
	require.Equal(t, "waiting", text(t, ctx, "status"))
	require.Contains(t, text(t, ctx, "waiting"), "Waiting for the signal approval until")
	require.NoError(t, chromedp.Do(ctx, chromedp.SetValue(chromedp.ID("signal-payload"), `{"by":"ada"}`)))
	require.NoError(t, chromedp.Do(ctx, chromedp.Click(chromedp.ID("signal"))))
	require.False(t, eval[bool](t, ctx, `document.getElementById("signal-form").checkValidity()`), "the confirmation is not ticked")
	require.Equal(t, journal.Waiting, fx.Wait(waiting, journal.Waiting).Status, "nothing was sent")
	require.NoError(t, chromedp.Do(ctx,
		chromedp.SendKeys(chromedp.ID("signal-reason"), "approved"),
		chromedp.Click(chromedp.ID("signal-confirm")),
	))
	resp, err := chromedp.RunResponse(ctx, chromedp.Click(chromedp.ID("signal")))
	require.NoError(t, err)
	require.Equal(t, int64(http.StatusOK), resp.Status)
	require.Contains(t, text(t, ctx, "flash"), "Signal sent")
	fx.Wait(waiting, journal.Completed)

	other := fx.StartWaiting(dashboardtest.Order{ID: "o-2"})
	require.Equal(t, int64(http.StatusOK), open(t, ctx, fx.Srv.URL+"/runs/"+other))
	require.NoError(t, chromedp.Do(ctx, chromedp.Click(chromedp.ID("cancel"))))
	require.False(t, eval[bool](t, ctx, `document.getElementById("cancel-form").checkValidity()`), "the confirmation is not ticked")
	require.Equal(t, journal.Waiting, fx.Wait(other, journal.Waiting).Status, "nothing was sent")
	require.NoError(t, chromedp.Do(ctx,
		chromedp.SendKeys(chromedp.ID("cancel-reason"), "not wanted"),
		chromedp.Click(chromedp.ID("cancel-confirm")),
	))
	resp, err = chromedp.RunResponse(ctx, chromedp.Click(chromedp.ID("cancel")))
	require.NoError(t, err)
	require.Equal(t, int64(http.StatusOK), resp.Status)
	require.Contains(t, text(t, ctx, "flash"), "Cancelled")
	r := fx.Wait(other, journal.Cancelled)
	require.Equal(t, "cancelled by dashboard: not wanted", r.Error)
}

// TestInABrowserReplayFrom: a completed run's page offers to replay it
// from the steps whose input the journal kept; the form needs its
// confirmation ticked, then re-runs the run from the step chosen, which
// runs again (the step before it does not), and the timeline says so.
func TestInABrowserReplayFrom(t *testing.T) {
	t.Parallel()
	fx := dashboardtest.New(t, dashboard.Config{})
	ctx := browser(t)
	run := fx.Start(dashboardtest.Order{ID: "o-1"}, journal.Completed)
	require.Equal(t, 1, fx.Charges(run))
	require.Equal(t, int64(http.StatusOK), open(t, ctx, fx.Srv.URL+"/runs/"+run))
	steps := eval[[]string](t, ctx, `[...document.querySelectorAll("#replay-from-step option")].map(o => o.value)`)
	require.Equal(t, []string{"validate", "charge"}, steps)
	require.Contains(t, text(t, ctx, "replay-from"), "Nothing is compensated first")

	require.NoError(t, chromedp.Do(ctx, chromedp.Click(chromedp.ID("replay-from-submit"))))
	require.False(t, eval[bool](t, ctx, `document.getElementById("replay-from-form").checkValidity()`), "the confirmation is not ticked")
	require.Equal(t, 0, fx.Wait(run, journal.Completed).Replays, "nothing was sent")

	require.NoError(t, chromedp.Do(ctx,
		chromedp.SetValue(chromedp.ID("replay-from-step"), "charge"),
		chromedp.SendKeys(chromedp.ID("replay-from-reason"), "charged twice?"),
		chromedp.Click(chromedp.ID("replay-from-confirm")),
	))
	resp, err := chromedp.RunResponse(ctx, chromedp.Click(chromedp.ID("replay-from-submit")))
	require.NoError(t, err)
	require.Equal(t, int64(http.StatusOK), resp.Status)
	require.Contains(t, text(t, ctx, "flash"), "Replayed from the step chosen")
	require.Eventually(t, func() bool { return fx.Charges(run) == 2 }, 10*time.Second, 20*time.Millisecond)
	require.Eventually(t, func() bool {
		r, err := fx.Journal.Run(context.Background(), run)
		return err == nil && r.Status == journal.Completed && r.Replays == 1
	}, 10*time.Second, 20*time.Millisecond, "completed again, replayed once")

	require.Equal(t, int64(http.StatusOK), open(t, ctx, fx.Srv.URL+"/runs/"+run))
	kinds := eval[[]string](t, ctx, `[...document.querySelectorAll("#timeline tr[data-kind]")].map(r => r.dataset.kind + ":" + r.dataset.outcome)`)
	require.Contains(t, kinds, "replay:replayed from charge by dashboard: charged twice?")
	require.Equal(t, "step:completed", kinds[len(kinds)-1])
	screenshot(t, ctx, "dashboard-replay-from")
}

// TestInABrowserCompensateAndStart: Compensate does nothing until its
// confirmation is ticked, then sends the run to be compensated, the
// timeline saying who asked (the token's name) and why; a flow's page
// offers a start form prefilled with an editable payload, which starts a
// run once confirmed, recorded likewise.
func TestInABrowserCompensateAndStart(t *testing.T) {
	t.Parallel()
	fx := dashboardtest.New(t, dashboard.Config{TokenName: "ops-ada"})
	ctx := browser(t)
	opened := dialogs(t, ctx)
	run := fx.Start(dashboardtest.Order{ID: "o-1", Fail: "declined"}, journal.Failed)
	require.Equal(t, int64(http.StatusOK), open(t, ctx, fx.Srv.URL+"/runs/"+run))
	require.NoError(t, chromedp.Do(ctx, chromedp.Click(chromedp.ID("compensate"))))
	require.False(t, eval[bool](t, ctx, `document.getElementById("compensate-form").checkValidity()`), "the confirmation is not ticked")
	require.Equal(t, journal.Failed, fx.Wait(run, journal.Failed).Status, "nothing was sent")
	require.NoError(t, chromedp.Do(ctx,
		chromedp.SendKeys(chromedp.ID("compensate-reason"), "order withdrawn"),
		chromedp.Click(chromedp.ID("compensate-confirm")),
	))
	screenshot(t, ctx, "dashboard-compensate-confirm")
	resp, err := chromedp.RunResponse(ctx, chromedp.Click(chromedp.ID("compensate")))
	require.NoError(t, err)
	require.Equal(t, int64(http.StatusOK), resp.Status)
	require.Contains(t, text(t, ctx, "flash"), "Sent to be compensated")
	fx.Wait(run, journal.Compensated)
	require.Equal(t, int64(http.StatusOK), open(t, ctx, fx.Srv.URL+"/runs/"+run))
	kinds := eval[[]string](t, ctx, `[...document.querySelectorAll("#timeline tr[data-kind]")].map(r => r.dataset.kind + ":" + r.dataset.outcome)`)
	require.Contains(t, kinds, "compensation:compensation asked by ops-ada: order withdrawn")

	resp, err = chromedp.RunResponse(ctx, chromedp.Click(chromedp.ID("flow-link")))
	require.NoError(t, err)
	require.Equal(t, int64(http.StatusOK), resp.Status)
	require.Equal(t, fx.Flow, text(t, ctx, "flow-name"))
	require.NoError(t, chromedp.Do(ctx, chromedp.SetValue(chromedp.ID("start-payload"), `{"id":"o-by-hand"}`)))
	require.NoError(t, chromedp.Do(ctx, chromedp.Click(chromedp.ID("start-run"))))
	require.False(t, eval[bool](t, ctx, `document.getElementById("start-form").checkValidity()`), "the confirmation is not ticked")
	require.NoError(t, chromedp.Do(ctx,
		chromedp.SendKeys(chromedp.ID("start-reason"), "by hand"),
		chromedp.Click(chromedp.ID("start-confirm")),
	))
	screenshot(t, ctx, "dashboard-start")
	resp, err = chromedp.RunResponse(ctx, chromedp.Click(chromedp.ID("start-run")))
	require.NoError(t, err)
	require.Equal(t, int64(http.StatusOK), resp.Status)
	require.Contains(t, text(t, ctx, "flash"), "Started")
	started := text(t, ctx, "run-id")
	fx.Wait(started, journal.Completed)
	require.Equal(t, int64(http.StatusOK), open(t, ctx, fx.Srv.URL+"/runs/"+started))
	kinds = eval[[]string](t, ctx, `[...document.querySelectorAll("#timeline tr[data-kind]")].map(r => r.dataset.kind + ":" + r.dataset.outcome)`)
	require.Equal(t, "start:started by ops-ada: by hand", kinds[0])
	require.Contains(t, text(t, ctx, "input"), "o-by-hand")
	require.Equal(t, int32(0), opened.Load(), "no dialog opened")
}
