package browser

import (
	"net/http"
	"testing"

	"github.com/chromedp/chromedp"
	"github.com/stretchr/testify/require"

	"github.com/acemq/acemq-flow/engine/dashboard"
	"github.com/acemq/acemq-flow/internal/dashboardtest"
)

// TestInABrowserLogOutOnlyWhenSignedIn: the login form has no "Log out";
// once signed in every page has it, and clicking it leads back to the
// login form, without it again, and the pages ask for the token.
func TestInABrowserLogOutOnlyWhenSignedIn(t *testing.T) {
	t.Parallel()
	fx := dashboardtest.New(t, dashboard.Config{Token: "browser-t0ken"})
	ctx := browser(t)
	logouts := func() int { return eval[int](t, ctx, `document.querySelectorAll("#logout").length`) }

	require.Equal(t, int64(http.StatusUnauthorized), open(t, ctx, fx.Srv.URL+"/failed"))
	require.Zero(t, logouts(), "not signed in")
	require.NoError(t, chromedp.Do(ctx, chromedp.WaitVisible(chromedp.ID("token")), chromedp.SendKeys(chromedp.ID("token"), "browser-t0ken")))
	resp, err := chromedp.RunResponse(ctx, chromedp.Click(chromedp.ID("login")))
	require.NoError(t, err)
	require.Equal(t, int64(http.StatusOK), resp.Status)
	require.Equal(t, 1, logouts(), "signed in")

	resp, err = chromedp.RunResponse(ctx, chromedp.Click(chromedp.ID("logout")))
	require.NoError(t, err)
	require.Equal(t, int64(http.StatusOK), resp.Status)
	require.Equal(t, 1, eval[int](t, ctx, `document.querySelectorAll("#token").length`), "the login form")
	require.Zero(t, logouts(), "signed out")
	require.Equal(t, int64(http.StatusUnauthorized), open(t, ctx, fx.Srv.URL+"/failed"))
}
