package dashboard_test

import (
	"net/http"
	"net/http/httptest"
	"net/url"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/acemq/acemq-flow/engine/dashboard"
	"github.com/acemq/acemq-flow/engine/journal"
	"github.com/acemq/acemq-flow/internal/dashboardtest"
	"github.com/acemq/acemq-flow/internal/testenv"
)

// clock is a settable clock for Config.Now.
type clock struct {
	mu sync.Mutex
	t  time.Time
}

func (c *clock) now() time.Time { c.mu.Lock(); defer c.mu.Unlock(); return c.t }

func (c *clock) add(d time.Duration) { c.mu.Lock(); defer c.mu.Unlock(); c.t = c.t.Add(d) }

// tokenDashboard is a dashboard with token on an empty journal, on clk
// (nil: the real clock), with cfg's session settings.
func tokenDashboard(t *testing.T, token string, clk *clock, cfg dashboard.Config) (*dashboard.Dashboard, *httptest.Server) {
	t.Helper()
	j, err := journal.NewMemory(0)
	require.NoError(t, err)
	cfg.Journal, cfg.Token, cfg.Logger = j, token, testenv.Logger(t)
	if clk != nil {
		cfg.Now = clk.now
	}
	d, err := dashboard.New(cfg)
	require.NoError(t, err)
	srv := httptest.NewServer(d)
	t.Cleanup(srv.Close)
	return d, srv
}

func login(t *testing.T, c *http.Client, srv *httptest.Server, token string) (int, *http.Response) {
	t.Helper()
	status, _, resp := dashboardtest.Do(t, c, http.MethodPost, srv.URL+"/login", url.Values{"token": {token}, "next": {"/failed"}}, nil)
	return status, resp
}

func sessionCookie(resp *http.Response) *http.Cookie {
	for _, ck := range resp.Cookies() {
		if ck.Name == "acemq_dashboard_session" {
			return ck
		}
	}
	return nil
}

// TestLoginIsThrottled: of 100 wrong tokens sent as fast as they go, 5
// are compared and the others refused with 429 and Retry-After, the
// right token too while the address is refused; the refusal doubles with
// each wrong token after it; once it is over the right token signs in. A
// wrong bearer token counts alike.
func TestLoginIsThrottled(t *testing.T) {
	t.Parallel()
	clk := &clock{t: time.Date(2026, 3, 1, 9, 0, 0, 0, time.UTC)}
	_, srv := tokenDashboard(t, "right-token", clk, dashboard.Config{})
	c := dashboardtest.Client(t)
	counts := map[int]int{}
	var retry string
	for i := range 100 {
		status, resp := login(t, c, srv, "wrong-"+strconv.Itoa(i))
		counts[status]++
		if status == http.StatusTooManyRequests && retry == "" {
			retry = resp.Header.Get("Retry-After")
		}
	}
	require.Equal(t, map[int]int{http.StatusUnauthorized: 5, http.StatusTooManyRequests: 95}, counts)
	require.Equal(t, "1", retry, "refused for a second after the fifth")
	status, resp := login(t, c, srv, "right-token")
	require.Equal(t, http.StatusTooManyRequests, status, "the right token waits as well")
	require.Nil(t, sessionCookie(resp))
	status, _, _ = dashboardtest.Do(t, c, http.MethodGet, srv.URL+"/failed", nil, map[string]string{"Authorization": "Bearer right-token"})
	require.Equal(t, http.StatusTooManyRequests, status, "a bearer token too")

	for _, want := range []string{"2", "4", "8"} {
		clk.add(time.Minute / 4)
		status, _ = login(t, c, srv, "wrong-again")
		require.Equal(t, http.StatusUnauthorized, status, "compared once the refusal is over")
		status, resp = login(t, c, srv, "wrong-again")
		require.Equal(t, http.StatusTooManyRequests, status)
		require.Equal(t, want, resp.Header.Get("Retry-After"), "doubled")
	}
	clk.add(8 * time.Second)
	status, resp = login(t, c, srv, "right-token")
	require.Equal(t, http.StatusSeeOther, status, "the right token signs in once the refusal is over")
	require.NotNil(t, sessionCookie(resp))
	status, _ = login(t, c, srv, "wrong-after")
	require.Equal(t, http.StatusUnauthorized, status, "signing in forgot the wrong tokens")

	status, _, _ = dashboardtest.Do(t, dashboardtest.Client(t), http.MethodGet, srv.URL+"/failed", nil, map[string]string{"Authorization": "Bearer nope"})
	require.Equal(t, http.StatusUnauthorized, status)
}

