package workflows_test

import (
	"context"
	"fmt"
	"slices"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/acemq/acemq-flow/broker"
	"github.com/acemq/acemq-flow/engine"
	"github.com/acemq/acemq-flow/engine/flowtest"
	"github.com/acemq/acemq-flow/engine/journal"
	"github.com/acemq/acemq-flow/internal/brokertest"
	"github.com/acemq/acemq-flow/internal/testenv"
	"github.com/acemq/acemq-flow/workflows"
)

// recorder wraps the stand-ins and records every call, per order, as the
// method's name, with a "!" when it failed, and when it returned on the
// fixture's clock.
type recorder struct {
	*workflows.StandIns

	mu    sync.Mutex
	calls map[string][]string
	at    map[string]time.Time
}

func newRecorder() *recorder {
	return &recorder{StandIns: workflows.NewStandIns(), calls: map[string][]string{}, at: map[string]time.Time{}}
}

func (r *recorder) services() workflows.Services {
	return workflows.Services{Payments: r, Inventory: r, Courier: r}
}

func (r *recorder) add(o workflows.Order, call string, err error) {
	r.mu.Lock()
	defer r.mu.Unlock()
	if err != nil {
		call += "!"
	}
	r.calls[o.ID] = append(r.calls[o.ID], call)
	r.at[o.ID+"/"+call] = r.Now()
}

// of is what the services did for an order, in order.
func (r *recorder) of(id string) []string {
	r.mu.Lock()
	defer r.mu.Unlock()
	return slices.Clone(r.calls[id])
}

// when is when a call for an order last returned.
func (r *recorder) when(id, call string) time.Time {
	r.mu.Lock()
	defer r.mu.Unlock()
	return r.at[id+"/"+call]
}

func (r *recorder) Charge(ctx context.Context, o workflows.Order) (string, error) {
	id, err := r.StandIns.Charge(ctx, o)
	r.add(o, "charge", err)
	return id, err
}

func (r *recorder) Refund(ctx context.Context, o workflows.Order) error {
	err := r.StandIns.Refund(ctx, o)
	r.add(o, "refund "+o.PaymentID, err)
	return err
}

func (r *recorder) Reserve(ctx context.Context, o workflows.Order) (string, error) {
	id, err := r.StandIns.Reserve(ctx, o)
	r.add(o, "reserve", err)
	return id, err
}

func (r *recorder) Release(ctx context.Context, o workflows.Order) error {
	err := r.StandIns.Release(ctx, o)
	r.add(o, "release "+o.Reservation, err)
	return err
}

func (r *recorder) Book(ctx context.Context, o workflows.Order) (string, error) {
	id, err := r.StandIns.Book(ctx, o)
	r.add(o, "book", err)
	return id, err
}

func (r *recorder) Cancel(ctx context.Context, o workflows.Order) error {
	err := r.StandIns.Cancel(ctx, o)
	r.add(o, "cancel "+o.Booking, err)
	return err
}

func (r *recorder) Ship(ctx context.Context, o workflows.Order) (string, error) {
	id, err := r.StandIns.Ship(ctx, o)
	r.add(o, "ship", err)
	return id, err
}

// fixture is a place-order flow of the test's own, on the recorder, worked
// by an engine: on a flowtest.Env, whose clock the test skips, or on
// RabbitMQ, in real time.
type fixture struct {
	t    *testing.T
	eng  *engine.Engine
	name string
	rec  *recorder
	// env is the Env of a fixture on the loopback; nil on RabbitMQ.
	env *flowtest.Env
	// ahead moves the stand-ins' clock on RabbitMQ (pass).
	ahead atomic.Int64
}

// each runs f with a fixture on a flowtest.Env, time skipped, and with
// one on RabbitMQ, in real time, in parallel; open makes the fixture
// once the test has set up the recorder.
func each(t *testing.T, f func(t *testing.T, open func(*recorder) *fixture)) {
	t.Run("flowtest", func(t *testing.T) {
		t.Parallel()
		f(t, func(rec *recorder) *fixture { return onEnv(t, rec) })
	})
	t.Run("rabbitmq", func(t *testing.T) {
		t.Parallel()
		h := brokertest.New(t, testenv.RabbitURL(t), true)
		f(t, func(rec *recorder) *fixture { return onRabbit(t, h, rec) })
	})
}

// onEnv is a fixture on a flowtest.Env.
func onEnv(t *testing.T, rec *recorder) *fixture {
	t.Helper()
	fx := &fixture{t: t, name: workflows.PlaceOrderName, rec: rec}
	flow := workflows.NewPlaceOrder(fx.name, rec.services())
	fx.env = flowtest.Config{Broker: broker.Config{InProgressDelay: time.Second}}.New(t, flow)
	fx.eng = fx.env.Engine()
	rec.Now = fx.env.Now
	return fx
}

