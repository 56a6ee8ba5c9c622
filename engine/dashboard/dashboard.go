package dashboard

import (
	"context"
	"crypto/rand"
	"embed"
	"errors"
	"fmt"
	"html/template"
	"io/fs"
	"log/slog"
	"net/http"
	"time"

	"github.com/acemq/acemq-flow/engine"
	"github.com/acemq/acemq-flow/engine/journal"
	"github.com/acemq/acemq-flow/engine/observe"
)

// Defaults of Config.
const (
	// DefaultPageSize is how many runs a page of the runs list shows.
	DefaultPageSize = 50
	// DefaultMaxGroupReplay is how many runs one group replay replays at
	// most: as many as /failed groups.
	DefaultMaxGroupReplay = 1000
	// DefaultMaxFailed is how many failed runs /failed groups (the newest).
	DefaultMaxFailed = 1000
	// DefaultChartSample is how many runs' timelines /charts reads for
	// step times (the newest of the hour).
	DefaultChartSample = 200
	// DefaultActionTimeout bounds one replay or compensation.
	DefaultActionTimeout = 30 * time.Second
	// DefaultGroupReplayTimeout bounds one group replay.
	DefaultGroupReplayTimeout = 15 * time.Minute
	// DefaultSessionMaxAge is how long a browser stays signed in.
	DefaultSessionMaxAge = 12 * time.Hour
	// DefaultSessionIdle is how long a session lasts with no page asked.
	DefaultSessionIdle = time.Hour
)

// maxChartRuns caps the runs /charts reads for its counts.
const maxChartRuns = 20_000

// ErrInvalidConfig: a Config the dashboard cannot use.
var ErrInvalidConfig = errors.New("invalid dashboard config")

// Config configures New.
type Config struct {
	// Journal is read for every page (nil = Engine's journal). One of
	// Journal and Engine is required.
	Journal journal.Journal
	// Engine replays and compensates runs and names the flows (nil: the
	// dashboard only reads). Its flows must be registered; it needs no
	// worker.
	Engine *engine.Engine
	// ReadOnly hides and refuses replay and compensate even with an
	// Engine.
	ReadOnly bool
	// Token, when set, is required on every page (see the package
	// documentation).
	Token string
	// TokenName names who holds Token: the actor the run's timeline
	// records for a replay, compensation, cancellation, signal or start
	// asked from the dashboard or its API ("" = DefaultActor).
	TokenName string
	// Hosts are the host names (without port) the dashboard answers to
	// when it has no Token, besides IP addresses and localhost.
	Hosts []string
	// Logger receives a line per replay and compensation (nil =
	// slog.Default()).
	Logger *slog.Logger
	// PageSize is the runs list's page, and how many branches of a fork a
	// run page shows at a time (0 = DefaultPageSize).
	PageSize int
	// MaxGroupReplay caps one group replay (0 = DefaultMaxGroupReplay).
	MaxGroupReplay int
	// MaxFailed caps the failed runs /failed groups (0 = DefaultMaxFailed).
	MaxFailed int
	// ChartSample caps the timelines /charts reads (0 =
	// DefaultChartSample).
	ChartSample int
	// ActionTimeout bounds one replay or compensation (0 =
	// DefaultActionTimeout).
	ActionTimeout time.Duration
	// GroupReplayTimeout bounds one group replay, which runs in the
	// background (0 = DefaultGroupReplayTimeout): once it passes, the
	// replay stops between messages, as Close stops it.
	GroupReplayTimeout time.Duration
	// Secrets are the secret paths of flows by name (engine.Secrets), for
	// the flows the dashboard has no Engine for: a run's payload is shown
	// with them masked. An Engine's flows bring their own
	// (engine.FlowInfo.Secrets).
	Secrets map[string][]string
	// SessionMaxAge is how long a browser's session lasts after its
	// sign-in, however busy (0 = DefaultSessionMaxAge); SessionIdle how
	// long it lasts with no page asked for (0 = DefaultSessionIdle; a page
	// that reloads itself keeps it alive).
	SessionMaxAge time.Duration
	SessionIdle   time.Duration
	// Now is the clock (nil = time.Now), for tests of time windows,
	// sessions and sign-in throttling.
	Now func() time.Time
}

// Dashboard is the dashboard: an http.Handler. It owns the group replays
// it carries out in the background; Close stops them.
type Dashboard struct {
	cfg     Config
	journal journal.Journal
	eng     *engine.Engine
	log     *slog.Logger
	pages   map[string]*template.Template
	mux     *http.ServeMux
	// csrfKey signs CSRF nonces; made anew by each New.
	csrfKey []byte
	// sessionKey signs session cookies (made from the token); throttle
	// counts wrong tokens; sessions are those logged out (auth.go).
	sessionKey []byte
	throttle   *throttle
	sessions   *sessions
	// replays are the group replays running and lately done.
	replays *replays
}

//go:embed assets
var assets embed.FS

