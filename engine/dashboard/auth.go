package dashboard

import (
	"crypto/hmac"
	"crypto/rand"
	"crypto/sha256"
	"crypto/subtle"
	"encoding/base64"
	"fmt"
	"net"
	"net/http"
	"slices"
	"strconv"
	"strings"
	"sync"
	"time"
)

// Cookie names.
const (
	sessionCookie = "acemq_dashboard_session"
	csrfCookie    = "acemq_dashboard_csrf"
	// csrfField is the form field carrying the CSRF token.
	csrfField = "csrf"
)

func equal(a, b string) bool { return subtle.ConstantTimeCompare([]byte(a), []byte(b)) == 1 }

// hostAllowed: an IP address, localhost, or a name in Config.Hosts.
func (d *Dashboard) hostAllowed(hostport string) bool {
	host := hostport
	if h, _, err := net.SplitHostPort(hostport); err == nil {
		host = h
	}
	host = strings.Trim(host, "[]")
	if net.ParseIP(host) != nil || strings.EqualFold(host, "localhost") {
		return true
	}
	return slices.ContainsFunc(d.cfg.Hosts, func(h string) bool { return strings.EqualFold(h, host) })
}

// authenticated reports whether r carries the token (always true without
// one) as an Authorization header (bearer) or a live session cookie. A
// wrong bearer token counts against the request's address (checkToken);
// wait > 0 says the address is refused for that long without looking.
func (d *Dashboard) authenticated(w http.ResponseWriter, r *http.Request) (ok, bearer bool, wait time.Duration) {
	if d.cfg.Token == "" {
		return true, false, 0
	}
	if auth, found := strings.CutPrefix(r.Header.Get("Authorization"), "Bearer "); found {
		ok, wait := d.checkToken(r, auth)
		return ok, true, wait
	}
	s, live := d.readSession(r)
	if live {
		d.setSession(w, r, s)
	}
	return live, false, 0
}

// page guards a page: a request without the token gets the login form
// (401); one with ?token= right gets the session cookie and the same
// address without it; an address refused for its wrong tokens gets 429.
func (d *Dashboard) page(h http.HandlerFunc) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if tok := r.URL.Query().Get("token"); d.cfg.Token != "" && tok != "" {
			ok, wait := d.checkToken(r, tok)
			switch {
			case wait > 0:
				d.throttled(w, r, wait, r.URL.Path)
				return
			case !ok:
				d.unauthorized(w, r, "That token is not the dashboard's.", r.URL.Path)
				return
			}
			d.setSession(w, r, d.newSession())
			u := *r.URL
			q := u.Query()
			q.Del("token")
			u.RawQuery = q.Encode()
			http.Redirect(w, r, u.RequestURI(), http.StatusSeeOther)
			return
		}
		ok, _, wait := d.authenticated(w, r)
		switch {
		case wait > 0:
			d.throttled(w, r, wait, r.URL.RequestURI())
			return
		case !ok:
			d.unauthorized(w, r, "", r.URL.RequestURI())
			return
		}
		h(w, r)
	})
}

// action guards a POST that changes something: the token, an engine to
// act with, then the CSRF token (unless the token came as an
// Authorization header, which a browser never adds by itself).
func (d *Dashboard) action(h http.HandlerFunc) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		ok, bearer, wait := d.authenticated(w, r)
		switch {
		case wait > 0:
			d.throttled(w, r, wait, "/")
			return
		case !ok:
			d.unauthorized(w, r, "", "/")
			return
		}
		if !d.canAct() {
			d.fail(w, r, http.StatusForbidden, "This dashboard is read-only.")
			return
		}
		if r.Header.Get("Sec-Fetch-Site") == "cross-site" {
			d.fail(w, r, http.StatusForbidden, "A request from another site was refused.")
			return
		}
		if !bearer && !d.csrfValid(r) {
			d.fail(w, r, http.StatusForbidden, "The form was stale or did not come from this dashboard: reload the page and try again.")
			return
		}
		h(w, r)
	})
}

// unauthorized answers 401 with the login form, which leads to next once
// signed in.
func (d *Dashboard) unauthorized(w http.ResponseWriter, r *http.Request, msg, next string) {
	w.Header().Set("WWW-Authenticate", `Bearer realm="acemq-flow dashboard"`)
	d.render(w, r, http.StatusUnauthorized, "login", loginData{Next: localPath(next), Error: msg})
}

