package engine_test

import (
	"context"
	"encoding/json"
	"fmt"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/acemq/acemq-flow/broker"
	"github.com/acemq/acemq-flow/dsl"
	"github.com/acemq/acemq-flow/engine"
	"github.com/acemq/acemq-flow/engine/journal"
	"github.com/acemq/acemq-flow/internal/brokertest"
)

// Approval is the signal of the approval flows of these tests.
type Approval struct {
	By string `json:"by"`
	OK bool   `json:"ok"`
}

// approvalFlow is request (compensable) -> WaitFor approval (timeout) ->
// pay, which reports what it got on paid. gate, when not nil, holds
// request until it is closed; onTimeout, when not nil, is the wait's.
func approvalFlow(name string, timeout time.Duration, ef *effects, paid chan<- dsl.Signalled[Order, Approval],
	gate <-chan struct{}, onTimeout func(context.Context, Order) (Approval, error)) *dsl.FlowDef {
	wait := dsl.WaitFor[Order, Approval]("approval", timeout)
	if onTimeout != nil {
		wait = wait.OnTimeout(onTimeout)
	}
	return dsl.Flow(name,
		dsl.Step("request", func(ctx context.Context, o Order) (Order, error) {
			if gate != nil {
				<-gate
			}
			m, _ := broker.Handling(ctx)
			ef.add(m.RunID, "request")
			return o, nil
		}).Compensate(func(ctx context.Context, _ Order) error {
			m, _ := broker.Handling(ctx)
			ef.add(m.RunID, "undo-request")
			return nil
		}),
		wait,
		dsl.Step("pay", func(ctx context.Context, s dsl.Signalled[Order, Approval]) (string, error) {
			m, _ := broker.Handling(ctx)
			ef.add(m.RunID, "pay")
			paid <- s
			return s.Signal.By, nil
		}))
}

// goesOn is what run's pay step got, once it got it.
func goesOn(fx *fixture, paid <-chan dsl.Signalled[Order, Approval], run string) dsl.Signalled[Order, Approval] {
	fx.t.Helper()
	select {
	case got := <-paid:
		return got
	case <-time.After(20 * time.Second):
		fx.t.Fatalf("run %s did not go on past its wait; timeline %v", run, fx.outcomes(run))
	}
	return dsl.Signalled[Order, Approval]{}
}

// waitingApproval is a fixture working approvalFlow (with timeout) and a
// run of it waiting at its wait.
func waitingApproval(t *testing.T, h *brokertest.Harness, timeout time.Duration) (*fixture, *effects, chan dsl.Signalled[Order, Approval], string) {
	t.Helper()
	fx := newFixture(t, h, engine.Config{})
	ef, paid := newEffects(), make(chan dsl.Signalled[Order, Approval], 1)
	fx.register(approvalFlow(fx.name, timeout, ef, paid, nil, nil))
	fx.work()
	run := fx.start(Order{ID: "o-1"})
	fx.waitStatus(run, journal.Waiting, 10*time.Second)
	return fx, ef, paid, run
}