// New returns the dashboard cfg describes; Close it when done. It
// refuses, with an error matching ErrInvalidConfig, a config with neither
// Journal nor Engine and negative sizes or durations.
func New(cfg Config) (*Dashboard, error) {
	if cfg.Journal == nil && cfg.Engine == nil {
		return nil, fmt.Errorf("%w: needs a Journal or an Engine", ErrInvalidConfig)
	}
	if cfg.PageSize < 0 || cfg.MaxGroupReplay < 0 || cfg.MaxFailed < 0 || cfg.ChartSample < 0 || cfg.ActionTimeout < 0 || cfg.GroupReplayTimeout < 0 ||
		cfg.SessionMaxAge < 0 || cfg.SessionIdle < 0 {
		return nil, fmt.Errorf("%w: negative size or duration", ErrInvalidConfig)
	}
	if cfg.Journal == nil {
		cfg.Journal = cfg.Engine.Journal()
	}
	if cfg.Logger == nil {
		cfg.Logger = slog.Default()
	}
	if cfg.PageSize == 0 {
		cfg.PageSize = DefaultPageSize
	}
	if cfg.MaxGroupReplay == 0 {
		cfg.MaxGroupReplay = DefaultMaxGroupReplay
	}
	if cfg.MaxFailed == 0 {
		cfg.MaxFailed = DefaultMaxFailed
	}
	if cfg.ChartSample == 0 {
		cfg.ChartSample = DefaultChartSample
	}
	if cfg.ActionTimeout == 0 {
		cfg.ActionTimeout = DefaultActionTimeout
	}
	if cfg.GroupReplayTimeout == 0 {
		cfg.GroupReplayTimeout = DefaultGroupReplayTimeout
	}
	if cfg.Now == nil {
		cfg.Now = time.Now
	}
	if cfg.SessionMaxAge == 0 {
		cfg.SessionMaxAge = DefaultSessionMaxAge
	}
	if cfg.SessionIdle == 0 {
		cfg.SessionIdle = DefaultSessionIdle
	}
	pages, err := parsePages()
	if err != nil {
		return nil, err
	}
	d := &Dashboard{cfg: cfg, journal: cfg.Journal, eng: cfg.Engine, log: cfg.Logger, pages: pages,
		mux: http.NewServeMux(), csrfKey: make([]byte, 32), replays: newReplays(), throttle: newThrottle(), sessions: newSessions()}
	rand.Read(d.csrfKey) // never fails: it crashes the process first
	if cfg.Token != "" {
		d.sessionKey = sessionKeyOf(cfg.Token)
	}
	static, err := fs.Sub(assets, "assets/static")
	if err != nil {
		return nil, fmt.Errorf("dashboard: assets: %w", err)
	}
	d.mux.Handle("GET /static/", http.StripPrefix("/static/", http.FileServerFS(static)))
	d.mux.HandleFunc("GET /login", d.loginPage)
	d.mux.HandleFunc("POST /login", d.login)
	d.mux.HandleFunc("POST /logout", d.logout)
	d.mux.Handle("GET /{$}", d.page(d.runs))
	d.mux.Handle("GET /runs/{id}", d.page(d.run))
	d.mux.Handle("POST /runs/{id}/replay", d.action(d.replay))
	d.mux.Handle("POST /runs/{id}/compensate", d.action(d.compensate))
	d.mux.Handle("POST /runs/{id}/replay-from", d.action(d.replayFrom))
	d.mux.Handle("POST /runs/{id}/cancel", d.action(d.cancelRun))
	d.mux.Handle("POST /runs/{id}/signal", d.action(d.signal))
	d.mux.Handle("GET /failed", d.page(d.failed))
	d.mux.Handle("POST /failed/replay", d.action(d.replayGroup))
	d.mux.Handle("GET /failed/replay/{id}", d.page(d.groupReplayPage))
	d.mux.Handle("GET /charts", d.page(d.charts))
	d.mux.Handle("GET /fleet", d.page(d.fleet))
	d.mux.Handle("GET /flows", d.page(d.flowsList))
	d.mux.Handle("GET /flows/{flow}", d.page(d.flowPage))
	d.mux.Handle("POST /flows/{flow}/start", d.action(d.startRun))
	d.routeAPI()
	d.mux.Handle("/", d.page(func(w http.ResponseWriter, r *http.Request) {
		d.fail(w, r, http.StatusNotFound, "No such page.")
	}))
	return d, nil
}

// Close stops the group replay running, if any, between two messages
// (nothing is half-moved, and what it did is recorded), and waits for it
// until ctx ends. Pages are still served; a group replay asked for after
// Close is refused.
func (d *Dashboard) Close(ctx context.Context) error { return d.replays.close(ctx) }

// ListenAndServe serves h (a dashboard from New) on addr until ctx ends,
// then shuts it down: what `acemq-flow dashboard --addr` does. It does not
// close the dashboard.
func ListenAndServe(ctx context.Context, addr string, h http.Handler) error {
	return observe.ListenAndServe(ctx, addr, h)
}

// ServeHTTP sets the security headers every answer carries, refuses a
// host it does not answer to, then routes.
func (d *Dashboard) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	h := w.Header()
	h.Set("Content-Security-Policy", "default-src 'none'; script-src 'self'; style-src 'self'; img-src 'self' data:; "+
		"connect-src 'self'; form-action 'self'; frame-ancestors 'none'; base-uri 'none'")
	h.Set("X-Content-Type-Options", "nosniff")
	h.Set("X-Frame-Options", "DENY")
	h.Set("Referrer-Policy", "no-referrer")
	h.Set("Cache-Control", "no-store")
	if d.cfg.Token == "" && !d.hostAllowed(r.Host) {
		http.Error(w, "dashboard: this host name is not one the dashboard answers to (set a token, or list the name in its hosts)", http.StatusForbidden)
		return
	}
	d.mux.ServeHTTP(w, r)
}

// canAct reports whether replay and compensate are offered.
func (d *Dashboard) canAct() bool { return d.eng != nil && !d.cfg.ReadOnly }
