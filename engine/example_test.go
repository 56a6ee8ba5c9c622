package engine_test

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"sync/atomic"
	"time"

	"github.com/acemq/acemq-flow/broker"
	"github.com/acemq/acemq-flow/dsl"
	"github.com/acemq/acemq-flow/engine"
	"github.com/acemq/acemq-flow/engine/journal"
)

// A flow, a worker and a run in one process, on the embedded broker:
// Register compiles the flow (exchange signup, a queue per step),
// StartWorker consumes its queues, Start publishes the run's first
// message, and the run journal tells how the run went.
func Example() {
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	conn, err := broker.Open(ctx, "memory://") // or amqp://guest:guest@127.0.0.1:5672/
	if err != nil {
		fmt.Println(err)
		return
	}
	defer conn.Close(ctx)
	// The journal and the idempotency store are in memory here;
	// enginepg.Open puts them in PostgreSQL, shared by every worker.
	eng, err := engine.New(engine.Config{Conn: conn})
	if err != nil {
		fmt.Println(err)
		return
	}
	defer eng.Close(ctx)

	signup := dsl.Flow("signup",
		dsl.Step("normalize", func(_ context.Context, email string) (string, error) {
			return strings.ToLower(strings.TrimSpace(email)), nil
		}),
		dsl.Step("welcome", func(_ context.Context, email string) (string, error) {
			fmt.Println("welcome mail to", email)
			return email, nil
		}),
	)
	if err := eng.Register(signup); err != nil {
		fmt.Println(err)
		return
	}
	w, err := eng.StartWorker(ctx)
	if err != nil {
		fmt.Println(err)
		return
	}
	defer w.Close(ctx)

	started, err := eng.Start(ctx, "signup", "  Ada@Example.COM ")
	if err != nil {
		fmt.Println(err)
		return
	}
	run, err := awaitRun(ctx, eng, started.RunID, journal.Completed)
	if err != nil {
		fmt.Println(err)
		return
	}
	fmt.Println("run", run.Status, "at", run.Step)
	timeline, err := eng.Journal().Timeline(ctx, started.RunID)
	if err != nil {
		fmt.Println(err)
		return
	}
	for _, e := range timeline {
		fmt.Printf("%-5s %-9s %s\n", e.Kind, e.Step, e.Outcome)
	}
	// Output:
	// welcome mail to ada@example.com
	// run completed at welcome
	// start           started
	// step  normalize completed
	// step  welcome   completed
}

// A step given up (broker.Fatal here; spent retries too) fails its run,
// and its message waits in the step's dead-letter queue. Once the cause
// is gone, Replay sends it back to that step by the run's id, and the run
// goes on from there.
func ExampleEngine_Replay() {
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	conn, err := broker.Open(ctx, "memory://")
	if err != nil {
		fmt.Println(err)
		return
	}
	defer conn.Close(ctx)
	eng, err := engine.New(engine.Config{Conn: conn})
	if err != nil {
		fmt.Println(err)
		return
	}
	defer eng.Close(ctx)

	var courierUp atomic.Bool
	shipping := dsl.Flow("shipping",
		dsl.Step("pack", func(_ context.Context, parcel string) (string, error) {
			fmt.Println("packed", parcel)
			return parcel, nil
		}),
		dsl.Step("ship", func(_ context.Context, parcel string) (string, error) {
			if !courierUp.Load() {
				return parcel, broker.Fatal(errors.New("the courier is down"))
			}
			return parcel, nil
		}),
	)
	if err := eng.Register(shipping); err != nil {
		fmt.Println(err)
		return
	}
	w, err := eng.StartWorker(ctx)
	if err != nil {
		fmt.Println(err)
		return
	}
	defer w.Close(ctx)

	started, err := eng.Start(ctx, "shipping", "p-7")
	if err != nil {
		fmt.Println(err)
		return
	}
	failed, err := awaitRun(ctx, eng, started.RunID, journal.Failed)
	if err != nil {
		fmt.Println(err)
		return
	}
	fmt.Printf("run %s at %s: %s\n", failed.Status, failed.Step, failed.Error)

	courierUp.Store(true)
	moved, err := eng.Replay(ctx, started.RunID)
	if err != nil {
		fmt.Println(err)
		return
	}
	fmt.Println("replayed from", moved.From, "to", moved.To)
	done, err := awaitRun(ctx, eng, started.RunID, journal.Completed)
	if err != nil {
		fmt.Println(err)
		return
	}
	fmt.Println("run", done.Status, "after", done.Replays, "replay")
	timeline, err := eng.Journal().Timeline(ctx, started.RunID)
	if err != nil {
		fmt.Println(err)
		return
	}
	for _, e := range timeline {
		fmt.Printf("%-6s %-4s %s\n", e.Kind, e.Step, e.Outcome)
	}
	// Output:
	// packed p-7
	// run failed at ship: step "ship": fatal: the courier is down
	// replayed from shipping.ship.dlq to shipping.ship
	// run completed after 1 replay
	// start       started
	// step   pack completed
	// step   ship failed
	// replay ship replayed
	// step   ship completed
}

// Purchase is the payload of Example_compensation.
type Purchase struct {
	ID   string `json:"id"`
	Gift bool   `json:"gift"`
}

