package workflows_test

import (
	"context"
	"fmt"
	"slices"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/acemq/acemq-flow/broker"
	"github.com/acemq/acemq-flow/engine"
	"github.com/acemq/acemq-flow/engine/journal"
	"github.com/acemq/acemq-flow/internal/brokertest"
	"github.com/acemq/acemq-flow/internal/testenv"
	"github.com/acemq/acemq-flow/workflows"
)

// recorder wraps the stand-ins and records every call, per order, as the
// method's name, with a "!" when it failed, and when it returned.
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
	r.at[o.ID+"/"+call] = time.Now()
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
// by an engine on a test broker; its topology is deleted when the test
// ends.
type fixture struct {
	t    *testing.T
	eng  *engine.Engine
	name string
	rec  *recorder
}

func newFixture(t *testing.T, h *brokertest.Harness, rec *recorder) *fixture {
	t.Helper()
	fx := &fixture{t: t, name: testenv.Name(t, "place-order"), rec: rec}
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

func (fx *fixture) start(o workflows.Order) string {
	fx.t.Helper()
	res, err := fx.eng.Start(brokertest.Ctx(fx.t), fx.name, o)
	require.NoError(fx.t, err)
	return res.RunID
}

// wait waits until the run has status want, and returns it.
func (fx *fixture) wait(run string, want journal.Status, within time.Duration) journal.Run {
	fx.t.Helper()
	var got journal.Run
	require.Eventually(fx.t, func() bool {
		r, err := fx.eng.Journal().Run(context.Background(), run)
		got = r
		return err == nil && r.Status == want
	}, within, 20*time.Millisecond, "run %s should be %s", run, want)
	return got
}

// timeline waits until the run's timeline, as kind:step:outcome, is want
// (the journal may hear of a step after the step that followed it, for a
// moment), and returns it.
func (fx *fixture) timeline(run string, want ...string) []journal.Event {
	fx.t.Helper()
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
