package fleet_test

import (
	"context"
	"encoding/json"
	"errors"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/acemq/acemq-flow/broker"
	"github.com/acemq/acemq-flow/dsl"
	"github.com/acemq/acemq-flow/engine"
	"github.com/acemq/acemq-flow/engine/fleet"
	"github.com/acemq/acemq-flow/engine/journal"
	"github.com/acemq/acemq-flow/internal/brokertest"
	"github.com/acemq/acemq-flow/internal/testenv"
)

type order struct {
	ID string `json:"id"`
}

func pass(_ context.Context, o order) (order, error) { return o, nil }

// flows are the test's flows: worked, whose second step holds its runs
// until release is closed; idle, whose worker is gone, so that its runs
// wait in its first queue; never, declared by nobody.
type flows struct {
	worked, idle, never *dsl.FlowDef
	release             chan struct{}
}

func newFlows(t *testing.T) *flows {
	fs := &flows{release: make(chan struct{})}
	fs.worked = dsl.Flow(testenv.Name(t, "worked"),
		dsl.Step("first", pass).Compensate(func(context.Context, order) error { return nil }),
		dsl.Step("hold", func(ctx context.Context, o order) (order, error) {
			select {
			case <-fs.release:
			case <-ctx.Done():
			}
			return o, nil
		}))
	fs.idle = dsl.Flow(testenv.Name(t, "idle"), dsl.Step("first", pass), dsl.Step("second", pass))
	fs.never = dsl.Flow(testenv.Name(t, "never"), dsl.Step("only", pass))
	return fs
}

// engineOn is an engine on a connection of its own to h's broker with
// defs registered; their queues and exchanges are deleted when the test
// ends.
func engineOn(t *testing.T, h *brokertest.Harness, cfg engine.Config, defs ...*dsl.FlowDef) *engine.Engine {
	t.Helper()
	cfg.Conn = h.Open(broker.Config{})
	eng, err := engine.New(cfg)
	require.NoError(t, err)
	t.Cleanup(func() { require.NoError(t, eng.Close(context.Background())) })
	require.NoError(t, eng.Register(defs...))
	for _, f := range eng.Flows() {
		for _, s := range f.Steps {
			h.DeleteLater(s.Queue, s.Queue+broker.DeadLetterSuffix, s.Queue+broker.ParkedSuffix)
			if s.Compensation != "" {
				h.DeleteLater(s.Compensation, s.Compensation+broker.DeadLetterSuffix, s.Compensation+broker.ParkedSuffix)
			}
		}
		h.DeleteLater(f.CompensateQueue, f.CompensateQueue+broker.DeadLetterSuffix, f.CompensateQueue+broker.ParkedSuffix)
		h.DeleteExchangeLater(f.Name)
	}
	return eng
}

// step is the view's row of flow's step.
func step(t *testing.T, v fleet.View, flow, name string) fleet.Step {
	t.Helper()
	for _, s := range v.Steps {
		if s.Flow == flow && s.Step == name {
			return s
		}
	}
	t.Fatalf("no row for %s/%s in %+v", flow, name, v.Steps)
	return fleet.Step{}
}