// TestSignalToAWaitingRun: a run waits at its WaitFor (status waiting,
// its timeline saying for what and until when) until the signal comes;
// then it goes on with what reached the wait and the signal, once. Every
// signal to a run that is over, unknown, to no wait of its flow, or of the
// wrong type is refused.
func TestSignalToAWaitingRun(t *testing.T) {
	brokertest.Each(t, func(t *testing.T, h *brokertest.Harness) {
		fx := newFixture(t, h, engine.Config{})
		ef, paid := newEffects(), make(chan dsl.Signalled[Order, Approval], 2)
		fx.register(approvalFlow(fx.name, time.Minute, ef, paid, nil, nil))
		fx.work()
		run := fx.start(Order{ID: "o-1", Amount: 30})
		r := fx.waitStatus(run, journal.Waiting, 10*time.Second)
		require.Equal(t, "approval", r.Step)
		require.NotNil(t, r.DueAt)
		require.WithinDuration(t, time.Now().Add(time.Minute), *r.DueAt, 10*time.Second, "it waits until its timeout")
		require.True(t, slices.ContainsFunc(fx.outcomes(run), func(o string) bool { return strings.HasPrefix(o, "step:approval:waiting for signal approval until ") }),
			"%v", fx.outcomes(run))
		brokertest.Nothing(t, paid, 300*time.Millisecond)

		ctx := brokertest.Ctx(t)
		sent, err := fx.eng.Signal(ctx, run, "approval", Approval{By: "ada", OK: true})
		require.NoError(t, err)
		require.Equal(t, engine.SignalSent{RunID: run, Flow: fx.name, Signal: "approval", Resumed: true}, sent)
		got := goesOn(fx, paid, run)
		require.Equal(t, dsl.Signalled[Order, Approval]{Input: Order{ID: "o-1", Amount: 30}, Signal: Approval{By: "ada", OK: true}}, got)

		fx.waitStatus(run, journal.Completed, 10*time.Second)
		brokertest.Nothing(t, paid, 300*time.Millisecond)
		require.Equal(t, 1, ef.get(run, "pay"))

		_, err = fx.eng.Signal(ctx, run, "approval", Approval{By: "ada", OK: true})
		require.ErrorIs(t, err, engine.ErrRunEnded)
		_, err = fx.eng.Signal(ctx, "no-such-run", "approval", Approval{})
		require.ErrorIs(t, err, journal.ErrRunNotFound)
		other := fx.start(Order{ID: "o-2"})
		fx.waitStatus(other, journal.Waiting, 10*time.Second)
		_, err = fx.eng.Signal(ctx, other, "approved", Approval{})
		require.ErrorIs(t, err, engine.ErrNoSuchWait)
		_, err = fx.eng.Signal(ctx, other, "request", Approval{})
		require.ErrorIs(t, err, engine.ErrNoSuchWait, "a step that is no WaitFor")
		_, err = fx.eng.Signal(ctx, other, "approval", json.RawMessage(`{"by": 7}`))
		require.ErrorIs(t, err, engine.ErrInvalidPayload)
		sent, err = fx.eng.Signal(ctx, other, "approval", json.RawMessage(`{"by":"cy","ok":false}`))
		require.NoError(t, err)
		require.True(t, sent.Resumed)
		require.Equal(t, Approval{By: "cy"}, goesOn(fx, paid, other).Signal)
		fx.waitStatus(other, journal.Completed, 10*time.Second)
	})
}

// TestSignalBeforeTheRunWaits: a signal sent while the run is still at the
// step before its wait is kept, and the run takes it when it gets there,
// without waiting. A second signal with another payload is refused; the
// same one again changes nothing.
func TestSignalBeforeTheRunWaits(t *testing.T) {
	brokertest.Each(t, func(t *testing.T, h *brokertest.Harness) {
		fx := newFixture(t, h, engine.Config{})
		ef, paid, gate := newEffects(), make(chan dsl.Signalled[Order, Approval], 1), make(chan struct{})
		fx.register(approvalFlow(fx.name, time.Minute, ef, paid, gate, nil))
		fx.work()
		run := fx.start(Order{ID: "o-1"})
		fx.waitStatus(run, journal.Running, 10*time.Second)
		sent, err := fx.eng.Signal(brokertest.Ctx(t), run, "approval", Approval{By: "early", OK: true})
		require.NoError(t, err)
		require.False(t, sent.Resumed, "kept: the run is not at its wait yet")
		_, err = fx.eng.Signal(brokertest.Ctx(t), run, "approval", Approval{By: "bob"})
		require.ErrorIs(t, err, engine.ErrSignalTaken, "a second signal with another payload")
		sent, err = fx.eng.Signal(brokertest.Ctx(t), run, "approval", Approval{By: "early", OK: true})
		require.NoError(t, err, "the same signal again")
		require.False(t, sent.Resumed)
		close(gate)
		require.Equal(t, Approval{By: "early", OK: true}, goesOn(fx, paid, run).Signal)
		fx.waitStatus(run, journal.Completed, 10*time.Second)
		for _, o := range fx.outcomes(run) {
			require.NotContains(t, o, "waiting for signal", "it never waited")
		}
		require.Equal(t, 1, ef.get(run, "pay"))
	})
}

