// Flow-test is a flow of its own and the tests that prove it without
// waiting. The trial flow opens a trial account, waits until the trial
// ends (dsl.DelayUntil: payload.ends_at, half an hour in its tests), then
// charges the card for the first month. A card declined is given up, and
// the run is held an hour for a replay (dsl.HoldForReplay) before the
// account it opened is closed (its compensation).
//
// main_test.go runs the flow with package engine/flowtest: an engine and a
// worker on an in-process broker whose clock the test moves, so that the
// half hour and the hour pass at once; the tests assert the runs' status
// and timelines, times included. This program runs one trial in real
// time, ending a second after it starts, on the embedded broker:
//
//	go run ./examples/flow-test
//	go test ./examples/flow-test
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
)

// TrialHold is how long a trial whose card was declined waits for a
// replay before its account is closed.
const TrialHold = time.Hour

// Trial is the payload of a run.
type Trial struct {
	Customer string `json:"customer"`
	Card     string `json:"card"`
	// EndsAt is when the trial ends and the card is charged.
	EndsAt time.Time `json:"ends_at"`
	// Account is the trial account, set by open; Payment the first
	// month's, set by charge.
	Account string `json:"account,omitempty"`
	Payment string `json:"payment,omitempty"`
}

// ErrDeclined is what Billing says of a card it declines.
var ErrDeclined = errors.New("card declined")

// Billing is the service behind the trial flow: accounts and payments,
// each call remembered, and when it came (on Now, the test's clock).
type Billing struct {
	// Now is the service's clock (nil = time.Now).
	Now func() time.Time
	// Declined is the card the service declines.
	Declined string
	// Charged, when set, is closed on the first charge that goes through:
	// what a program that waits for one waits on.
	Charged chan struct{}

	mu    sync.Mutex
	calls []string
	at    map[string]time.Time
	once  sync.Once
}

// call records what the service was asked, and when.
func (b *Billing) call(what string) {
	b.mu.Lock()
	defer b.mu.Unlock()
	now := time.Now()
	if b.Now != nil {
		now = b.Now()
	}
	if b.at == nil {
		b.at = map[string]time.Time{}
	}
	b.calls = append(b.calls, what)
	b.at[what] = now
}

// Calls is what the service was asked, in order.
func (b *Billing) Calls() []string {
	b.mu.Lock()
	defer b.mu.Unlock()
	return append([]string(nil), b.calls...)
}

// At is when the service was last asked what.
func (b *Billing) At(what string) time.Time {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.at[what]
}

// NewTrial builds the trial flow on b.
func NewTrial(b *Billing) *dsl.FlowDef {
	return dsl.Flow("trial",
		dsl.Step("open", func(_ context.Context, t Trial) (Trial, error) {
			t.Account = "acct-" + strings.ToLower(t.Customer)
			b.call("open " + t.Account)
			return t, nil
		}).Compensate(func(_ context.Context, t Trial) error {
			b.call("close " + t.Account)
			return nil
		}),
		dsl.DelayUntil(`payload.ends_at`),
		dsl.Step("charge", func(_ context.Context, t Trial) (Trial, error) {
			if t.Card == b.Declined {
				b.call("charge declined")
				return t, broker.Fatal(fmt.Errorf("charge the first month: %w", ErrDeclined))
			}
			t.Payment = "pay-" + t.Account
			b.call("charge " + t.Payment)
			if b.Charged != nil {
				b.once.Do(func() { close(b.Charged) })
			}
			return t, nil
		}).Retry(broker.Exponential(3, time.Minute)),
		dsl.HoldForReplay(TrialHold),
	)
}

func main() {
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	err := run(ctx, os.Stdout)
	stop()
	if err != nil {
		fmt.Fprintln(os.Stderr, "flow-test:", err)
		os.Exit(1)
	}
}

// run runs one trial on the embedded broker in real time, ending a second
// after it starts, and prints its timeline.
func run(ctx context.Context, w io.Writer) (err error) {
	ctx, cancel := context.WithTimeout(ctx, 30*time.Second)
	defer cancel()
	quiet := slog.New(slog.NewTextHandler(os.Stderr, &slog.HandlerOptions{Level: slog.LevelWarn}))
	conn, err := broker.Config{Logger: quiet}.Open(ctx, "memory://")
	if err != nil {
		return err
	}
	defer func() { err = errors.Join(err, conn.Close(context.WithoutCancel(ctx))) }()
	eng, err := engine.New(engine.Config{Conn: conn})
	if err != nil {
		return err
	}
	defer func() { err = errors.Join(err, eng.Close(context.WithoutCancel(ctx))) }()
	billing := &Billing{Declined: "4000 0000 0000 0002", Charged: make(chan struct{})}
	if err := eng.Register(NewTrial(billing)); err != nil {
		return err
	}
	worker, err := eng.StartWorker(ctx)
	if err != nil {
		return err
	}
	began := time.Now()
	res, err := eng.Start(ctx, "trial", Trial{Customer: "Ada", Card: "4242 4242 4242 4242", EndsAt: began.Add(time.Second)})
	if err != nil {
		return errors.Join(err, worker.Close(context.WithoutCancel(ctx)))
	}
	fmt.Fprintln(w, "a trial for Ada, ending a second from now: the run waits on the scheduler ladder")
	select {
	case <-billing.Charged:
	case <-ctx.Done():
	}
	// The charge is the run's last step: the worker, closing, lets it
	// finish and records it.
	if err := worker.Close(context.WithoutCancel(ctx)); err != nil {
		return err
	}
	tl, err := eng.Journal().Timeline(ctx, res.RunID)
	if err != nil {
		return err
	}
	for _, e := range tl {
		fmt.Fprintf(w, "  +%.1fs  %s %s %s\n", e.StartedAt.Sub(began).Seconds(), e.Kind, e.Step, e.Outcome)
	}
	fmt.Fprintf(w, "the service was asked: %s\n", strings.Join(billing.Calls(), ", "))
	return ctx.Err()
}
