// Flow-delay shows a delay between two steps: dsl.Delay(2*time.Second)
// sends the hop into the next step through the scheduler ladder, so no
// goroutine and no timer of this process holds the run while it waits.
// The journal shows the run waiting, with when it is due; the step after
// the delay never runs early (and, with a running worker, at most about a
// second late). dsl.DelayUntil takes the time from the payload instead
// (payload.remind_at), and engine.In or engine.At delays a run's start.
//
// It runs on the embedded in-process broker, with nothing installed:
//
//	go run ./examples/flow-delay
package main

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"os"
	"os/signal"
	"sync"
	"syscall"
	"time"

	"github.com/acemq/acemq-flow/broker"
	"github.com/acemq/acemq-flow/dsl"
	"github.com/acemq/acemq-flow/engine"
	"github.com/acemq/acemq-flow/engine/journal"
)

// delay is how long the run waits between its steps.
const delay = 2 * time.Second

// Reminder is the payload of a run.
type Reminder struct {
	To   string `json:"to"`
	Note string `json:"note"`
	// AcceptedAt is when accept ran, set by accept.
	AcceptedAt time.Time `json:"accepted_at,omitzero"`
}

func main() {
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	err := run(ctx, os.Stdout)
	stop()
	if err != nil {
		fmt.Fprintln(os.Stderr, "flow-delay:", err)
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

	reminder := dsl.Flow("reminder",
		dsl.Step("accept", func(_ context.Context, r Reminder) (Reminder, error) {
			out.printf("accept: a reminder for %s\n", r.To)
			r.AcceptedAt = time.Now()
			return r, nil
		}),
		dsl.Delay(delay),
		dsl.Step("remind", func(_ context.Context, r Reminder) (Reminder, error) {
			out.printf("remind: %q to %s, %.1fs after accept\n", r.Note, r.To, time.Since(r.AcceptedAt).Seconds())
			return r, nil
		}),
	)

	eng, err := engine.New(engine.Config{Conn: conn})
	if err != nil {
		return err
	}
	defer func() { err = errors.Join(err, eng.Close(context.WithoutCancel(ctx))) }()
	if err := eng.Register(reminder); err != nil {
		return err
	}
	worker, err := eng.StartWorker(ctx)
	if err != nil {
		return err
	}
	defer func() { err = errors.Join(err, worker.Close(context.WithoutCancel(ctx))) }()

	out.printf("starting a run of reminder, with a delay of %s before remind\n", delay)
	res, err := eng.Start(ctx, "reminder", Reminder{To: "Linus", Note: "stand-up in five minutes"})
	if err != nil {
		return err
	}
	r, err := waitFor(ctx, eng, res.RunID, journal.Waiting)
	if err != nil {
		return err
	}
	out.printf("the journal says: the run is %s before %s, due at %s\n", r.Status, r.Step, r.DueAt.Format("15:04:05.000"))
	if r, err = waitFor(ctx, eng, res.RunID, journal.Completed); err != nil {
		return err
	}
	out.printf("the journal says: the run is %s\n", r.Status)
	return nil
}

// waitFor waits until the journal shows the run in status want, looking
// every 20 ms.
func waitFor(ctx context.Context, eng *engine.Engine, runID string, want journal.Status) (journal.Run, error) {
	tick := time.NewTicker(20 * time.Millisecond)
	defer tick.Stop()
	for {
		r, err := eng.Journal().Run(ctx, runID)
		switch {
		case err == nil && r.Status == want:
			return r, nil
		case err == nil && r.Status.Stopped():
			return r, fmt.Errorf("run %s is %s, not %s: %s", runID, r.Status, want, r.Error)
		case err != nil && !errors.Is(err, journal.ErrRunNotFound):
			return r, err
		}
		select {
		case <-ctx.Done():
			return r, fmt.Errorf("run %s is not %s: %w", runID, want, ctx.Err())
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