type loginData struct {
	Next  string
	Error string
}

func (d *Dashboard) loginPage(w http.ResponseWriter, r *http.Request) {
	if d.cfg.Token == "" {
		http.Redirect(w, r, "/", http.StatusSeeOther)
		return
	}
	d.render(w, r, http.StatusOK, "login", loginData{Next: localPath(r.URL.Query().Get("next"))})
}

// login checks the token a person typed and sets the session cookie.
func (d *Dashboard) login(w http.ResponseWriter, r *http.Request) {
	next := localPath(r.PostFormValue("next"))
	if d.cfg.Token == "" {
		http.Redirect(w, r, next, http.StatusSeeOther)
		return
	}
	if r.Header.Get("Sec-Fetch-Site") == "cross-site" {
		d.unauthorized(w, r, "That token is not the dashboard's.", next)
		return
	}
	ok, wait := d.checkToken(r, r.PostFormValue("token"))
	switch {
	case wait > 0:
		d.throttled(w, r, wait, next)
		return
	case !ok:
		d.unauthorized(w, r, "That token is not the dashboard's.", next)
		return
	}
	d.setSession(w, r, d.newSession())
	http.Redirect(w, r, next, http.StatusSeeOther)
}

// logout ends the session: its cookie is cleared, and the session is
// refused from then on even if its cookie was kept (until it would have
// expired anyway). It wants the page's CSRF token, so that another site
// cannot sign a person out.
func (d *Dashboard) logout(w http.ResponseWriter, r *http.Request) {
	if !d.csrfValid(r) {
		d.fail(w, r, http.StatusForbidden, "The form was stale or did not come from this dashboard: reload the page and try again.")
		return
	}
	if s, live := d.readSession(r); live {
		d.sessions.revoke(s.id, s.issued.Add(d.cfg.SessionMaxAge), d.cfg.Now())
	}
	http.SetCookie(w, &http.Cookie{Name: sessionCookie, Value: "", Path: "/", MaxAge: -1, HttpOnly: true, SameSite: http.SameSiteLaxMode})
	http.Redirect(w, r, "/login", http.StatusSeeOther)
}

// localPath keeps a redirect target on this site: a path, not "//host"
// nor a URL; anything else is "/".
func localPath(p string) string {
	if !strings.HasPrefix(p, "/") || strings.HasPrefix(p, "//") || strings.HasPrefix(p, "/\\") || strings.HasPrefix(p, "/login") {
		return "/"
	}
	return p
}

// csrfToken is the token forms carry, the nonce cookie set first when the
// browser has none.
func (d *Dashboard) csrfToken(w http.ResponseWriter, r *http.Request) string {
	nonce := ""
	if c, err := r.Cookie(csrfCookie); err == nil && len(c.Value) >= 32 {
		nonce = c.Value
	} else {
		var b [32]byte
		rand.Read(b[:])
		nonce = base64.RawURLEncoding.EncodeToString(b[:])
		http.SetCookie(w, &http.Cookie{Name: csrfCookie, Value: nonce, Path: "/", HttpOnly: true,
			Secure: r.TLS != nil, SameSite: http.SameSiteStrictMode})
	}
	return d.sign(nonce)
}

func (d *Dashboard) sign(nonce string) string {
	m := hmac.New(sha256.New, d.csrfKey)
	m.Write([]byte(nonce))
	return base64.RawURLEncoding.EncodeToString(m.Sum(nil))
}

// csrfValid: the form's token is the signature of the cookie's nonce.
func (d *Dashboard) csrfValid(r *http.Request) bool {
	c, err := r.Cookie(csrfCookie)
	if err != nil || c.Value == "" {
		return false
	}
	return equal(r.PostFormValue(csrfField), d.sign(c.Value))
}

// Sign-in throttling: wrong tokens (typed into the login form, in
// ?token=, or as a bearer header) are counted per client address and
// overall. Once an address has loginFailures of them within loginWindow
// it is refused with 429 and Retry-After for loginLockout, doubled at
// each further wrong token up to loginMaxLockout; every address is,
// likewise, once overallFailures come within loginWindow, for at most
// overallMaxLockout (short: it refuses the operator too). A refused
// request's token is not even compared: the right one waits as well. An
// address's count is forgotten loginWindow after its last wrong token
// once it is not refused, or at once when it presents the right token.
const (
	loginFailures     = 5
	overallFailures   = 50
	loginWindow       = time.Minute
	loginLockout      = time.Second
	loginMaxLockout   = 15 * time.Minute
	overallMaxLockout = time.Minute
	// maxThrottled bounds the addresses remembered: past it, those
	// forgotten already are dropped, and a new address counts overall
	// only.
	maxThrottled = 10_000
)

