package engine_test

import (
	"context"
	"errors"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/acemq/acemq-flow/broker"
	"github.com/acemq/acemq-flow/broker/transport"
	"github.com/acemq/acemq-flow/dsl"
	"github.com/acemq/acemq-flow/engine"
	"github.com/acemq/acemq-flow/engine/journal"
	"github.com/acemq/acemq-flow/internal/brokertest"
)

// TestFlowVersion: a flow's version changes with what it compiles to (a
// step renamed, inserted or removed, a condition, a delay, a
// compensation, a payload type, a branch) and not with the knobs that do
// not change where a run goes (retries, timeouts, concurrency, limits).
func TestFlowVersion(t *testing.T) {
	t.Parallel()
	conn, err := broker.Open(context.Background(), "memory://")
	require.NoError(t, err)
	t.Cleanup(func() { _ = conn.Close(context.Background()) })
	pass := func(_ context.Context, o Order) (Order, error) { return o, nil }
	toInt := func(_ context.Context, o Order) (int, error) { return o.Amount, nil }
	undo := func(context.Context, Order) error { return nil }
	base := func(a *dsl.StepDef[Order, Order]) *dsl.FlowDef {
		return dsl.Flow("f", a, dsl.Step("b", pass))
	}
	defs := map[string]struct {
		def  *dsl.FlowDef
		same bool
	}{
		"built again":       {base(dsl.Step("a", pass)), true},
		"a retry":           {base(dsl.Step("a", pass).Retry(broker.Constant(9, time.Second))), true},
		"a timeout":         {base(dsl.Step("a", pass).Timeout(time.Minute)), true},
		"concurrency":       {base(dsl.Step("a", pass).Concurrency(3).Prefetch(7)), true},
		"a concurrency key": {base(dsl.Step("a", pass).ConcurrencyKey("payload.id", 2)), true},
		"a step renamed":    {base(dsl.Step("a2", pass)), false},
		"a step inserted":   {dsl.Flow("f", dsl.Step("a", pass), dsl.Step("x", pass), dsl.Step("b", pass)), false},
		"a step removed":    {dsl.Flow("f", dsl.Step("a", pass)), false},
		"steps reordered":   {dsl.Flow("f", dsl.Step("b", pass), dsl.Step("a", pass)), false},
		"a condition":       {base(dsl.Step("a", pass).When("payload.amount > 1")), false},
		"a compensation":    {base(dsl.Step("a", pass).Compensate(undo)), false},
		"a payload type":    {dsl.Flow("f", dsl.Step("a", pass), dsl.Step("b", toInt)), false},
		"a delay":           {dsl.Flow("f", dsl.Step("a", pass), dsl.Delay(time.Second), dsl.Step("b", pass)), false},
		"a branch": {dsl.Flow("f", dsl.Parallel("p", dsl.Branch(dsl.Step("a", pass)), dsl.Branch(dsl.Step("b", pass))).
			Join(func(_ context.Context, in, a, b Order) (Order, error) { return in, nil })), false},
	}
	versionOf := func(def *dsl.FlowDef) string {
		e, err := engine.New(engine.Config{Conn: conn})
		require.NoError(t, err)
		t.Cleanup(func() { _ = e.Close(context.Background()) })
		require.NoError(t, e.Register(def))
		fi, err := e.Flow("f")
		require.NoError(t, err)
		require.Len(t, fi.Version, 12)
		return fi.Version
	}
	v := versionOf(base(dsl.Step("a", pass)))
	for name, d := range defs {
		require.NoError(t, d.def.Err(), name)
		if d.same {
			require.Equal(t, v, versionOf(d.def), name)
		} else {
			require.NotEqual(t, v, versionOf(d.def), name)
		}
	}
}

