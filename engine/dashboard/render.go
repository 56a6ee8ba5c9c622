package dashboard

import (
	"bytes"
	"encoding/json"
	"fmt"
	"html/template"
	"io/fs"
	"net/http"
	"net/url"
	"path"
	"strings"
	"time"
	"unicode/utf8"

	"github.com/acemq/acemq-flow/engine"
	"github.com/acemq/acemq-flow/engine/fleet"
	"github.com/acemq/acemq-flow/engine/journal"
	"github.com/acemq/acemq-flow/engine/timeline"
)

// view is what the layout renders around a page.
type view struct {
	// Nav is the page's entry in the navigation ("runs", "failed",
	// "charts", "fleet", "flows").
	Nav   string
	Title string
	// Refresh, when positive, reloads the page that many seconds later
	// (while its tab is visible).
	Refresh int
	Page    any

	CSRF     string
	CanAct   bool
	LoggedIn bool
}

var funcs = template.FuncMap{
	"pathEscape": url.PathEscape,
	"rfc3339":    func(t time.Time) string { return t.UTC().Format(time.RFC3339Nano) },
	"clock":      func(t time.Time) string { return t.UTC().Format("2006-01-02 15:04:05Z") },
	"dur":        human,
	"took": func(a, b time.Time) string {
		if a.IsZero() || b.IsZero() || !b.After(a) {
			return ""
		}
		return human(b.Sub(a))
	},
	"short": func(s string, n int) string {
		if utf8.RuneCountInString(s) <= n {
			return s
		}
		r := []rune(s)
		return string(r[:n]) + "…"
	},
	"isZero": func(t time.Time) bool { return t.IsZero() },
	// ago is how long before the first time the second was.
	"ago": ago,
	// rung is a ladder's queue without the ladder's name: "1h", "due".
	"rung": func(ladder, queue string) string { return strings.TrimPrefix(queue, ladder+".") },
	// secs is a fleet.Seconds as dur shows a duration.
	"secs": func(s fleet.Seconds) string { return human(time.Duration(s)) },
	"dec":  func(n int) int { return n - 1 },
	// child is the run id of the child run an event started ("" for none).
	"child": func(e journal.Event) string {
		if run, ok := timeline.Child(e); ok {
			return run
		}
		return ""
	},
}

// human is a duration as a person reads it: 340ms, 2.5s, 3m4s, 5h2m.
func human(d time.Duration) string {
	switch {
	case d < time.Millisecond:
		return fmt.Sprintf("%dµs", d.Microseconds())
	case d < time.Second:
		return fmt.Sprintf("%dms", d.Milliseconds())
	case d < time.Minute:
		return fmt.Sprintf("%.1fs", d.Seconds())
	case d < time.Hour:
		return d.Truncate(time.Second).String()
	default:
		return d.Truncate(time.Minute).String()
	}
}

// parsePages parses every page with the layout and the shared partials.
func parsePages() (map[string]*template.Template, error) {
	base, err := template.New("").Funcs(funcs).ParseFS(assets, "assets/templates/layout.html")
	if err != nil {
		return nil, fmt.Errorf("dashboard: parse layout: %w", err)
	}
	files, err := fs.Glob(assets, "assets/templates/*.html")
	if err != nil {
		return nil, fmt.Errorf("dashboard: list templates: %w", err)
	}
	pages := map[string]*template.Template{}
	for _, f := range files {
		name := strings.TrimSuffix(path.Base(f), ".html")
		if name == "layout" {
			continue
		}
		t, err := template.Must(base.Clone()).ParseFS(assets, f)
		if err != nil {
			return nil, fmt.Errorf("dashboard: parse %s: %w", f, err)
		}
		pages[name] = t
	}
	return pages, nil
}

// render writes page name inside the layout with status. A template that
// fails is a 500 with nothing of the half-rendered page.
func (d *Dashboard) render(w http.ResponseWriter, r *http.Request, status int, name string, page any) {
	v, ok := page.(view)
	if !ok {
		v = view{Page: page}
	}
	if v.Title == "" {
		v.Title = name
	}
	v.CSRF = d.csrfToken(w, r)
	v.CanAct = d.canAct()
	v.LoggedIn = d.signedIn(r)
	var buf bytes.Buffer
	if err := d.pages[name].ExecuteTemplate(&buf, "layout", v); err != nil {
		d.log.Error("dashboard page failed to render", "page", name, "error", err)
		http.Error(w, "the page could not be rendered", http.StatusInternalServerError)
		return
	}
	w.Header().Set("Content-Type", "text/html; charset=utf-8")
	w.WriteHeader(status)
	_, _ = w.Write(buf.Bytes())
}

// redact is raw, a payload of a run of flow, with the flow's secret
// fields masked (engine.Redact): by the secrets of the engine's flow, or
// of Config.Secrets for a flow the dashboard has no engine for. A flow
// known to neither is shown as it is: the dashboard cannot tell its
// secrets.
func (d *Dashboard) redact(flow string, raw json.RawMessage) json.RawMessage {
	if d.eng != nil {
		if fi, err := d.eng.Flow(flow); err == nil {
			return fi.Redact(raw)
		}
	}
	return engine.Redact(raw, d.cfg.Secrets[flow])
}

// fail answers status with a page saying msg.
func (d *Dashboard) fail(w http.ResponseWriter, r *http.Request, status int, msg string) {
	d.render(w, r, status, "error", view{Title: http.StatusText(status), Page: msg})
}
