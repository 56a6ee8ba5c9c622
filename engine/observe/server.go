package observe

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"strings"
	"sync/atomic"
	"time"

	"github.com/acemq/acemq-flow/broker"
	"github.com/acemq/acemq-flow/broker/transport"
	"github.com/acemq/acemq-flow/engine"
)

// DefaultCheckTimeout bounds one /readyz request's checks together.
const DefaultCheckTimeout = 5 * time.Second

// Check is one condition of readiness: Run returns nil while it holds, or
// an error that says what is wrong.
type Check struct {
	// Name labels the check's line in /readyz's answer ("broker",
	// "database", "worker").
	Name string
	Run  func(ctx context.Context) error
}

// ServerConfig configures NewServer.
type ServerConfig struct {
	// Metrics is served at /metrics (nil: /metrics is 404).
	Metrics *Metrics
	// Checks decide /readyz, in order; none means ready whenever alive.
	Checks []Check
	// CheckTimeout bounds a /readyz request's checks together (0 =
	// DefaultCheckTimeout); a check still running then has failed.
	CheckTimeout time.Duration
}

// Server is the worker's HTTP handler: /metrics, /healthz and /readyz.
// Anything else is 404 and any method but GET or HEAD is 405. It is safe
// for concurrent use.
type Server struct {
	cfg ServerConfig
	mux *http.ServeMux
}

// NewServer returns the handler cfg describes. It refuses a check without
// a name or a function.
func NewServer(cfg ServerConfig) (*Server, error) {
	for i, c := range cfg.Checks {
		if c.Name == "" || c.Run == nil {
			return nil, fmt.Errorf("observe: check %d (%q) needs a name and a function", i, c.Name)
		}
	}
	if cfg.CheckTimeout < 0 {
		return nil, fmt.Errorf("observe: negative check timeout %s", cfg.CheckTimeout)
	}
	if cfg.CheckTimeout == 0 {
		cfg.CheckTimeout = DefaultCheckTimeout
	}
	s := &Server{cfg: cfg, mux: http.NewServeMux()}
	if cfg.Metrics != nil {
		s.mux.Handle("GET /metrics", cfg.Metrics.Handler())
	}
	s.mux.HandleFunc("GET /healthz", func(w http.ResponseWriter, _ *http.Request) { text(w, http.StatusOK, "ok\n") })
	s.mux.HandleFunc("GET /readyz", s.ready)
	return s, nil
}

// ServeHTTP serves the three paths.
func (s *Server) ServeHTTP(w http.ResponseWriter, r *http.Request) { s.mux.ServeHTTP(w, r) }

// ready runs every check and answers 200 when all hold, 503 otherwise,
// with one line per check either way.
func (s *Server) ready(w http.ResponseWriter, r *http.Request) {
	var b strings.Builder
	status := http.StatusOK
	for _, c := range Results(r.Context(), s.cfg.Checks, s.cfg.CheckTimeout) {
		if c.Error != "" {
			status = http.StatusServiceUnavailable
			// One line per check: a joined error's lines are run together.
			fmt.Fprintf(&b, "%s: %s\n", c.Name, strings.ReplaceAll(c.Error, "\n", "; "))
			continue
		}
		fmt.Fprintf(&b, "%s: ok\n", c.Name)
	}
	if status == http.StatusOK {
		b.WriteString("ready\n")
	} else {
		b.WriteString("not ready\n")
	}
	text(w, status, b.String())
}

func text(w http.ResponseWriter, status int, body string) {
	w.Header().Set("Content-Type", "text/plain; charset=utf-8")
	w.Header().Set("Cache-Control", "no-store")
	w.Header().Set("X-Content-Type-Options", "nosniff")
	w.WriteHeader(status)
	_, _ = w.Write([]byte(body))
}

// BrokerCheck is ready while conn is open, none of its consumers ended on
// its own (Conn.Health) and the broker answers a passive declare of the
// ladder's control queue now: a connection between two dials (which
// Health counts as healthy, as it will come back) is not ready. A broker
// answering that the queue does not exist has answered.
func BrokerCheck(conn *broker.Conn) Check {
	return Check{Name: "broker", Run: func(ctx context.Context) error {
		if err := conn.Health(); err != nil {
			return err
		}
		_, err := conn.Transport().Inspect(ctx, conn.Ladder()+broker.DueSuffix)
		if err != nil && !transport.IsCode(err, transport.NotFound) {
			return fmt.Errorf("broker %s does not answer: %w", conn.Name(), err)
		}
		return nil
	}}
}

// WorkerGate is the readiness of a worker that may not have started yet:
// its check fails until Set hands it the worker, then holds while every
// consumer of the worker runs (Worker.Err). The zero value is a gate with
// no worker. Safe for concurrent use.
type WorkerGate struct {
	w atomic.Pointer[engine.Worker]
}

// errNotStarted is the gate's answer before Set.
var errNotStarted = errors.New("worker not started yet (declaring topology, starting consumers)")

// Set hands the gate its worker; nil takes it back (the worker is
// closing).
func (g *WorkerGate) Set(w *engine.Worker) { g.w.Store(w) }

// Check is the gate as a readiness check named "worker": WorkerCheck
// of the gate's worker once it has one.
func (g *WorkerGate) Check() Check {
	return Check{Name: CheckWorker, Run: func(ctx context.Context) error {
		w := g.w.Load()
		if w == nil {
			return errNotStarted
		}
		return WorkerCheck(w).Run(ctx)
	}}
}