// TestLoginIsThrottledInRealTime: 100 wrong tokens sent as fast as they
// go on the real clock (which took 1.4 s, every one compared, before
// throttling) are nearly all refused uncompared.
func TestLoginIsThrottledInRealTime(t *testing.T) {
	t.Parallel()
	_, srv := tokenDashboard(t, "right-token", nil, dashboard.Config{})
	c := dashboardtest.Client(t)
	compared := 0
	start := time.Now()
	for i := range 100 {
		if status, _ := login(t, c, srv, "wrong-"+strconv.Itoa(i)); status != http.StatusTooManyRequests {
			compared++
		}
	}
	took := time.Since(start)
	// 5, then one more per refusal over (1 s, 2 s, ...) while they go.
	require.LessOrEqual(t, compared, 5+int(took/time.Second)+1, "in %s", took)
}

// TestLoginIsThrottledOverall: wrong tokens from many addresses, one
// each, refuse every address once there are 50 in a minute.
func TestLoginIsThrottledOverall(t *testing.T) {
	t.Parallel()
	clk := &clock{t: time.Date(2026, 3, 1, 9, 0, 0, 0, time.UTC)}
	d, _ := tokenDashboard(t, "right-token", clk, dashboard.Config{})
	post := func(addr, token string) *httptest.ResponseRecorder {
		req := httptest.NewRequest(http.MethodPost, "/login", strings.NewReader(url.Values{"token": {token}}.Encode()))
		req.Header.Set("Content-Type", "application/x-www-form-urlencoded")
		req.RemoteAddr = addr + ":40000"
		w := httptest.NewRecorder()
		d.ServeHTTP(w, req)
		return w
	}
	for i := range 50 {
		require.Equal(t, http.StatusUnauthorized, post("10.0.0."+strconv.Itoa(i), "wrong").Code, "address %d", i)
	}
	w := post("10.0.1.1", "right-token")
	require.Equal(t, http.StatusTooManyRequests, w.Code, "a new address is refused too")
	require.NotEmpty(t, w.Header().Get("Retry-After"))
	clk.add(time.Second)
	require.Equal(t, http.StatusSeeOther, post("10.0.1.1", "right-token").Code, "after the refusal")
}