// strikes are the wrong tokens of one address (or of all).
type strikes struct {
	// n are the wrong tokens since from, which is at most loginWindow
	// ago; locks how often the address was refused since it was last
	// forgotten, until till.
	n     int
	from  time.Time
	last  time.Time
	locks int
	till  time.Time
}

// forgotten reports whether s no longer counts at now.
func (s *strikes) forgotten(now time.Time) bool {
	return now.Sub(s.last) > loginWindow && !now.Before(s.till)
}

// fail counts a wrong token at now against s, which limit of within
// loginWindow refuse for a lockout doubled each time up to most.
func (s *strikes) fail(now time.Time, limit int, most time.Duration) {
	if s.forgotten(now) {
		*s = strikes{}
	}
	if now.Sub(s.from) > loginWindow {
		s.n, s.from = 0, now
	}
	s.n++
	s.last = now
	if s.n >= limit {
		lock := most
		if s.locks < 20 {
			lock = min(loginLockout<<s.locks, most)
		}
		s.locks++
		s.till = now.Add(lock)
	}
}

// throttle holds the strikes of every address, and overall.
type throttle struct {
	mu      sync.Mutex
	addrs   map[string]*strikes
	overall strikes
}

func newThrottle() *throttle { return &throttle{addrs: map[string]*strikes{}} }

// wait is how long addr is refused at now (0: not).
func (t *throttle) wait(addr string, now time.Time) time.Duration {
	t.mu.Lock()
	defer t.mu.Unlock()
	w := t.overall.till.Sub(now)
	if s, ok := t.addrs[addr]; ok {
		w = max(w, s.till.Sub(now))
	}
	return max(w, 0)
}

// fail counts a wrong token from addr at now.
func (t *throttle) fail(addr string, now time.Time) {
	t.mu.Lock()
	defer t.mu.Unlock()
	t.overall.fail(now, overallFailures, overallMaxLockout)
	s, ok := t.addrs[addr]
	if !ok {
		if len(t.addrs) >= maxThrottled {
			for a, old := range t.addrs {
				if old.forgotten(now) {
					delete(t.addrs, a)
				}
			}
		}
		if len(t.addrs) >= maxThrottled {
			return
		}
		s = &strikes{}
		t.addrs[addr] = s
	}
	s.fail(now, loginFailures, loginMaxLockout)
}

// succeed forgets addr's wrong tokens.
func (t *throttle) succeed(addr string) {
	t.mu.Lock()
	defer t.mu.Unlock()
	delete(t.addrs, addr)
}

// clientAddr is the address a request came from: its peer's IP (a proxy
// in front of the dashboard is one address for every client behind it).
func clientAddr(r *http.Request) string {
	host, _, err := net.SplitHostPort(r.RemoteAddr)
	if err != nil {
		return r.RemoteAddr
	}
	return host
}

// checkToken compares tok with the dashboard's token, counting a wrong
// one against the request's address; wait > 0 says that the address, or
// every address, is refused for that long, and tok was not compared.
func (d *Dashboard) checkToken(r *http.Request, tok string) (ok bool, wait time.Duration) {
	addr, now := clientAddr(r), d.cfg.Now()
	if wait := d.throttle.wait(addr, now); wait > 0 {
		return false, wait
	}
	if !equal(tok, d.cfg.Token) {
		d.throttle.fail(addr, now)
		d.log.Warn("dashboard: wrong token", "remote", addr)
		return false, 0
	}
	d.throttle.succeed(addr)
	return true, 0
}

// throttled answers a request refused for its address's wrong tokens:
// 429, Retry-After in whole seconds, and the login form saying when to
// try again.
func (d *Dashboard) throttled(w http.ResponseWriter, r *http.Request, wait time.Duration, next string) {
	secs := int((wait + time.Second - 1) / time.Second)
	w.Header().Set("Retry-After", strconv.Itoa(secs))
	d.render(w, r, http.StatusTooManyRequests, "login", loginData{Next: localPath(next),
		Error: fmt.Sprintf("Too many wrong tokens: try again in %d s.", secs)})
}

