// Flow-foreach shows a fan-out over a list: a dsl.ForEach takes a batch's
// 20 invoices from the payload and runs send-invoice once for each, at
// most four of them in flight at once (Concurrency(4)): as each comes
// back to the fork, the next is handed out. Once every invoice is back,
// the join gets the batch and every invoice's output in item order, and
// sums them; what it returns goes on to report. The items travel as
// messages and are kept in the run journal, not in one growing document.
//
// The run's timeline from the journal shows the fork, each item's step,
// each item arriving back at the fork, and the join (the fork's own
// "completed").
//
// It runs on the embedded in-process broker, with nothing installed:
//
//	go run ./examples/flow-foreach
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

// Batch is the payload of a run: a month's invoices to send.
type Batch struct {
	Month    string    `json:"month"`
	Invoices []Invoice `json:"invoices"`
}

// Invoice is one item of the ForEach: what send-invoice gets.
type Invoice struct {
	Number      string `json:"number"`
	Customer    string `json:"customer"`
	AmountCents int    `json:"amount_cents"`
}

// Sent is what send-invoice returns for an invoice.
type Sent struct {
	Number      string `json:"number"`
	AmountCents int    `json:"amount_cents"`
}

// Summary is what the join makes of the batch and every invoice sent.
type Summary struct {
	Month      string `json:"month"`
	Sent       int    `json:"sent"`
	TotalCents int    `json:"total_cents"`
	First      string `json:"first"`
	Last       string `json:"last"`
}

// concurrency is how many invoices of one run are sent at once at most.
const concurrency = 4

func main() {
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	err := run(ctx, os.Stdout)
	stop()
	if err != nil {
		fmt.Fprintln(os.Stderr, "flow-foreach:", err)
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

	var sending gauge // how many invoices send-invoice is sending, and the most at once
	sendInvoices := dsl.Flow("send-invoices",
		dsl.ForEach("send-all",
			func(_ context.Context, b Batch) ([]Invoice, error) { return b.Invoices, nil },
			dsl.Step("send-invoice", func(_ context.Context, inv Invoice) (Sent, error) {
				sending.add(1)
				defer sending.add(-1)
				time.Sleep(10 * time.Millisecond) // the mail server takes a moment
				out.printf("  send-invoice: %s, %d.%02d to %s\n", inv.Number, inv.AmountCents/100, inv.AmountCents%100, inv.Customer)
				return Sent{Number: inv.Number, AmountCents: inv.AmountCents}, nil
			}),
			func(_ context.Context, b Batch, sent []Sent) (Summary, error) {
				s := Summary{Month: b.Month, Sent: len(sent)}
				for _, x := range sent {
					s.TotalCents += x.AmountCents
				}
				if len(sent) > 0 {
					s.First, s.Last = sent[0].Number, sent[len(sent)-1].Number
				}
				out.printf("join: %d invoices back, in item order (%s … %s), %d.%02d in all\n",
					s.Sent, s.First, s.Last, s.TotalCents/100, s.TotalCents%100)
				return s, nil
			},
		).Concurrency(concurrency),
		dsl.Step("report", func(_ context.Context, s Summary) (Summary, error) {
			out.printf("report: %s: %d invoices sent, %d.%02d invoiced\n", s.Month, s.Sent, s.TotalCents/100, s.TotalCents%100)
			return s, nil
		}),
	)

	eng, err := engine.New(engine.Config{Conn: conn})
	if err != nil {
		return err
	}
	defer func() { err = errors.Join(err, eng.Close(context.WithoutCancel(ctx))) }()
	if err := eng.Register(sendInvoices); err != nil {
		return err
	}
	worker, err := eng.StartWorker(ctx)
	if err != nil {
		return err
	}
	defer func() { err = errors.Join(err, worker.Close(context.WithoutCancel(ctx))) }()

	batch := Batch{Month: "2026-03"}
	for i := range 20 {
		batch.Invoices = append(batch.Invoices, Invoice{
			Number:      fmt.Sprintf("INV-%03d", i+1),
			Customer:    fmt.Sprintf("customer %d", i+1),
			AmountCents: 1000 + 250*i,
		})
	}
	out.printf("starting a run of send-invoices: %d invoices, at most %d sent at once\n", len(batch.Invoices), concurrency)
	res, err := eng.Start(ctx, "send-invoices", batch)
	if err != nil {
		return err
	}
	r, err := stopped(ctx, eng, res.RunID)
	if err != nil {
		return err
	}
	if most := sending.most(); most > concurrency {
		return fmt.Errorf("%d invoices were sent at once, want at most %d", most, concurrency)
	}
	out.printf("never more than %d invoices were being sent at once\n", concurrency)
	// start, the fork, a step and an arrival per invoice, the join, report.
	tl, err := timeline(ctx, eng, res.RunID, 2+2*len(batch.Invoices)+2)
	if err != nil {
		return err
	}
	out.printf("the journal says: the run is %s; its timeline (a line that repeats, once with its count):\n", r.Status)
	for i := 0; i < len(tl); {
		e, n := tl[i], 1
		for i+n < len(tl) && same(tl[i+n], e) {
			n++
		}
		i += n
		times := ""
		if n > 1 {
			times = fmt.Sprintf(" (×%d)", n)
		}
		out.printf("  %-5s %-12s %s%s\n", e.Kind, e.Step, e.Outcome, times)
	}
	return nil
}

// same says a and b print as the same line of the timeline.
func same(a, b journal.Event) bool {
	return a.Kind == b.Kind && a.Step == b.Step && a.Outcome == b.Outcome
}

// gauge counts what is under way and remembers the most at once.
type gauge struct {
	mu      sync.Mutex
	n, peak int
}

func (g *gauge) add(d int) {
	g.mu.Lock()
	defer g.mu.Unlock()
	g.n += d
	g.peak = max(g.peak, g.n)
}

func (g *gauge) most() int {
	g.mu.Lock()
	defer g.mu.Unlock()
	return g.peak
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
// last item's event can land just after the join it led to went on and
// the run completed.
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