// TestWorkerRefusesToStrandRuns: runs that v1 of a flow left at its step
// a, which v2 renamed a2, are reported by Check (the step, its runs in the
// journal, the messages in its queue, the version that had it) and a v2
// worker refuses to start (StrandError) until a v1 worker has finished
// them; then it starts, and the journal remembers both versions.
func TestWorkerRefusesToStrandRuns(t *testing.T) {
	brokertest.Each(t, func(t *testing.T, h *brokertest.Harness) {
		const runs = 3
		ctx := brokertest.Ctx(t)
		j, err := journal.NewMemory(0)
		require.NoError(t, err)
		ef := newEffects()
		a := func(ctx context.Context, o Order) (Order, error) {
			if o.ID == "bad" {
				return o, broker.Fatal(errors.New("declined"))
			}
			return appendStep(ef, "a")(ctx, o)
		}
		v1 := newFixture(t, h, engine.Config{Journal: j})
		v1.register(dsl.Flow(v1.name, dsl.Step("a", a), dsl.Step("b", appendStep(ef, "b"))))
		w1, err := v1.eng.StartWorker(ctx)
		require.NoError(t, err)
		require.NoError(t, w1.Close(ctx))
		var ids []string
		for range runs {
			ids = append(ids, v1.start(Order{ID: "o"}))
		}
		h.WaitDepth(v1.name+".a", runs, 5*time.Second)
		require.NoError(t, v1.eng.Flush(ctx))

		v2 := newFixture(t, h, engine.Config{Journal: j})
		v2.name = v1.name
		v2.register(dsl.Flow(v1.name, dsl.Step("a2", appendStep(ef, "a2")), dsl.Step("b", appendStep(ef, "b"))))
		old, err := v1.eng.Flow(v1.name)
		require.NoError(t, err)
		c, err := v2.eng.Check(ctx, v1.name)
		require.NoError(t, err)
		require.NotEqual(t, old.Version, c.Version)
		require.Len(t, c.Versions, 1)
		require.Equal(t, old.Version, c.Versions[0].Version)
		require.Equal(t, old.Version, c.Before)
		require.Equal(t, []string{"a2"}, c.Added)
		require.Equal(t, []string{"a"}, c.Removed)
		require.True(t, c.Strands())
		require.Equal(t, []engine.StrayStep{{Step: "a", Queue: v1.name + ".a", Messages: runs, CompensationQueue: v1.name + ".compensate.a",
			Runs: runs, Versions: []string{old.Version}, Fate: engine.FateStranded}}, c.Strays)

		_, err = v2.eng.StartWorker(ctx)
		require.ErrorIs(t, err, engine.ErrWouldStrand)
		var se *engine.StrandError
		require.True(t, errors.As(err, &se))
		require.Equal(t, []engine.FlowCheck{c}, se.Checks)
		require.Contains(t, err.Error(), `step "a"`)
		require.Equal(t, runs, h.Depth(v1.name+".a"), "the refusal took nothing")

		w1, err = v1.eng.StartWorker(ctx)
		require.NoError(t, err)
		for _, id := range ids {
			v1.waitStatus(id, journal.Completed, 10*time.Second)
			require.Equal(t, 1, ef.get(id, "a"))
		}
		bad := v1.start(Order{ID: "bad"})
		v1.waitStatus(bad, journal.Failed, 10*time.Second)
		h.WaitDepth(v1.name+".a"+broker.DeadLetterSuffix, 1, 5*time.Second)
		require.NoError(t, w1.Close(ctx))
		c, err = v2.eng.Check(ctx, v1.name)
		require.NoError(t, err)
		require.False(t, c.Strands(), "a failed run waiting for a replay is not stranded: %+v", c.Strays)
		require.Equal(t, []engine.StrayStep{{Step: "a", Queue: v1.name + ".a", CompensationQueue: v1.name + ".compensate.a",
			DeadLettered: 1, Versions: []string{old.Version}, Fate: engine.FateNothing}}, c.Strays, "but it is counted")
		v2.work()
		vs, err := j.Versions(ctx, v1.name)
		require.NoError(t, err)
		require.Len(t, vs, 2)
		require.Equal(t, []string{old.Version, c.Version}, []string{vs[0].Version, vs[1].Version})
		require.Equal(t, []string{"a2", "b"}, vs[1].Steps)
		id := v2.start(Order{ID: "new"})
		v2.waitStatus(id, journal.Completed, 10*time.Second)
		require.Equal(t, 1, ef.get(id, "a2"))
	})
}

