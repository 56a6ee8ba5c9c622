// Flow-parallel shows a flow that branches and joins: after validate, an
// order reserves its stock (two steps, check-stock then reserve-stock) and
// books its courier (book-courier) as two branches of a dsl.Parallel that
// run side by side on the order. Once both are back, the Parallel's Join
// gets the order and each branch's output, in branch order, and what it
// returns goes on to confirm. Each branch step runs once per run and the
// join fires exactly once, however often a message is delivered.
//
// The run's timeline from the journal shows the fork, each branch's steps,
// each branch arriving back at the fork, and the join (the fork's own
// "completed").
//
// It runs on the embedded in-process broker, with nothing installed:
//
//	go run ./examples/flow-parallel
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

// Order is the payload of a run, and what both branches start from.
type Order struct {
	ID       string `json:"id"`
	Item     string `json:"item"`
	Quantity int    `json:"quantity"`
	Address  string `json:"address"`
}

// Stock is what check-stock found: where the order's items are.
type Stock struct {
	OrderID   string `json:"order_id"`
	Warehouse string `json:"warehouse"`
	Quantity  int    `json:"quantity"`
}

// Reservation is what the stock branch returns: the items set aside.
type Reservation struct {
	ID        string `json:"id"`
	Warehouse string `json:"warehouse"`
}

// Booking is what the courier branch returns.
type Booking struct {
	Courier string `json:"courier"`
	Pickup  string `json:"pickup"`
}

// Shipment is what the join makes of the order and both branches' outputs.
type Shipment struct {
	Order       Order       `json:"order"`
	Reservation Reservation `json:"reservation"`
	Booking     Booking     `json:"booking"`
}

func main() {
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	err := run(ctx, os.Stdout)
	stop()
	if err != nil {
		fmt.Fprintln(os.Stderr, "flow-parallel:", err)
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

	shipOrder := dsl.Flow("ship-order",
		dsl.Step("validate", func(_ context.Context, o Order) (Order, error) {
			if o.Quantity < 1 {
				return o, broker.Fatal(fmt.Errorf("order %s: quantity %d", o.ID, o.Quantity))
			}
			out.printf("validate: order %s, %d × %s\n", o.ID, o.Quantity, o.Item)
			return o, nil
		}),
		dsl.Parallel("fulfil",
			dsl.Branch( // branch 0: two steps, each getting what the one before returned
				dsl.Step("check-stock", func(_ context.Context, o Order) (Stock, error) {
					out.printf("  branch 0, check-stock: %d × %s in warehouse BRS-2\n", o.Quantity, o.Item)
					return Stock{OrderID: o.ID, Warehouse: "BRS-2", Quantity: o.Quantity}, nil
				}),
				dsl.Step("reserve-stock", func(_ context.Context, s Stock) (Reservation, error) {
					r := Reservation{ID: "RSV-" + s.OrderID, Warehouse: s.Warehouse}
					out.printf("  branch 0, reserve-stock: reserved %s at %s\n", r.ID, r.Warehouse)
					return r, nil
				}),
			),
			dsl.Branch( // branch 1: one step, on the same order
				dsl.Step("book-courier", func(_ context.Context, o Order) (Booking, error) {
					b := Booking{Courier: "Speedy Couriers", Pickup: "tomorrow 09:00"}
					out.printf("  branch 1, book-courier: %s, pickup %s, to %s\n", b.Courier, b.Pickup, o.Address)
					return b, nil
				}),
			),
		).Join(func(_ context.Context, o Order, r Reservation, b Booking) (Shipment, error) {
			out.printf("join: both branches are back: reservation %s, courier %s\n", r.ID, b.Courier)
			return Shipment{Order: o, Reservation: r, Booking: b}, nil
		}),
		dsl.Step("confirm", func(_ context.Context, s Shipment) (Shipment, error) {
			out.printf("confirm: order %s ships from %s with %s, %s\n", s.Order.ID, s.Reservation.Warehouse, s.Booking.Courier, s.Booking.Pickup)
			return s, nil
		}),
	)

	eng, err := engine.New(engine.Config{Conn: conn})
	if err != nil {
		return err
	}
	defer func() { err = errors.Join(err, eng.Close(context.WithoutCancel(ctx))) }()
	if err := eng.Register(shipOrder); err != nil {
		return err
	}
	worker, err := eng.StartWorker(ctx)
	if err != nil {
		return err
	}
	defer func() { err = errors.Join(err, worker.Close(context.WithoutCancel(ctx))) }()

	out.printf("starting a run of ship-order: validate → fulfil (stock | courier) → confirm\n")
	res, err := eng.Start(ctx, "ship-order", Order{ID: "o-7", Item: "coffee beans", Quantity: 2, Address: "12 Harbour Street, Bristol"})
	if err != nil {
		return err
	}
	r, err := stopped(ctx, eng, res.RunID)
	if err != nil {
		return err
	}
	// start, validate, the fork, three branch steps, two arrivals, the
	// join, confirm.
	tl, err := timeline(ctx, eng, res.RunID, 10)
	if err != nil {
		return err
	}
	out.printf("the journal says: the run is %s; its timeline:\n", r.Status)
	for _, e := range tl {
		out.printf("  %-5s %-13s %s\n", e.Kind, e.Step, e.Outcome)
	}
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

// timeline waits until the run's timeline holds n events and returns it.
// A step records what it came to after it has sent its run on, so the
// last branch step's event can land just after the join it led to went on
// and the run completed.
func timeline(ctx context.Context, eng *engine.Engine, runID string, n int) ([]journal.Event, error) {
	tick := time.NewTicker(20 * time.Millisecond)
	defer tick.Stop()
	for {
		tl, err := eng.Journal().Timeline(ctx, runID)
		if err != nil || len(tl) >= n {
			return tl, err
		}
		select {
		case <-ctx.Done():
			return tl, fmt.Errorf("run %s: %d events in its timeline, want %d: %w", runID, len(tl), n, ctx.Err())
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
