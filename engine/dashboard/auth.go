package dashboard

import (
	"crypto/hmac"
	"crypto/rand"
	"crypto/sha256"
	"crypto/subtle"
	"encoding/base64"
	"net"
	"net/http"
	"slices"
	"strings"
)

// Cookie names.
const (
	sessionCookie = "acemq_dashboard_session"
	csrfCookie    = "acemq_dashboard_csrf"
	// csrfField is the form field carrying the CSRF token.
	csrfField = "csrf"
)

// sessionValue is what a logged-in browser's cookie holds: an HMAC of the
// token, so that the cookie is not the token itself.
func sessionValue(token string) string {
	m := hmac.New(sha256.New, []byte(token))
	m.Write([]byte("acemq-flow dashboard session v1"))
	return base64.RawURLEncoding.EncodeToString(m.Sum(nil))
}

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
// one), and whether it came as an Authorization header.
func (d *Dashboard) authenticated(r *http.Request) (ok, bearer bool) {
	if d.cfg.Token == "" {
		return true, false
	}
	if auth, found := strings.CutPrefix(r.Header.Get("Authorization"), "Bearer "); found {
		return equal(auth, d.cfg.Token), true
	}
	if c, err := r.Cookie(sessionCookie); err == nil {
		return equal(c.Value, d.session), false
	}
	return false, false
}

// setSession gives the browser its session cookie.
func (d *Dashboard) setSession(w http.ResponseWriter, r *http.Request) {
	http.SetCookie(w, &http.Cookie{Name: sessionCookie, Value: d.session, Path: "/", HttpOnly: true,
		Secure: r.TLS != nil, SameSite: http.SameSiteLaxMode})
}

// page guards a page: a request without the token gets the login form
// (401); one with ?token= right gets the session cookie and the same
// address without it.
func (d *Dashboard) page(h http.HandlerFunc) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if tok := r.URL.Query().Get("token"); d.cfg.Token != "" && tok != "" {
			if !equal(tok, d.cfg.Token) {
				d.unauthorized(w, r, "That token is not the dashboard's.", r.URL.Path)
				return
			}
			d.setSession(w, r)
			u := *r.URL
			q := u.Query()
			q.Del("token")
			u.RawQuery = q.Encode()
			http.Redirect(w, r, u.RequestURI(), http.StatusSeeOther)
			return
		}
		if ok, _ := d.authenticated(r); !ok {
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
		ok, bearer := d.authenticated(r)
		if !ok {
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
	if r.Header.Get("Sec-Fetch-Site") == "cross-site" || !equal(r.PostFormValue("token"), d.cfg.Token) {
		d.unauthorized(w, r, "That token is not the dashboard's.", next)
		return
	}
	d.setSession(w, r)
	http.Redirect(w, r, next, http.StatusSeeOther)
}

// logout forgets the session cookie. It wants the page's CSRF token, so
// that another site cannot sign a person out.
func (d *Dashboard) logout(w http.ResponseWriter, r *http.Request) {
	if !d.csrfValid(r) {
		d.fail(w, r, http.StatusForbidden, "The form was stale or did not come from this dashboard: reload the page and try again.")
		return
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