// TestSessionsExpire: a session's cookie lasts until its idle timeout or
// its maximum age, whichever is first, and says so (Max-Age, Expires);
// the dashboard refuses a session idle too long, one too old however
// busy, and one logged out even if its cookie was kept.
func TestSessionsExpire(t *testing.T) {
	t.Parallel()
	clk := &clock{t: time.Date(2026, 3, 1, 9, 0, 0, 0, time.UTC)}
	_, srv := tokenDashboard(t, "right-token", clk, dashboard.Config{SessionMaxAge: 2 * time.Hour, SessionIdle: 30 * time.Minute})
	page := func(c *http.Client) (int, *http.Response) {
		status, _, resp := dashboardtest.Do(t, c, http.MethodGet, srv.URL+"/failed", nil, nil)
		return status, resp
	}

	c := dashboardtest.Client(t)
	status, resp := login(t, c, srv, "right-token")
	require.Equal(t, http.StatusSeeOther, status)
	ck := sessionCookie(resp)
	require.NotNil(t, ck)
	require.Equal(t, 30*60, ck.MaxAge, "the idle timeout comes first")
	require.Equal(t, clk.now().Add(30*time.Minute), ck.Expires)
	require.True(t, ck.HttpOnly)
	require.NotContains(t, ck.Value, "right-token")

	clk.add(20 * time.Minute)
	status, _ = page(c)
	require.Equal(t, http.StatusOK, status)
	clk.add(25 * time.Minute)
	status, _ = page(c)
	require.Equal(t, http.StatusOK, status, "seen 25 minutes ago: still live")
	clk.add(31 * time.Minute)
	status, _ = page(c)
	require.Equal(t, http.StatusUnauthorized, status, "idle for 31 minutes")

	c = dashboardtest.Client(t)
	status, _ = login(t, c, srv, "right-token")
	require.Equal(t, http.StatusSeeOther, status)
	for range 5 {
		clk.add(20 * time.Minute)
		status, resp = page(c)
		require.Equal(t, http.StatusOK, status)
	}
	clk.add(10 * time.Minute)
	status, resp = page(c)
	require.Equal(t, http.StatusOK, status, "1h50m old, busy")
	ck = sessionCookie(resp)
	require.NotNil(t, ck)
	require.Equal(t, 10*60, ck.MaxAge, "the maximum age comes first now")
	clk.add(10 * time.Minute)
	status, _ = page(c)
	require.Equal(t, http.StatusUnauthorized, status, "two hours old, however busy")

	c = dashboardtest.Client(t)
	status, resp = login(t, c, srv, "right-token")
	require.Equal(t, http.StatusSeeOther, status)
	kept := sessionCookie(resp)
	status, body, _ := dashboardtest.Do(t, c, http.MethodGet, srv.URL+"/failed", nil, nil)
	require.Equal(t, http.StatusOK, status)
	status, _, _ = dashboardtest.Do(t, c, http.MethodPost, srv.URL+"/logout", url.Values{"csrf": {dashboardtest.CSRF(t, body)}}, nil)
	require.Equal(t, http.StatusSeeOther, status)
	other := dashboardtest.Client(t)
	u, err := url.Parse(srv.URL)
	require.NoError(t, err)
	other.Jar.SetCookies(u, []*http.Cookie{{Name: kept.Name, Value: kept.Value, Path: "/"}})
	status, _ = page(other)
	require.Equal(t, http.StatusUnauthorized, status, "a cookie kept after logging out is refused")
}

// TestLogOutOnlyWhenSignedIn: the login form, and a page a bearer token
// opened, have no "Log out"; a signed-in browser's pages have it, and
// it is gone once it logged out.
func TestLogOutOnlyWhenSignedIn(t *testing.T) {
	t.Parallel()
	_, srv := tokenDashboard(t, "right-token", nil, dashboard.Config{})
	c := dashboardtest.Client(t)
	for _, p := range []string{"/login", "/failed"} {
		_, body, _ := dashboardtest.Do(t, c, http.MethodGet, srv.URL+p, nil, nil)
		require.NotContains(t, body, `id="logout"`, p)
		require.Contains(t, body, `id="token"`, p)
	}
	_, body, _ := dashboardtest.Do(t, c, http.MethodGet, srv.URL+"/failed", nil, map[string]string{"Authorization": "Bearer right-token"})
	require.Contains(t, body, "No failed runs.")
	require.NotContains(t, body, `id="logout"`, "a script has no session to end")

	status, _ := login(t, c, srv, "right-token")
	require.Equal(t, http.StatusSeeOther, status)
	_, body, _ = dashboardtest.Do(t, c, http.MethodGet, srv.URL+"/failed", nil, nil)
	require.Contains(t, body, `id="logout"`)
	status, _, _ = dashboardtest.Do(t, c, http.MethodPost, srv.URL+"/logout", url.Values{"csrf": {dashboardtest.CSRF(t, body)}}, nil)
	require.Equal(t, http.StatusSeeOther, status)
	_, body, _ = dashboardtest.Do(t, c, http.MethodGet, srv.URL+"/login", nil, nil)
	require.NotContains(t, body, `id="logout"`)

	_, open := tokenDashboard(t, "", nil, dashboard.Config{})
	_, body, _ = dashboardtest.Do(t, dashboardtest.Client(t), http.MethodGet, open.URL+"/failed", nil, nil)
	require.NotContains(t, body, `id="logout"`, "no token, no sign-in")
}
