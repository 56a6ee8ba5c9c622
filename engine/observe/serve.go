package observe

import (
	"context"
	"errors"
	"fmt"
	"net"
	"net/http"
	"time"
)

// ShutdownTimeout is how long a server whose context ended lets requests
// in flight finish before it closes their connections.
const ShutdownTimeout = 5 * time.Second

// ListenAndServe listens on addr ("127.0.0.1:9464"; port 0 picks one) and
// serves h until ctx ends; see Serve. It fails at once when addr cannot be
// listened on.
func ListenAndServe(ctx context.Context, addr string, h http.Handler) error {
	var lc net.ListenConfig
	ln, err := lc.Listen(ctx, "tcp", addr)
	if err != nil {
		return fmt.Errorf("listen on %s: %w", addr, err)
	}
	return Serve(ctx, ln, h)
}

// Serve serves h on ln until ctx ends, then shuts the server down and
// returns nil: it stops listening at once, and requests in flight (a
// replay the dashboard is carrying out) get ShutdownTimeout to finish
// before their connections are closed. It returns the server's error if it
// stops on its own, and closes ln either way.
func Serve(ctx context.Context, ln net.Listener, h http.Handler) error {
	srv := &http.Server{
		Handler:           h,
		ReadHeaderTimeout: 10 * time.Second,
		ReadTimeout:       30 * time.Second,
		WriteTimeout:      60 * time.Second,
		IdleTimeout:       2 * time.Minute,
		// Not cancelled with ctx: a request in flight finishes within
		// the shutdown's grace rather than being cut off.
		BaseContext: func(net.Listener) context.Context { return context.WithoutCancel(ctx) },
	}
	errc := make(chan error, 1)
	go func() { errc <- srv.Serve(ln) }()
	select {
	case err := <-errc:
		return fmt.Errorf("serve on %s: %w", ln.Addr(), err)
	case <-ctx.Done():
	}
	sctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), ShutdownTimeout)
	defer cancel()
	err := srv.Shutdown(sctx)
	if errors.Is(err, context.DeadlineExceeded) {
		err = srv.Close()
	}
	if serr := <-errc; !errors.Is(serr, http.ErrServerClosed) && err == nil {
		err = serr
	}
	if err != nil {
		return fmt.Errorf("shut down server on %s: %w", ln.Addr(), err)
	}
	return nil
}