// onRabbit is a fixture on RabbitMQ, its topology deleted when the test
// ends.
func onRabbit(t *testing.T, h *brokertest.Harness, rec *recorder) *fixture {
	t.Helper()
	fx := &fixture{t: t, name: testenv.Name(t, "place-order"), rec: rec}
	rec.Now = func() time.Time { return time.Now().Add(time.Duration(fx.ahead.Load())) }
	conn := h.Open(broker.Config{InProgressDelay: time.Second})
	eng, err := engine.New(engine.Config{Conn: conn})
	require.NoError(t, err)
	fx.eng = eng
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
		defer cancel()
		require.NoError(t, eng.Close(ctx))
	})
	flow := workflows.NewPlaceOrder(fx.name, rec.services())
	require.NoError(t, flow.Err())
	require.NoError(t, eng.Register(flow))
	info, err := eng.Flow(fx.name)
	require.NoError(t, err)
	for _, s := range info.Steps {
		h.DeleteLater(s.Queue, s.Queue+broker.DeadLetterSuffix, s.Queue+broker.ParkedSuffix)
		if s.Compensation != "" {
			h.DeleteLater(s.Compensation, s.Compensation+broker.DeadLetterSuffix, s.Compensation+broker.ParkedSuffix)
		}
	}
	h.DeleteLater(info.CompensateQueue, info.CompensateQueue+broker.DeadLetterSuffix, info.CompensateQueue+broker.ParkedSuffix)
	h.DeleteExchangeLater(fx.name)
	w, err := eng.StartWorker(brokertest.Ctx(t))
	require.NoError(t, err)
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
		defer cancel()
		require.NoError(t, w.Close(ctx))
	})
	return fx
}

// now is the fixture's time: the Env's clock, or the stand-ins' on
// RabbitMQ (the machine's, moved on by pass).
func (fx *fixture) now() time.Time { return fx.rec.Now() }

// pass lets d go by: on the Env, its clock moves on (and what is due on
// the way happens); on RabbitMQ, only the stand-ins' clock does.
func (fx *fixture) pass(d time.Duration) {
	if fx.env != nil {
		fx.env.Advance(d)
		return
	}
	fx.ahead.Add(int64(d))
}

// short is the delay a test gives the flow: on the Env, where time is
// skipped, as long as it would be in production; on RabbitMQ, which waits
// for it, a few seconds.
func (fx *fixture) short(production, rabbit time.Duration) time.Duration {
	if fx.env != nil {
		return production
	}
	return rabbit
}

func (fx *fixture) start(o workflows.Order) string {
	fx.t.Helper()
	res, err := fx.eng.Start(brokertest.Ctx(fx.t), fx.name, o)
	require.NoError(fx.t, err)
	return res.RunID
}

// wait waits until the run has status want, and returns it: on the Env,
// skipping time; on RabbitMQ, for at most within.
func (fx *fixture) wait(run string, want journal.Status, within time.Duration) journal.Run {
	fx.t.Helper()
	if fx.env != nil {
		return fx.env.RunUntil(run, want)
	}
	var got journal.Run
	require.Eventually(fx.t, func() bool {
		r, err := fx.eng.Journal().Run(context.Background(), run)
		got = r
		return err == nil && r.Status == want
	}, within, 20*time.Millisecond, "run %s should be %s", run, want)
	return got
}

// timeline waits until the run's timeline, as kind:step:outcome, is want
// (on RabbitMQ the journal may hear of a step after the step that
// followed it, for a moment), and returns it.
func (fx *fixture) timeline(run string, want ...string) []journal.Event {
	fx.t.Helper()
	if fx.env != nil {
		require.Equal(fx.t, want, fx.env.Outcomes(run), "the timeline of run %s", run)
		return fx.env.Timeline(run)
	}
	var (
		tl  []journal.Event
		got []string
	)
	ok := assert.Eventually(fx.t, func() bool {
		var err error
		tl, err = fx.eng.Journal().Timeline(context.Background(), run)
		require.NoError(fx.t, err)
		got = make([]string, len(tl))
		for i, e := range tl {
			got[i] = fmt.Sprintf("%s:%s:%s", e.Kind, e.Step, e.Outcome)
		}
		return slices.Equal(got, want)
	}, 10*time.Second, 20*time.Millisecond)
	if !ok {
		require.Equal(fx.t, want, got, "the timeline of run %s", run)
	}
	return tl
}
