// Flow-compensation shows what the engine does when a step is given up:
// the steps that completed before it and have a Compensate are undone in
// reverse order, each compensation getting what its own step returned.
// Compensations travel as messages with retries of their own, so any
// worker can run them and a restart does not forget them.
//
// Here book-trip books a flight, then a hotel, then charges the card,
// which is declined: broker.Fatal, no retry can help. The hotel is
// cancelled, then the flight, and the journal shows the run compensated.
// (A flow with dsl.HoldForReplay would keep the failed run for a replay
// first; place-order in package workflows does.)
//
// It runs on the embedded in-process broker, with nothing installed:
//
//	go run ./examples/flow-compensation
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

// Trip is the payload of a run: each booking step adds its reference.
type Trip struct {
	Traveller string `json:"traveller"`
	Flight    string `json:"flight,omitempty"`
	Hotel     string `json:"hotel,omitempty"`
}

func main() {
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	err := run(ctx, os.Stdout)
	stop()
	if err != nil {
		fmt.Fprintln(os.Stderr, "flow-compensation:", err)
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

	bookTrip := dsl.Flow("book-trip",
		dsl.Step("book-flight", func(_ context.Context, t Trip) (Trip, error) {
			t.Flight = "FL-204"
			out.printf("book-flight: booked %s\n", t.Flight)
			return t, nil
		}).Compensate(func(_ context.Context, t Trip) error {
			out.printf("  undo book-flight: cancelled %s\n", t.Flight)
			return nil
		}),
		dsl.Step("book-hotel", func(_ context.Context, t Trip) (Trip, error) {
			t.Hotel = "HT-88"
			out.printf("book-hotel: booked %s\n", t.Hotel)
			return t, nil
		}).Compensate(func(_ context.Context, t Trip) error {
			// It gets what book-hotel returned, the flight included.
			out.printf("  undo book-hotel: cancelled %s (the trip still holds flight %s)\n", t.Hotel, t.Flight)
			return nil
		}),
		dsl.Step("charge-card", func(_ context.Context, t Trip) (Trip, error) {
			out.printf("charge-card: declined\n")
			return t, broker.Fatal(errors.New("card declined"))
		}),
	)

	eng, err := engine.New(engine.Config{Conn: conn})
	if err != nil {
		return err
	}
	defer func() { err = errors.Join(err, eng.Close(context.WithoutCancel(ctx))) }()
	if err := eng.Register(bookTrip); err != nil {
		return err
	}
	worker, err := eng.StartWorker(ctx)
	if err != nil {
		return err
	}
	defer func() { err = errors.Join(err, worker.Close(context.WithoutCancel(ctx))) }()

	out.printf("starting a run of book-trip\n")
	res, err := eng.Start(ctx, "book-trip", Trip{Traveller: "Grace"})
	if err != nil {
		return err
	}
	r, err := settled(ctx, eng, res.RunID)
	if err != nil {
		return err
	}
	out.printf("the journal says: the run of %s is %s (why: %s)\n", r.Flow, r.Status, r.Error)
	return nil
}

// settled waits until the journal shows the run stopped and, if it
// failed, done compensating, looking every 20 ms.
func settled(ctx context.Context, eng *engine.Engine, runID string) (journal.Run, error) {
	tick := time.NewTicker(20 * time.Millisecond)
	defer tick.Stop()
	for {
		r, err := eng.Journal().Run(ctx, runID)
		switch {
		case err == nil && r.Status.Stopped() && r.Status != journal.Failed:
			return r, nil
		case err != nil && !errors.Is(err, journal.ErrRunNotFound):
			return r, err
		}
		select {
		case <-ctx.Done():
			return r, fmt.Errorf("run %s was not settled: %w", runID, ctx.Err())
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