// TestWaitTimesOut: a wait whose signal does not come in time fails its
// step, and the run is compensated; with OnTimeout the run goes on with
// what it gives, and a signal then is refused.
func TestWaitTimesOut(t *testing.T) {
	brokertest.Each(t, func(t *testing.T, h *brokertest.Harness) {
		fx := newFixture(t, h, engine.Config{})
		ef, paid := newEffects(), make(chan dsl.Signalled[Order, Approval], 1)
		fx.register(approvalFlow(fx.name, time.Second, ef, paid, nil, nil))
		fx.work()
		run := fx.start(Order{ID: "late"})
		r := fx.waitStatus(run, journal.Compensated, 20*time.Second)
		require.Contains(t, r.Error, dsl.ErrTimedOut.Error())
		require.Equal(t, 1, ef.get(run, "undo-request"), "what came before the wait is undone")
		require.Zero(t, ef.get(run, "pay"))
		_, err := fx.eng.Signal(brokertest.Ctx(t), run, "approval", Approval{By: "too late"})
		require.ErrorIs(t, err, engine.ErrRunEnded)

		gf := newFixture(t, h, engine.Config{})
		gpaid := make(chan dsl.Signalled[Order, Approval], 1)
		gf.register(approvalFlow(gf.name, time.Second, ef, gpaid, nil, func(_ context.Context, o Order) (Approval, error) {
			return Approval{By: "timeout", OK: o.Amount < 100}, nil
		}))
		gf.work()
		grun := gf.start(Order{ID: "auto", Amount: 5})
		got := goesOn(gf, gpaid, grun)
		require.Equal(t, dsl.Signalled[Order, Approval]{Input: Order{ID: "auto", Amount: 5}, Signal: Approval{By: "timeout", OK: true}, TimedOut: true}, got)
		gf.waitStatus(grun, journal.Completed, 10*time.Second)
	})
}

// TestSignalOnPostgreSQLAcrossEngines: the run waits in one engine's
// worker, the signal comes from another engine (as `acemq-flow signal`
// does) sharing the PostgreSQL journal: the run goes on once, in the
// worker; and runs signalled early and late side by side each take their
// own signal.
func TestSignalOnPostgreSQLAcrossEngines(t *testing.T) {
	brokertest.OnRabbit(t, func(t *testing.T, h *brokertest.Harness) {
		cfg := onPostgres(t)
		ef, paid := newEffects(), make(chan dsl.Signalled[Order, Approval], 40)
		a := newFixture(t, h, cfg)
		a.register(approvalFlow(a.name, time.Minute, ef, paid, nil, nil))
		b := newFixture(t, h, cfg)
		b.name = a.name
		require.NoError(t, b.eng.Register(approvalFlow(a.name, time.Minute, ef, paid, nil, nil)))
		a.work()
		ctx := brokertest.Ctx(t)
		const n = 20
		runs := make([]string, n)
		for i := range runs {
			runs[i] = a.start(Order{ID: "o", Amount: i})
			// A run is signalled once the journal has it (Signal refuses a
			// run it does not know).
			require.NoError(t, a.eng.Flush(ctx))
			if i%2 == 0 {
				// Signalled at once: most before their run waits.
				_, err := b.eng.Signal(ctx, runs[i], "approval", Approval{By: runs[i], OK: true})
				require.NoError(t, err)
			}
		}
		for i, run := range runs {
			if i%2 == 1 {
				a.waitStatus(run, journal.Waiting, 10*time.Second)
				sent, err := b.eng.Signal(ctx, run, "approval", Approval{By: run, OK: true})
				require.NoError(t, err)
				require.True(t, sent.Resumed)
			}
		}
		for _, run := range runs {
			a.waitStatus(run, journal.Completed, 20*time.Second)
		}
		require.Len(t, paid, n)
		for range n {
			got := <-paid
			require.Equal(t, runs[got.Input.Amount], got.Signal.By, "each run took its own signal")
		}
		for _, run := range runs {
			require.Equal(t, 1, ef.get(run, "pay"), "run %s went on once", run)
		}
	})
}