// TestRenamedStepTakesOldRuns: v2 renamed v1's steps a and b (a2, b2) and
// says so (dsl.Renamed). Check finds what v1 left there going on, not
// stranded; a v2 worker starts, takes the runs v1 left in a's queue
// through a2 and b2, and a run v1 took past b, which then fails at c in
// v2, has b undone by b2's compensation: its route and the compensations
// it owes renamed as it is read.
func TestRenamedStepTakesOldRuns(t *testing.T) {
	brokertest.Each(t, func(t *testing.T, h *brokertest.Harness) {
		ctx := brokertest.Ctx(t)
		j, err := journal.NewMemory(0)
		require.NoError(t, err)
		ef := newEffects()
		undo := func(name string) func(context.Context, Order) error {
			return func(ctx context.Context, _ Order) error {
				m, _ := broker.Handling(ctx)
				ef.add(m.RunID, name)
				return nil
			}
		}
		c := func(ctx context.Context, o Order) (Order, error) {
			if o.Amount == 0 {
				return o, broker.Fatal(errors.New("nothing to ship"))
			}
			return appendStep(ef, "c")(ctx, o)
		}
		v1 := newFixture(t, h, engine.Config{Journal: j})
		v1.register(dsl.Flow(v1.name, dsl.Step("a", appendStep(ef, "a")), dsl.Step("b", appendStep(ef, "b")).Compensate(undo("undo-b")),
			dsl.Delay(3*time.Second), dsl.Step("c", c)))
		w1, err := v1.eng.StartWorker(ctx)
		require.NoError(t, err)
		past := v1.start(Order{ID: "past", Amount: 0})
		require.Eventually(t, func() bool { return ef.get(past, "b") == 1 }, 10*time.Second, 10*time.Millisecond)
		require.NoError(t, w1.Close(ctx))
		waiting := []string{v1.start(Order{ID: "w1", Amount: 1}), v1.start(Order{ID: "w2", Amount: 2})}
		declined := v1.start(Order{ID: "declined", Amount: 3})
		h.WaitDepth(v1.name+".a", 3, 5*time.Second)
		require.NoError(t, v1.eng.Flush(ctx))

		v2 := newFixture(t, h, engine.Config{Journal: j})
		v2.name = v1.name
		var mu sync.Mutex
		down := true
		a2 := func(ctx context.Context, o Order) (Order, error) {
			mu.Lock()
			defer mu.Unlock()
			if o.ID == "declined" && down {
				return o, broker.Fatal(errors.New("declined"))
			}
			return appendStep(ef, "a2")(ctx, o)
		}
		v2.register(dsl.Flow(v1.name, dsl.Step("a2", a2), dsl.Step("b2", appendStep(ef, "b2")).Compensate(undo("undo-b2")),
			dsl.Delay(3*time.Second), dsl.Step("c", c), dsl.Renamed("a", "a2"), dsl.Renamed("b", "b2")))
		// A compensation waiting in b's compensation queue has nowhere to
		// go in a version whose b2 has none: stranded, Renamed or not.
		require.NoError(t, h.Admin.Transport().Publish(ctx, transport.Publishing{RoutingKey: v1.name + ".compensate.b",
			Message: transport.Message{MessageID: "undo", Body: []byte(`{}`)}}))
		plain := newFixture(t, h, engine.Config{Journal: j})
		plain.name = v1.name
		plain.register(dsl.Flow(v1.name, dsl.Step("a2", a2), dsl.Step("b2", appendStep(ef, "b2")),
			dsl.Delay(3*time.Second), dsl.Step("c", c), dsl.Renamed("a", "a2"), dsl.Renamed("b", "b2")))
		check, err := plain.eng.Check(ctx, v1.name)
		require.NoError(t, err)
		require.True(t, check.Strands(), "%+v", check.Strays)
		check, err = v2.eng.Check(ctx, v1.name)
		require.NoError(t, err)
		require.False(t, check.Strands(), "b2 has a compensation: it takes b's: %+v", check.Strays)
		require.Len(t, h.Drain(v1.name+".compensate.b"), 1)
		check, err = v2.eng.Check(ctx, v1.name)
		require.NoError(t, err)
		require.False(t, check.Strands(), "%+v", check.Strays)
		fates := map[string]string{}
		for _, s := range check.Strays {
			fates[s.Step] = s.Fate
		}
		require.Equal(t, map[string]string{"a": "goes on at a2", "b": "goes on at b2"}, fates)
		fi, err := v2.eng.Flow(v1.name)
		require.NoError(t, err)
		require.Equal(t, []string{"a"}, fi.Steps[0].RenamedFrom)

		v2.work()
		for _, id := range waiting {
			v2.waitStatus(id, journal.Completed, 15*time.Second)
			require.Equal(t, 1, ef.get(id, "a2"), "run %s went on at a2", id)
			require.Equal(t, 1, ef.get(id, "b2"), "and on to b2: its route renamed")
			require.Equal(t, 1, ef.get(id, "c"))
			require.Zero(t, ef.get(id, "a")+ef.get(id, "b"))
		}
		v2.waitStatus(past, journal.Compensated, 15*time.Second)
		require.Equal(t, 1, ef.get(past, "undo-b2"), "b, done by v1, is undone by b2's compensation")
		require.Zero(t, ef.get(past, "undo-b"))
		// A run given up at a2 while its message came from a's queue is
		// where it was set aside: a's dead-letter queue, as the journal
		// says, and a replay finds it there.
		failed := v2.waitStatus(declined, journal.Failed, 15*time.Second)
		require.Equal(t, v1.name+".a"+broker.DeadLetterSuffix, failed.DeadLetter)
		h.WaitDepth(v1.name+".a"+broker.DeadLetterSuffix, 1, 5*time.Second)
		mu.Lock()
		down = false
		mu.Unlock()
		_, err = v2.eng.Replay(ctx, declined)
		require.NoError(t, err)
		v2.waitStatus(declined, journal.Completed, 15*time.Second)
		require.Equal(t, 1, ef.get(declined, "a2"))
		require.Equal(t, 0, h.Depth(v1.name+".a"))
		require.Equal(t, 0, h.Depth(v1.name+".b"))
	})
}

// TestRunsRecordTheirVersion: a run records the version of its flow it
// started on in the journal, which selects runs by it; its messages carry
// no header for it (one more header cost 8% of a run's CPU).
func TestRunsRecordTheirVersion(t *testing.T) {
	brokertest.Each(t, func(t *testing.T, h *brokertest.Harness) {
		fx := newFixture(t, h, engine.Config{})
		fx.register(dsl.Flow(fx.name, dsl.Step("a", appendStep(newEffects(), "a")), dsl.Step("b", appendStep(newEffects(), "b"))))
		fx.work()
		fi, err := fx.eng.Flow(fx.name)
		require.NoError(t, err)
		id := fx.start(Order{ID: "o"})
		r := fx.waitStatus(id, journal.Completed, 10*time.Second)
		require.Equal(t, fi.Version, r.Version)
		runs, err := fx.journal.Runs(brokertest.Ctx(t), journal.Query{Flow: fx.name, Version: fi.Version})
		require.NoError(t, err)
		require.Len(t, runs, 1)
		runs, err = fx.journal.Runs(brokertest.Ctx(t), journal.Query{Flow: fx.name, Version: "000000000000"})
		require.NoError(t, err)
		require.Empty(t, runs)
	})
}