// TestReadTheFleet: on the loopback and on RabbitMQ, the view lists the
// worker up and ready, a draining one and a lost one (whose steps in
// flight no longer count); per step, the runs waiting in a queue nobody
// consumes, what the workers hold, the dead letters, the queues of a flow
// nothing declared as missing (RabbitMQ closes the channel of a passive
// declare of a missing queue: the queues after it are still read), a
// flow only a worker reports; and the ladder's backlog and lateness.
func TestReadTheFleet(t *testing.T) {
	brokertest.Each(t, func(t *testing.T, h *brokertest.Harness) {
		ctx := brokertest.Ctx(t)
		fs := newFlows(t)
		j, err := journal.NewMemory(0)
		require.NoError(t, err)
		weng := engineOn(t, h, engine.Config{Journal: j, Heartbeat: 20 * time.Millisecond}, fs.worked, fs.idle)
		idle, err := weng.StartWorker(ctx, fs.idle.Name())
		require.NoError(t, err)
		require.NoError(t, idle.Close(ctx)) // its queues stay, unread
		w, err := weng.StartWorker(ctx, fs.worked.Name())
		require.NoError(t, err)
		t.Cleanup(func() {
			close(fs.release)
			require.NoError(t, w.Close(context.Background()))
		})
		for range 2 {
			_, err := weng.Start(ctx, fs.worked.Name(), order{ID: "held"})
			require.NoError(t, err)
		}
		for range 3 {
			_, err := weng.Start(ctx, fs.idle.Name(), order{ID: "waits"})
			require.NoError(t, err)
		}
		conn := weng.Conn()
		out, err := conn.Prepare(ctx, order{ID: "given up"}, broker.To(fs.idle.Name()+".first"+broker.DeadLetterSuffix))
		require.NoError(t, err)
		require.NoError(t, conn.Send(ctx, out))
		later, err := conn.Prepare(ctx, order{ID: "later"}, broker.To(fs.idle.Name()+".first"))
		require.NoError(t, err)
		require.NoError(t, conn.Schedule(ctx, time.Now().Add(90*time.Minute), later))

		now := time.Now()
		hold := fs.worked.Name() + ".hold"
		draining := journal.WorkerReport{ID: "zz-draining", Host: "host-b", SeenAt: now, Interval: time.Minute, Draining: true,
			Queues: []journal.QueueLoad{
				{Queue: hold, Flow: fs.worked.Name(), Step: "hold", InFlight: 1},
				{Queue: "ghost.step", Flow: "ghost", Step: "step", InFlight: 4},
			},
			Ladder: journal.LadderReport{Name: h.Ladder, Delivered: 4, P99: 250 * time.Millisecond, Last: 30 * time.Millisecond}}
		lost := journal.WorkerReport{ID: "aa-lost", Host: "host-a", SeenAt: now.Add(-time.Minute), Interval: time.Second,
			Queues: []journal.QueueLoad{{Queue: hold, Flow: fs.worked.Name(), Step: "hold", InFlight: 5}},
			Ladder: journal.LadderReport{Name: h.Ladder, Delivered: 100, P99: time.Minute}}
		require.NoError(t, j.ReportWorker(ctx, draining))
		require.NoError(t, j.ReportWorker(ctx, lost))

		// The reader: an engine with every flow registered, no worker.
		reader := engineOn(t, h, engine.Config{Journal: j}, fs.worked, fs.idle, fs.never)
		src := fleet.Source{Journal: j, Conn: reader.Conn(), Flows: reader.Flows()}
		var v fleet.View
		require.Eventually(t, func() bool {
			v, err = fleet.Read(ctx, src)
			require.NoError(t, err)
			return step(t, v, fs.worked.Name(), "hold").InFlight == 3 && step(t, v, fs.idle.Name(), "first").Queue.Messages == 3 &&
				step(t, v, fs.idle.Name(), "first").DeadLetter.Messages == 1 && len(v.Ladders) == 1 && v.Ladders[0].Backlog == 1
		}, 10*time.Second, 20*time.Millisecond, "held 2 + 1 reported draining, 3 waiting, 1 dead letter, 1 on the ladder")

		require.Empty(t, v.Problems)
		require.True(t, v.Reports)
		require.Len(t, v.Workers, 3)
		up := v.Workers[0]
		require.Equal(t, w.ID(), up.ID)
		require.Equal(t, fleet.StateUp, up.State)
		require.True(t, up.Ready)
		require.Empty(t, up.NotReady)
		require.Equal(t, []journal.ServedFlow{{Flow: fs.worked.Name(), Version: reader.Flows()[0].Version}}, up.Flows)
		require.Equal(t, fleet.Seconds(20*time.Millisecond), up.Interval)
		require.Equal(t, "zz-draining", v.Workers[1].ID)
		require.Equal(t, fleet.StateDraining, v.Workers[1].State)
		require.Equal(t, "aa-lost", v.Workers[2].ID, "the lost last")
		require.Equal(t, fleet.StateLost, v.Workers[2].State)
		require.Equal(t, 1, v.Count(fleet.StateUp))
		require.Equal(t, 1, v.Count(fleet.StateDraining))
		require.Equal(t, 1, v.Count(fleet.StateLost))

		var names []string
		for _, s := range v.Steps {
			names = append(names, s.Flow+"/"+s.Step)
		}
		require.Equal(t, []string{
			fs.worked.Name() + "/first", fs.worked.Name() + "/hold", fs.idle.Name() + "/first", fs.idle.Name() + "/second",
			fs.never.Name() + "/only", "ghost/step",
		}, names, "the reader's flows in their order, then those only workers report")

		first := step(t, v, fs.worked.Name(), "first")
		require.Equal(t, fleet.Queue{Name: fs.worked.Name() + ".first", Exists: true, Consumers: 1}, first.Queue)
		require.Equal(t, 1, first.Workers)
		require.Zero(t, first.InFlight)
		held := step(t, v, fs.worked.Name(), "hold")
		require.Equal(t, 2, held.Workers, "the worker up and the draining one; not the lost one")
		require.Equal(t, 1, held.Queue.Consumers)
		waiting := step(t, v, fs.idle.Name(), "first")
		require.Equal(t, fleet.Queue{Name: fs.idle.Name() + ".first", Exists: true, Messages: 3}, waiting.Queue)
		require.Equal(t, fleet.Queue{Name: fs.idle.Name() + ".first.dlq", Exists: true, Messages: 1}, waiting.DeadLetter)
		require.Equal(t, fleet.Queue{Name: fs.idle.Name() + ".first.parked", Exists: true}, waiting.Parked)
		require.Zero(t, waiting.Workers)
		missing := step(t, v, fs.never.Name(), "only")
		require.Equal(t, fleet.Queue{Name: fs.never.Name() + ".only"}, missing.Queue, "missing, not an error")
		require.False(t, missing.DeadLetter.Exists)
		ghost := step(t, v, "ghost", "step")
		require.Equal(t, 4, ghost.InFlight)
		require.False(t, ghost.Queue.Exists)

		l := v.Ladders[0]
		require.Equal(t, h.Ladder, l.Name)
		require.Len(t, l.Rungs, 5)
		require.Equal(t, h.Ladder+".1h", l.Rungs[0].Name)
		require.Equal(t, 1, l.Rungs[0].Messages, "an hour and a half ahead: in the hour's rung")
		require.Equal(t, fleet.Queue{Name: h.Ladder + broker.DueSuffix, Exists: true, Consumers: 1}, l.Control)
		require.Zero(t, l.Due)
		require.Equal(t, 2, l.Workers)
		require.Equal(t, fleet.Seconds(250*time.Millisecond), l.LateP99, "the highest of the workers not lost")
		require.GreaterOrEqual(t, l.Delivered, int64(4))
		require.Less(t, l.Delivered, int64(100), "not the lost worker's")
	})
}

