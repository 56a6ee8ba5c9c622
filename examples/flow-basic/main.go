// Flow-basic shows a flow at its simplest: three typed steps, each getting
// what the step before it returned. engine.Register compiles the flow to a
// declared pipeline (exchange signup, a queue per step); a worker in this
// process works it; Start starts a run, and the run journal records it
// until it has completed.
//
// It runs on the embedded in-process broker, with nothing installed:
//
//	go run ./examples/flow-basic
package main

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"os"
	"os/signal"
	"strings"
	"sync"
	"syscall"
	"time"

	"github.com/acemq/acemq-flow/broker"
	"github.com/acemq/acemq-flow/dsl"
	"github.com/acemq/acemq-flow/engine"
	"github.com/acemq/acemq-flow/engine/journal"
)

// Signup is the payload of a run: each step fills in more of it.
type Signup struct {
	Email     string `json:"email"`
	Name      string `json:"name"`
	AccountID string `json:"account_id,omitempty"`
	Welcome   string `json:"welcome,omitempty"`
}

func main() {
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	err := run(ctx, os.Stdout)
	stop()
	if err != nil {
		fmt.Fprintln(os.Stderr, "flow-basic:", err)
		os.Exit(1)
	}
}

func run(ctx context.Context, w io.Writer) (err error) {
	ctx, cancel := context.WithTimeout(ctx, 30*time.Second)
	defer cancel()
	out := &syncWriter{w: w}
	quiet := slog.New(slog.NewTextHandler(os.Stderr, &slog.HandlerOptions{Level: slog.LevelWarn}))
	conn, err := broker.Config{Logger: quiet}.Open(ctx, "memory://")
	if err != nil {
		return err
	}
	defer func() { err = errors.Join(err, conn.Close(context.WithoutCancel(ctx))) }()

	signup := dsl.Flow("signup",
		dsl.Step("normalize", func(_ context.Context, s Signup) (Signup, error) {
			s.Email = strings.ToLower(strings.TrimSpace(s.Email))
			out.printf("normalize: email %s\n", s.Email)
			return s, nil
		}),
		dsl.Step("create-account", func(_ context.Context, s Signup) (Signup, error) {
			s.AccountID = "acct-" + strings.SplitN(s.Email, "@", 2)[0]
			out.printf("create-account: %s\n", s.AccountID)
			return s, nil
		}),
		dsl.Step("welcome", func(_ context.Context, s Signup) (Signup, error) {
			s.Welcome = fmt.Sprintf("Welcome, %s! Your account is %s.", s.Name, s.AccountID)
			out.printf("welcome: %q to %s\n", s.Welcome, s.Email)
			return s, nil
		}),
	)

	eng, err := engine.New(engine.Config{Conn: conn})
	if err != nil {
		return err
	}
	defer func() { err = errors.Join(err, eng.Close(context.WithoutCancel(ctx))) }()
	if err := eng.Register(signup); err != nil {
		return err
	}
	worker, err := eng.StartWorker(ctx)
	if err != nil {
		return err
	}
	defer func() { err = errors.Join(err, worker.Close(context.WithoutCancel(ctx))) }()

	out.printf("starting a run of signup\n")
	res, err := eng.Start(ctx, "signup", Signup{Email: "  Ada@Example.COM ", Name: "Ada"})
	if err != nil {
		return err
	}
	r, err := stopped(ctx, eng, res.RunID)
	if err != nil {
		return err
	}
	out.printf("the journal says: the run of %s is %s, at step %s\n", r.Flow, r.Status, r.Step)
	return nil
}

// stopped waits until the journal shows the run stopped (completed,
// failed, compensated ...), looking every 20 ms.
func stopped(ctx context.Context, eng *engine.Engine, runID string) (journal.Run, error) {
	tick := time.NewTicker(20 * time.Millisecond)
	defer tick.Stop()
	for {
		r, err := eng.Journal().Run(ctx, runID)
		switch {
		case err == nil && r.Status.Stopped():
			return r, nil
		case err != nil && !errors.Is(err, journal.ErrRunNotFound):
			return r, err
		}
		select {
		case <-ctx.Done():
			return r, fmt.Errorf("run %s did not stop: %w", runID, ctx.Err())
		case <-tick.C:
		}
	}
}

// syncWriter lets the steps, which run on the worker's goroutines, and
// main print to one writer.
type syncWriter struct {
	mu sync.Mutex
	w  io.Writer
}

func (s *syncWriter) printf(format string, args ...any) {
	s.mu.Lock()
	defer s.mu.Unlock()
	fmt.Fprintf(s.w, format, args...)
}
