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

// Serve serves h on ln until ctx ends, then shuts the server down (requests
// in flight get ShutdownTimeout to finish) and returns nil; it returns the
// server's error if it stops on its own. It closes ln either way. Request
// contexts derive from ctx, so a long request ends with it too.
func Serve(ctx context.Context, ln net.Listener, h http.Handler) error {
	srv := &http.Server{
		Handler:           h,
		ReadHeaderTimeout: 10 * time.Second,
		ReadTimeout:       30 * time.Second,
		WriteTimeout:      60 * time.Second,
		IdleTimeout:       2 * time.Minute,
		BaseContext:       func(net.Listener) context.Context { return ctx },
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