// notReporting is a journal that keeps no workers' reports.
type notReporting struct{ journal.Journal }

// failingReports is a journal whose reports cannot be read.
type failingReports struct{ *journal.Memory }

func (failingReports) Workers(context.Context) ([]journal.WorkerReport, error) {
	return nil, errors.New("connection refused")
}

// TestReadWhatCannotBeRead: a journal that keeps no reports says so, one
// that fails and a broker that is gone are problems of the view, not its
// failure; only a context that ended fails it.
func TestReadWhatCannotBeRead(t *testing.T) {
	t.Parallel()
	h := brokertest.New(t, "memory://"+testenv.Name(t, "broker"), false)
	fs := newFlows(t)
	close(fs.release)
	mem, err := journal.NewMemory(0)
	require.NoError(t, err)
	eng := engineOn(t, h, engine.Config{Journal: mem}, fs.idle)
	ctx := brokertest.Ctx(t)

	v, err := fleet.Read(ctx, fleet.Source{Journal: notReporting{mem}, Flows: eng.Flows()})
	require.NoError(t, err)
	require.False(t, v.Reports)
	require.Empty(t, v.Workers)
	require.Empty(t, v.Ladders, "no broker, no ladder")
	require.Len(t, v.Steps, 2, "the flows' steps, without depths")
	require.False(t, v.Steps[0].Queue.Exists)
	require.Empty(t, v.Problems)

	v, err = fleet.Read(ctx, fleet.Source{Journal: failingReports{mem}})
	require.NoError(t, err)
	require.True(t, v.Reports)
	require.Equal(t, []string{"the workers' reports were not read from the journal: connection refused"}, v.Problems)

	gone := h.Open(broker.Config{})
	require.NoError(t, gone.Close(ctx))
	v, err = fleet.Read(ctx, fleet.Source{Journal: mem, Conn: gone, Flows: eng.Flows()})
	require.NoError(t, err)
	require.Len(t, v.Problems, 1)
	require.Contains(t, v.Problems[0], "the broker did not answer for 12 of 12 queues (")
	require.NotEmpty(t, v.Steps[0].Queue.Error)

	done, cancel := context.WithCancel(ctx)
	cancel()
	_, err = fleet.Read(done, fleet.Source{Journal: mem, Conn: eng.Conn(), Flows: eng.Flows()})
	require.ErrorIs(t, err, context.Canceled)
}

// TestViewJSON: durations are seconds, every list is a list (never null).
func TestViewJSON(t *testing.T) {
	t.Parallel()
	v, err := fleet.Read(context.Background(), fleet.Source{})
	require.NoError(t, err)
	b, err := json.Marshal(v)
	require.NoError(t, err)
	require.JSONEq(t, `{"at":"`+v.At.Format(time.RFC3339Nano)+`","reports":false,"workers":[],"steps":[],"ladders":[]}`, string(b))
	b, err = json.Marshal(fleet.Worker{Interval: fleet.Seconds(10 * time.Second), Ladder: fleet.LadderLoad{LateP99: fleet.Seconds(250 * time.Millisecond)}})
	require.NoError(t, err)
	var m map[string]any
	require.NoError(t, json.Unmarshal(b, &m))
	require.InDelta(t, 10.0, m["interval"], 0)
	require.InDelta(t, 0.25, m["ladder"].(map[string]any)["late_p99"], 0)
	var s fleet.Seconds
	require.NoError(t, json.Unmarshal([]byte("1.5"), &s))
	require.Equal(t, fleet.Seconds(1500*time.Millisecond), s)
	require.Error(t, json.Unmarshal([]byte(`"1s"`), &s))
}