// TestWaitForBuildErrors: what a flow with a WaitFor refuses.
func TestWaitForBuildErrors(t *testing.T) {
	pass := func(_ context.Context, o Order) (Order, error) { return o, nil }
	tests := map[string]struct {
		flow *dsl.FlowDef
		want string
	}{
		"short timeout": {dsl.Flow("w1", dsl.Step("a", pass), dsl.WaitFor[Order, Approval]("ok", 500*time.Millisecond)), "want at least 1s"},
		"on a branch": {dsl.Flow("w2", dsl.Parallel("p",
			dsl.Branch(dsl.Step("a", pass), dsl.WaitFor[Order, Approval]("ok", time.Minute)),
			dsl.Branch(dsl.Step("b", pass))).Join(func(_ context.Context, o Order, _ dsl.Signalled[Order, Approval], _ Order) (Order, error) {
			return o, nil
		})),
			"a WaitFor on a branch"},
		"no OnTimeout function": {dsl.Flow("w3", dsl.WaitFor[Order, Approval]("ok", time.Minute).OnTimeout(nil)), "OnTimeout with no function"},
		"wrong type after it":   {dsl.Flow("w4", dsl.WaitFor[Order, Approval]("ok", time.Minute), dsl.Step("b", pass)), "takes engine_test.Order"},
	}
	for name, tt := range tests {
		t.Run(name, func(t *testing.T) {
			err := tt.flow.Err()
			require.Error(t, err)
			require.Contains(t, err.Error(), tt.want)
		})
	}
	ok := dsl.Flow("w5", dsl.WaitFor[Order, Approval]("ok", time.Minute), dsl.Step("b", func(_ context.Context, s dsl.Signalled[Order, Approval]) (bool, error) { return s.Signal.OK, nil }))
	require.NoError(t, ok.Err())
}

// TestSignalFromAnotherService: a signal another AceMQ service publishes
// to the wait's queue (x-acemq-run-id, acemq-flow-signal {"send": name},
// the payload as its body, no route) resumes the run; one that cannot be
// taken goes to the step's dead-letter queue with its reason (parked, when
// its payload cannot be read as the signal), and its run is not failed
// for it.
func TestSignalFromAnotherService(t *testing.T) {
	brokertest.Each(t, func(t *testing.T, h *brokertest.Harness) {
		fx, _, paid, run := waitingApproval(t, h, time.Minute)
		ctx := brokertest.Ctx(t)
		send := func(runID, payload string) {
			t.Helper()
			require.NoError(t, fx.conn.Publish(ctx, json.RawMessage(payload), broker.ToExchange(fx.name), broker.To("approval"),
				broker.RunID(runID), broker.Headers(broker.Table{engine.HeaderSignal: `{"send":"approval"}`})))
		}
		send("no-such-run", `{"by":"x"}`)
		refused := h.Get(fx.name+".approval"+broker.DeadLetterSuffix, 10*time.Second)
		require.NotNil(t, refused, "a signal to an unknown run is set aside")
		require.Contains(t, fmt.Sprint(refused.Message.Headers["x-acemq-error"]), "run not found")
		send(run, `{"by":7}`)
		refused = h.Get(fx.name+".approval"+broker.ParkedSuffix, 10*time.Second)
		require.NotNil(t, refused, "a signal of the wrong type is parked, as any body its reader cannot read")
		require.Equal(t, journal.Waiting, fx.waitStatus(run, journal.Waiting, time.Second).Status, "its run still waits")

		send(run, `{"by":"service","ok":true}`)
		require.Equal(t, Approval{By: "service", OK: true}, goesOn(fx, paid, run).Signal)
		fx.waitStatus(run, journal.Completed, 10*time.Second)
	})
}