// A step given up compensates the steps that completed before it, newest
// first, each as a message of its own: here the charge is refunded. A
// When decides per run (wrap is skipped for a purchase that is no gift),
// and a Delay holds the run on the scheduler ladder before ship.
func Example_compensation() {
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	conn, err := broker.Open(ctx, "memory://")
	if err != nil {
		fmt.Println(err)
		return
	}
	defer conn.Close(ctx)
	eng, err := engine.New(engine.Config{Conn: conn})
	if err != nil {
		fmt.Println(err)
		return
	}
	defer eng.Close(ctx)

	placeOrder := dsl.Flow("place-order",
		dsl.Step("charge", func(_ context.Context, p Purchase) (Purchase, error) {
			fmt.Println("charged", p.ID)
			return p, nil
		}).Compensate(func(_ context.Context, p Purchase) error {
			fmt.Println("refunded", p.ID)
			return nil
		}),
		dsl.Step("wrap", func(_ context.Context, p Purchase) (Purchase, error) {
			fmt.Println("gift-wrapped", p.ID)
			return p, nil
		}).When(`payload.gift`),
		dsl.Delay(time.Second),
		dsl.Step("ship", func(_ context.Context, p Purchase) (Purchase, error) {
			return p, broker.Fatal(errors.New("no courier today"))
		}),
	)
	if err := eng.Register(placeOrder); err != nil {
		fmt.Println(err)
		return
	}
	w, err := eng.StartWorker(ctx)
	if err != nil {
		fmt.Println(err)
		return
	}
	defer w.Close(ctx)

	started, err := eng.Start(ctx, "place-order", Purchase{ID: "o-1"})
	if err != nil {
		fmt.Println(err)
		return
	}
	run, err := awaitRun(ctx, eng, started.RunID, journal.Compensated)
	if err != nil {
		fmt.Println(err)
		return
	}
	fmt.Printf("run %s: %s\n", run.Status, run.Error)
	timeline, err := eng.Journal().Timeline(ctx, started.RunID)
	if err != nil {
		fmt.Println(err)
		return
	}
	for _, e := range timeline {
		fmt.Printf("%-12s %-6s %s\n", e.Kind, e.Step, e.Outcome)
	}
	// Output:
	// charged o-1
	// refunded o-1
	// run compensated: fatal: no courier today
	// start               started
	// step         charge completed
	// skip         wrap   skipped
	// delay        ship   waiting
	// step         ship   failed
	// compensation charge compensated
}

// awaitRun waits, for up to 10 s, until the journal shows the run in
// status want, looking every 10 ms.
func awaitRun(ctx context.Context, eng *engine.Engine, runID string, want journal.Status) (journal.Run, error) {
	ctx, cancel := context.WithTimeout(ctx, 10*time.Second)
	defer cancel()
	for {
		run, err := eng.Journal().Run(ctx, runID)
		switch {
		case err == nil && run.Status == want:
			return run, nil
		case err != nil && !errors.Is(err, journal.ErrRunNotFound):
			return run, err
		}
		select {
		case <-ctx.Done():
			return run, fmt.Errorf("run %s is %q, not %q: %w", runID, run.Status, want, ctx.Err())
		case <-time.After(10 * time.Millisecond):
		}
	}
}

// Before a deploy: version 1 of a flow left a run at its first step, which
// version 2 renamed. Check, from version 2, says the run would be
// stranded, as StartWorker would refuse; version 2 saying dsl.Renamed
// takes it on instead.
func ExampleEngine_Check() {
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	conn, err := broker.Open(ctx, "memory://")
	if err != nil {
		fmt.Println(err)
		return
	}
	defer conn.Close(ctx)
	j, err := journal.NewMemory(0) // the workers' shared journal (enginepg: PostgreSQL)
	if err != nil {
		fmt.Println(err)
		return
	}
	pass := func(_ context.Context, order string) (string, error) { return order, nil }
	// deploy is a worker's engine with version parts of the flow.
	deploy := func(parts ...dsl.Part) (*engine.Engine, error) {
		eng, err := engine.New(engine.Config{Conn: conn, Journal: j})
		if err != nil {
			return nil, err
		}
		return eng, eng.Register(dsl.Flow("orders", parts...))
	}

	v1, err := deploy(dsl.Step("validate", pass), dsl.Step("ship", pass))
	if err != nil {
		fmt.Println(err)
		return
	}
	defer v1.Close(ctx)
	w, err := v1.StartWorker(ctx) // records version 1 and its steps
	if err != nil {
		fmt.Println(err)
		return
	}
	if err := w.Close(ctx); err != nil {
		fmt.Println(err)
		return
	}
	if _, err := v1.Start(ctx, "orders", "order-1"); err != nil { // waits at validate: no worker
		fmt.Println(err)
		return
	}
	if err := v1.Flush(ctx); err != nil {
		fmt.Println(err)
		return
	}

	v2, err := deploy(dsl.Step("check", pass), dsl.Step("ship", pass))
	if err != nil {
		fmt.Println(err)
		return
	}
	defer v2.Close(ctx)
	c, err := v2.Check(ctx, "orders")
	if err != nil {
		fmt.Println(err)
		return
	}
	fmt.Println("strands:", c.Strands(), "added:", c.Added, "removed:", c.Removed)
	for _, s := range c.Strays {
		fmt.Printf("%s: %d run, %d message, %s\n", s.Step, s.Runs, s.Messages, s.Fate)
	}
	_, err = v2.StartWorker(ctx)
	fmt.Println("v2 worker refused:", errors.Is(err, engine.ErrWouldStrand))

	v2r, err := deploy(dsl.Step("check", pass), dsl.Step("ship", pass), dsl.Renamed("validate", "check"))
	if err != nil {
		fmt.Println(err)
		return
	}
	defer v2r.Close(ctx)
	c, err = v2r.Check(ctx, "orders")
	if err != nil {
		fmt.Println(err)
		return
	}
	fmt.Println("with Renamed, strands:", c.Strands(), "validate:", c.Strays[0].Fate)
	// Output:
	// strands: true added: [check] removed: [validate]
	// validate: 1 run, 1 message, stranded
	// v2 worker refused: true
	// with Renamed, strands: false validate: goes on at check
}
