package engine_test

import (
	"context"
	"fmt"
	"slices"
	"sync"
	"testing"
	"time"

	amqp "github.com/rabbitmq/amqp091-go"
	"github.com/stretchr/testify/require"

	"github.com/acemq/acemq-flow/broker"
	"github.com/acemq/acemq-flow/dsl"
	"github.com/acemq/acemq-flow/engine"
	"github.com/acemq/acemq-flow/engine/journal"
	"github.com/acemq/acemq-flow/internal/brokertest"
	"github.com/acemq/acemq-flow/internal/testenv"
)

// Order is the payload of the test flows.
type Order struct {
	ID      string `json:"id"`
	Amount  int    `json:"amount"`
	Digital bool   `json:"digital"`
	Charged bool   `json:"charged,omitempty"`
	Trail   []string
}

// effects counts what the test flows' steps did, per run and step.
type effects struct {
	mu sync.Mutex
	n  map[string]int
	// order lists compensations as they ran.
	order []string
}

func newEffects() *effects { return &effects{n: map[string]int{}} }

func (e *effects) add(run, what string) int {
	e.mu.Lock()
	defer e.mu.Unlock()
	e.n[run+"/"+what]++
	if len(what) > 5 && what[:5] == "undo-" {
		e.order = append(e.order, run+"/"+what)
	}
	return e.n[run+"/"+what]
}

func (e *effects) get(run, what string) int {
	e.mu.Lock()
	defer e.mu.Unlock()
	return e.n[run+"/"+what]
}

func (e *effects) undone() []string {
	e.mu.Lock()
	defer e.mu.Unlock()
	return append([]string(nil), e.order...)
}

// fixture is an engine on a test broker with a flow name of the test's
// own, whose queues and exchange are deleted when the test ends.
type fixture struct {
	t       *testing.T
	h       *brokertest.Harness
	conn    *broker.Conn
	eng     *engine.Engine
	journal *journal.Memory
	name    string
}

func newFixture(t *testing.T, h *brokertest.Harness, cfg engine.Config) *fixture {
	t.Helper()
	return newFixtureOn(t, h, broker.Config{}, cfg)
}

// newFixtureOn is newFixture on a connection opened with bcfg (its
// InProgressDelay one second when it has none).
func newFixtureOn(t *testing.T, h *brokertest.Harness, bcfg broker.Config, cfg engine.Config) *fixture {
	t.Helper()
	fx := &fixture{t: t, h: h, name: testenv.Name(t, "flow")}
	if bcfg.InProgressDelay == 0 {
		bcfg.InProgressDelay = time.Second
	}
	fx.conn = h.Open(bcfg)
	if cfg.Journal == nil {
		j, err := journal.NewMemory(0)
		require.NoError(t, err)
		fx.journal = j
		cfg.Journal = j
	}
	cfg.Conn = fx.conn
	eng, err := engine.New(cfg)
	require.NoError(t, err)
	fx.eng = eng
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
		defer cancel()
		require.NoError(t, eng.Close(ctx))
	})
	return fx
}

// register registers f, whose name must be fx.name, and arranges for its
// topology to be deleted when the test ends.
func (fx *fixture) register(f *dsl.FlowDef) {
	fx.t.Helper()
	require.NoError(fx.t, f.Err())
	require.NoError(fx.t, fx.eng.Register(f))
	info, err := fx.eng.Flow(f.Name())
	require.NoError(fx.t, err)
	for _, s := range info.Steps {
		fx.h.DeleteLater(s.Queue, s.Queue+broker.DeadLetterSuffix, s.Queue+broker.ParkedSuffix)
		if s.Compensation != "" {
			fx.h.DeleteLater(s.Compensation, s.Compensation+broker.DeadLetterSuffix, s.Compensation+broker.ParkedSuffix)
		}
	}
	fx.h.DeleteLater(info.CompensateQueue, info.CompensateQueue+broker.DeadLetterSuffix, info.CompensateQueue+broker.ParkedSuffix)
	fx.h.DeleteExchangeLater(f.Name())
}

// work starts a worker for every registered flow, closed when the test
// ends.
func (fx *fixture) work() *engine.Worker {
	fx.t.Helper()
	w, err := fx.eng.StartWorker(brokertest.Ctx(fx.t))
	require.NoError(fx.t, err)
	fx.t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
		defer cancel()
		require.NoError(fx.t, w.Close(ctx))
	})
	return w
}

func (fx *fixture) start(payload any, opts ...engine.StartOption) string {
	fx.t.Helper()
	res, err := fx.eng.Start(brokertest.Ctx(fx.t), fx.name, payload, opts...)
	require.NoError(fx.t, err)
	return res.RunID
}

// waitStatus waits until the run has status want, and returns it.
func (fx *fixture) waitStatus(runID string, want journal.Status, within time.Duration) journal.Run {
	fx.t.Helper()
	var last journal.Run
	deadline := time.Now().Add(within)
	for time.Now().Before(deadline) {
		r, err := fx.eng.Journal().Run(context.Background(), runID)
		if err == nil {
			last = r
			if r.Status == want {
				return r
			}
		}
		time.Sleep(20 * time.Millisecond)
	}
	tl, _ := fx.eng.Journal().Timeline(context.Background(), runID)
	fx.t.Fatalf("run %s: status %q after %s, want %q (error %q)\ntimeline:\n%s", runID, last.Status, within, want, last.Error, timeline(tl))
	return last
}

func timeline(tl []journal.Event) string {
	s := ""
	for _, e := range tl {
		s += fmt.Sprintf("  %-12s %-10s attempt %d %-10s %s\n", e.Kind, e.Step, e.Attempt, e.Outcome, e.Error)
	}
	return s
}

// outcomes lists a run's timeline as kind:step:outcome.
func (fx *fixture) outcomes(runID string) []string {
	fx.t.Helper()
	tl, err := fx.eng.Journal().Timeline(context.Background(), runID)
	require.NoError(fx.t, err)
	var out []string
	for _, e := range tl {
		out = append(out, fmt.Sprintf("%s:%s:%s", e.Kind, e.Step, e.Outcome))
	}
	return out
}

// amqpPublishing is the message a plain AMQP service sends on: a new
// message id, the correlation carried, the headers as it received them.
func amqpPublishing(causedBy, correlation string, body []byte, headers amqp.Table) amqp.Publishing {
	headers["x-acemq-causation-id"] = causedBy
	return amqp.Publishing{
		MessageId: broker.NewID(), CorrelationId: correlation, ContentType: "application/json",
		DeliveryMode: amqp.Persistent, Timestamp: time.Now(), Headers: headers, Body: body,
	}
}

// waitOutcomes waits until the run's timeline reads want: the events of a
// step are recorded once its consumer settled it, which may be after the
// step it sent the run to has recorded its own.
func (fx *fixture) waitOutcomes(runID string, want []string) {
	fx.t.Helper()
	var got []string
	deadline := time.Now().Add(10 * time.Second)
	for time.Now().Before(deadline) {
		if got = fx.outcomes(runID); slices.Equal(got, want) {
			return
		}
		time.Sleep(20 * time.Millisecond)
	}
	require.Equal(fx.t, want, got, "run %s's timeline", runID)
}
