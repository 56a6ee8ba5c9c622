package cli

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"net/netip"

	"github.com/spf13/cobra"

	"github.com/acemq/acemq-flow/engine"
	"github.com/acemq/acemq-flow/engine/observe"
)

// observer is a worker's HTTP endpoint for the machines that watch it
// (--metrics-addr): /metrics, /healthz and /readyz. Its listener is opened
// before anything connects, so that a bad address fails at once, and its
// MeterProvider is the one every connection of the command, and so every
// engine on them, records to.
type observer struct {
	ln      net.Listener
	metrics *observe.Metrics
	gate    observe.WorkerGate
}

// newObserver listens on addr and makes the app's connections record to
// a Prometheus-exported MeterProvider. It returns nil, and does nothing,
// when addr is "". Close it when the command ends.
func (a *app) newObserver(cmd *cobra.Command, addr string) (*observer, error) {
	if addr == "" {
		return nil, nil
	}
	ln, err := listen(cmd, "--metrics-addr", addr)
	if err != nil {
		return nil, err
	}
	m, err := observe.NewMetrics(observe.MetricsConfig{})
	if err != nil {
		ln.Close()
		return nil, err
	}
	a.meterProvider = m.MeterProvider()
	return &observer{ln: ln, metrics: m}, nil
}

// listen opens a TCP listener on addr, naming flag when it cannot.
func listen(cmd *cobra.Command, flag, addr string) (net.Listener, error) {
	var lc net.ListenConfig
	ln, err := lc.Listen(cmd.Context(), "tcp", addr)
	if err != nil {
		return nil, fmt.Errorf("%s %s: %w", flag, addr, err)
	}
	return ln, nil
}

// isLoopback reports whether a listener on addr accepts connections from
// this machine only.
func isLoopback(addr net.Addr) bool {
	ap, err := netip.ParseAddrPort(addr.String())
	return err == nil && ap.Addr().IsLoopback()
}

// run serves the endpoint for s while fn runs, then stops serving. fn is
// handed what to call with the worker once it started: from then on
// /readyz holds while every consumer of the worker runs (and the broker,
// and the database when there is one, answer). A nil observer runs fn
// alone, with nothing to call.
func (o *observer) run(ctx context.Context, s *session, fn func(started func(*engine.Worker)) error) error {
	if o == nil {
		return fn(nil)
	}
	if err := errors.Join(o.metrics.ObserveLadder(s.conn), o.metrics.ObserveFlows(s.eng)); err != nil {
		return err
	}
	// The broker's, the worker's, then the database's.
	base := s.readinessChecks()
	checks := append([]observe.Check{base[0], o.gate.Check()}, base[1:]...)
	if err := o.metrics.ObserveReadiness(checks...); err != nil {
		return err
	}
	srv, err := observe.NewServer(observe.ServerConfig{Metrics: o.metrics, Checks: checks})
	if err != nil {
		return err
	}
	log := s.conn.Logger()
	addr := o.ln.Addr().String()
	log.Info("serving metrics", slog.String("metrics", "http://"+addr+"/metrics"),
		slog.String("healthz", "http://"+addr+"/healthz"), slog.String("readyz", "http://"+addr+"/readyz"))
	if !isLoopback(o.ln.Addr()) {
		log.Info("the metrics endpoint can be reached from other machines", slog.String("metrics_addr", addr))
	}
	serveCtx, stop := context.WithCancel(ctx)
	served := make(chan error, 1)
	go func() { served <- observe.Serve(serveCtx, o.ln, srv) }()
	err = fn(o.gate.Set)
	stop()
	if serr := <-served; serr != nil {
		err = errors.Join(err, fmt.Errorf("--metrics-addr: %w", serr))
	}
	return err
}

// close stops the MeterProvider, and the listener if it was never served
// (Serve closes it otherwise), adding a failure to *err. Nil-safe.
func (o *observer) close(ctx context.Context, err *error) {
	if o == nil {
		return
	}
	o.ln.Close()
	if serr := o.metrics.Shutdown(context.WithoutCancel(ctx)); serr != nil {
		*err = errors.Join(*err, serr)
	}
}