// session is a browser's sign-in: a random id, when it signed in and when
// it was last seen. Its cookie holds them and their HMAC under a key made
// from the token (so that every dashboard of one token takes it, and a
// new token ends every session), never the token itself.
type session struct {
	id           string
	issued, seen time.Time
}

// sessionKeyOf is the key session cookies are signed with.
func sessionKeyOf(token string) []byte {
	m := hmac.New(sha256.New, []byte(token))
	m.Write([]byte("acemq-flow dashboard session v2"))
	return m.Sum(nil)
}

// newSession is a session signed in now.
func (d *Dashboard) newSession() session {
	var b [16]byte
	rand.Read(b[:])
	now := d.cfg.Now()
	return session{id: base64.RawURLEncoding.EncodeToString(b[:]), issued: now, seen: now}
}

func (d *Dashboard) sessionMAC(id string, issued, seen int64) string {
	m := hmac.New(sha256.New, d.sessionKey)
	fmt.Fprintf(m, "%s.%d.%d", id, issued, seen)
	return base64.RawURLEncoding.EncodeToString(m.Sum(nil))
}

// setSession gives the browser the cookie of s, seen now: it lasts until
// the session's idle timeout or its maximum age, whichever comes first.
func (d *Dashboard) setSession(w http.ResponseWriter, r *http.Request, s session) {
	now := d.cfg.Now()
	s.seen = now
	issued, seen := s.issued.Unix(), s.seen.Unix()
	ends := s.issued.Add(d.cfg.SessionMaxAge)
	if idle := now.Add(d.cfg.SessionIdle); idle.Before(ends) {
		ends = idle
	}
	http.SetCookie(w, &http.Cookie{Name: sessionCookie, Value: fmt.Sprintf("%s.%d.%d.%s", s.id, issued, seen, d.sessionMAC(s.id, issued, seen)),
		Path: "/", MaxAge: max(int(ends.Sub(now)/time.Second), 1), Expires: ends.UTC(), HttpOnly: true,
		Secure: r.TLS != nil, SameSite: http.SameSiteLaxMode})
}

// readSession is the session of r's cookie and whether it is live: signed
// by this token, not older than SessionMaxAge, seen within SessionIdle,
// and not logged out.
func (d *Dashboard) readSession(r *http.Request) (session, bool) {
	if d.cfg.Token == "" {
		return session{}, false
	}
	c, err := r.Cookie(sessionCookie)
	if err != nil {
		return session{}, false
	}
	parts := strings.Split(c.Value, ".")
	if len(parts) != 4 {
		return session{}, false
	}
	issued, err1 := strconv.ParseInt(parts[1], 10, 64)
	seen, err2 := strconv.ParseInt(parts[2], 10, 64)
	if err1 != nil || err2 != nil || !equal(parts[3], d.sessionMAC(parts[0], issued, seen)) {
		return session{}, false
	}
	s := session{id: parts[0], issued: time.Unix(issued, 0), seen: time.Unix(seen, 0)}
	now := d.cfg.Now()
	if now.Sub(s.issued) >= d.cfg.SessionMaxAge || now.Sub(s.seen) >= d.cfg.SessionIdle || d.sessions.revoked(s.id, now) {
		return session{}, false
	}
	return s, true
}

// signedIn reports whether r comes from a browser signed in with a live
// session: what the layout's "Log out" needs.
func (d *Dashboard) signedIn(r *http.Request) bool {
	_, live := d.readSession(r)
	return live
}

// sessions are the sessions logged out before they expired.
type sessions struct {
	mu  sync.Mutex
	out map[string]time.Time
}

func newSessions() *sessions { return &sessions{out: map[string]time.Time{}} }

// revoke refuses session id from now until it expires at ends.
func (s *sessions) revoke(id string, ends, now time.Time) {
	s.mu.Lock()
	defer s.mu.Unlock()
	for k, e := range s.out {
		if !now.Before(e) {
			delete(s.out, k)
		}
	}
	s.out[id] = ends
}

func (s *sessions) revoked(id string, now time.Time) bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	e, ok := s.out[id]
	return ok && now.Before(e)
}
