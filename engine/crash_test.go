package engine_test

import (
	"context"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/acemq/acemq-flow/broker"
	"github.com/acemq/acemq-flow/dsl"
	"github.com/acemq/acemq-flow/engine"
	"github.com/acemq/acemq-flow/engine/journal"
	"github.com/acemq/acemq-flow/internal/brokertest"
	"github.com/acemq/acemq-flow/internal/testenv"
	"github.com/acemq/acemq-flow/patterns"
)

// stallingJournal passes everything to a journal except the events of one
// step's completion, which it holds until released: a worker that dies
// before its journal writer wrote them. The other events of a batch that
// holds one are written (the writer may have batched the run's start with
// it), so that only the completion is missing.
type stallingJournal struct {
	journal.Journal
	step    string
	stalled chan struct{} // closed when the first such write arrives
	release chan struct{}
	once    sync.Once
}

func (s *stallingJournal) Record(ctx context.Context, events []journal.Event) error {
	rest := make([]journal.Event, 0, len(events))
	held := false
	for _, e := range events {
		if e.Kind == journal.KindStep && e.Step == s.step && e.Outcome == "completed" {
			held = true
			continue
		}
		rest = append(rest, e)
	}
	if err := s.Journal.Record(ctx, rest); err != nil || !held {
		return err
	}
	s.once.Do(func() { close(s.stalled) })
	select {
	case <-s.release:
		// The test is over: what the dead worker held goes nowhere.
		return nil
	case <-ctx.Done():
		return ctx.Err()
	}
}

// TestStepEventsWrittenBeforeAck: a worker whose journal never gets a
// step's completion written (it dies first) has not acknowledged the step's
// message either: the message comes back, and the next worker records the
// step from what the first one kept, without running it again. Before the
// journal was written ahead of the acknowledgement, such a run stayed
// "running" for ever.
func TestStepEventsWrittenBeforeAck(t *testing.T) {
	brokertest.Each(t, func(t *testing.T, h *brokertest.Harness) {
		ctx := brokertest.Ctx(t)
		mem, err := journal.NewMemory(0)
		require.NoError(t, err)
		// The two workers share the idempotency store, as workers on one
		// database share persistence.SQLIdempotencyStore.
		store, err := patterns.NewInMemoryIdempotencyStore(time.Minute)
		require.NoError(t, err)
		ef := newEffects()
		// The worker that survives, on the journal and the store; it
		// starts working once the first one died.
		next := newFixture(t, h, engine.Config{Journal: mem, Store: store})
		flowDef := dsl.Flow(next.name, dsl.Step("pack", appendStep(ef, "pack")), dsl.Step("ship", appendStep(ef, "ship")))
		next.register(flowDef)

		// The first worker: its journal stalls on ship's completion.
		stall := &stallingJournal{Journal: mem, step: "ship", stalled: make(chan struct{}), release: make(chan struct{})}
		conn, err := broker.Config{Ladder: h.Ladder, Logger: testenv.Logger(t), InProgressDelay: time.Second}.Open(ctx, h.URL)
		require.NoError(t, err)
		first, err := engine.New(engine.Config{Conn: conn, Journal: stall, Store: store})
		require.NoError(t, err)
		t.Cleanup(func() {
			close(stall.release)
			_ = first.Close(context.Background())
		})
		require.NoError(t, first.Register(flowDef))
		w1, err := first.StartWorker(ctx)
		require.NoError(t, err)
		res, err := first.Start(ctx, next.name, Order{ID: "o-1"})
		require.NoError(t, err)
		run := res.RunID
		brokertest.Next(t, stall.stalled, 10*time.Second)
		require.Equal(t, 1, ef.get(run, "ship"), "ship ran")

		// It dies: its worker stops at once, its journal writer never
		// writes ship's completion, and its connection goes with what it
		// had not acknowledged.
		cctx, cancel := context.WithTimeout(ctx, 200*time.Millisecond)
		_ = w1.Close(cctx)
		cancel()
		_ = conn.Close(ctx)
		r, err := mem.Run(ctx, run)
		require.NoError(t, err)
		require.Equal(t, journal.Running, r.Status, "ship's completion was never written")

		next.work()
		deadline := time.Now().Add(15 * time.Second)
		for {
			r, err = mem.Run(ctx, run)
			require.NoError(t, err)
			if r.Status == journal.Completed || time.Now().After(deadline) {
				break
			}
			time.Sleep(20 * time.Millisecond)
		}
		require.Equal(t, journal.Completed, r.Status, "the step's message came back to the next worker, which recorded it")
		require.Equal(t, 1, ef.get(run, "ship"), "and did not run it again: its outcome was kept")
		require.Equal(t, 1, ef.get(run, "pack"))
	})
}

// TestStepSlotFreedWhileItsResultIsKept: keeping and sending a step's
// result happens off its handler's slot. At concurrency 1, with the
// journal stalled on the first run's completion of pack (so that its result
// is kept in a commit that does not end), the second run's pack still runs;
// once the journal goes on, both runs complete, each step once.
func TestStepSlotFreedWhileItsResultIsKept(t *testing.T) {
	brokertest.Each(t, func(t *testing.T, h *brokertest.Harness) {
		mem, err := journal.NewMemory(0)
		require.NoError(t, err)
		stall := &stallingJournal{Journal: mem, step: "pack", stalled: make(chan struct{}), release: make(chan struct{})}
		fx := newFixture(t, h, engine.Config{Journal: stall, Concurrency: 1})
		ef := newEffects()
		fx.register(dsl.Flow(fx.name, dsl.Step("pack", appendStep(ef, "pack")), dsl.Step("ship", appendStep(ef, "ship"))))
		fx.work()
		first := fx.start(Order{ID: "o-1"})
		brokertest.Next(t, stall.stalled, 10*time.Second)
		second := fx.start(Order{ID: "o-2"})
		require.Eventually(t, func() bool { return ef.get(second, "pack") == 1 }, 10*time.Second, 10*time.Millisecond,
			"the second run's pack ran while the first's result was being kept")
		require.Zero(t, ef.get(first, "ship"), "the first run waits for its result to be kept")
		close(stall.release)
		for _, run := range []string{first, second} {
			fx.waitStatus(run, journal.Completed, 15*time.Second)
			require.Equal(t, 1, ef.get(run, "pack"))
			require.Equal(t, 1, ef.get(run, "ship"))
		}
	})
}
