package benchmark

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"strconv"
	"strings"
	"time"

	amqp "github.com/rabbitmq/amqp091-go"

	"github.com/acemq/acemq-flow/broker"
	"github.com/acemq/acemq-flow/dsl"
	"github.com/acemq/acemq-flow/engine"
	"github.com/acemq/acemq-flow/persistence"
)

// The flow figures' load: runs started from FlowStarters goroutines, at
// most FlowInFlight of them started and not finished at a time (so that a
// run's latency is the flow's, not how long the runs started before it
// took, whatever N), each step (and each link of the plain chain) handled
// by FlowConcurrency handlers with prefetch FlowPrefetch.
const (
	FlowStarters    = 16
	FlowInFlight    = 256
	FlowConcurrency = 8
	FlowPrefetch    = 20
	// FlowSteps is the steps of the flow, and the messages of one run.
	FlowSteps = 3
)

// FlowPayload is a flow run's payload: about 256 bytes of JSON, with when
// the run started.
type FlowPayload struct {
	Started time.Time `json:"started"`
	Pad     string    `json:"pad"`
	// Key is the run's key, for the limits scenario's ConcurrencyKey.
	Key string `json:"key,omitempty"`
}

// flowPad pads FlowPayload to about 256 bytes.
var flowPad = strings.Repeat("x", 200)

// The baselines of the flow figures.
const (
	plainChain         = "plain chain"
	plainChainEnvelope = "plain chain + envelope"
	plainChainNote     = "a run is 3 messages; plain chain: a consume-republish-ack chain in amqp091-go, same queues, guarantees and concurrency"
)

// Flow measures runs of a 3-step flow through the engine (journal and
// idempotency store in memory) against a plain amqp091-go chain doing what
// the flow's messages do (three quorum queues, each message consumed,
// republished persistent and mandatory, acknowledged after the confirm),
// against the same chain carrying the AceMQ envelope headers, and, with a
// database, the engine with its run journal and idempotency store on
// PostgreSQL against in memory. CPU is per message: a run is FlowSteps of them.
func Flow(ctx context.Context, cfg Config) ([]Result, error) {
	cfg, err := cfg.withDefaults()
	if err != nil {
		return nil, err
	}
	cfg.step("flow: engine, journal in memory")
	mem, err := FlowEngine(ctx, cfg, InMemory)
	if err != nil {
		return nil, err
	}
	const scenario = "flow"
	name := fmt.Sprintf("%d-step flow", FlowSteps)
	runs := figure(scenario, name, "runs/s", HigherIsBetter, mem.Rate(), mem).withCPU(mem)
	p50 := figure(scenario, name+", run latency p50", "ms", LowerIsBetter, Millis(mem.Percentile(0.50)), mem)
	p99 := figure(scenario, name+", run latency p99", "ms", LowerIsBetter, Millis(mem.Percentile(0.99)), mem)
	var out []Result
	if cfg.rabbit() {
		cfg.step("flow: plain chain")
		plain, err := FlowChain(ctx, cfg, false)
		if err != nil {
			return nil, err
		}
		cfg.step("flow: plain chain with the envelope")
		env, err := FlowChain(ctx, cfg, true)
		if err != nil {
			return nil, err
		}
		out = append(out,
			runs.compare(plainChain, plain.Rate(), plain, true).noted(plainChainNote),
			runs.compare(plainChainEnvelope, env.Rate(), env, true).
				noted("its messages carry the x-acemq- headers every pipeline message carries"),
			p50.compare(plainChain, Millis(plain.Percentile(0.50)), plain, false).noted("from a run's start to its last step"),
			p99.compare(plainChain, Millis(plain.Percentile(0.99)), plain, false))
	} else {
		out = append(out, runs.noted("a run is 3 messages").noted(noRabbitNote), p50.noted("from a run's start to its last step"), p99)
	}
	if cfg.DB != nil {
		for _, pg := range []struct {
			stores     Stores
			name, note string
		}{
			{JournalOnPostgres, ", journal on PostgreSQL", "the same flow, run journal on PostgreSQL (idempotency store in memory) or in memory"},
			{AllOnPostgres, ", on PostgreSQL", "the same flow, run journal and idempotency store on PostgreSQL (as `acemq-flow worker --database-url` keeps them) or in memory"},
		} {
			cfg.step("flow: engine" + pg.name)
			m, err := FlowEngine(ctx, cfg, pg.stores)
			if err != nil {
				return nil, err
			}
			out = append(out, figure(scenario, name+pg.name, "runs/s", HigherIsBetter, m.Rate(), m).withCPU(m).
				compare("in memory", mem.Rate(), mem, true).noted(pg.note))
		}
	}
	return out, nil
}

// FlowEngine runs cfg.N runs of a 3-step flow whose steps pass their
// payload on, started from FlowStarters goroutines with at most
// FlowInFlight runs under way, through an engine and
// a worker on cfg.URL, with the run journal and idempotency store where
// stores says. Latencies are from a run's start to its last step.
func FlowEngine(ctx context.Context, cfg Config, stores Stores) (Measurement, error) {
	return engineRuns(ctx, cfg, stores, []string{"validate", "charge", "ship"}, cfg.N, keyLimit{})
}

// Stores says where an engine keeps its run journal and idempotency store.
type Stores int

// Where FlowEngine (and engineRuns) keeps the run journal and the
// idempotency store.
const (
	InMemory          Stores = iota // both in memory
	JournalOnPostgres               // the journal on cfg.DB, the store in memory
	AllOnPostgres                   // both on cfg.DB, as workers that share them keep them
)

// keyLimit puts a ConcurrencyKey on engineRuns' steps: at most n runs of
// one of keys keys in a step at once, run i's key i%keys. Zero for none.
type keyLimit struct{ keys, n int }

// engineRuns runs n runs of a flow of the named steps, each passing its
// payload on, as FlowEngine describes, with the journal and store where
// where says, and the steps limited as lim says.
func engineRuns(ctx context.Context, cfg Config, where Stores, steps []string, n int, lim keyLimit) (_ Measurement, err error) {
	cfg, s, err := newScope(ctx, cfg)
	if err != nil {
		return Measurement{}, err
	}
	defer s.close(ctx, &err)
	eng, err := s.engine(ctx, where)
	if err != nil {
		return Measurement{}, err
	}
	lat, cd, window := newLatencies(n), newCountdown(n), newWindow(FlowInFlight)
	pass := func(_ context.Context, p FlowPayload) (FlowPayload, error) { return p, nil }
	parts := make([]dsl.Part, len(steps))
	for i, st := range steps {
		fn := pass
		if i == len(steps)-1 {
			fn = func(_ context.Context, p FlowPayload) (FlowPayload, error) {
				lat.add(time.Since(p.Started))
				cd.add()
				window.release()
				return p, nil
			}
		}
		step := dsl.Step(st, fn).Prefetch(FlowPrefetch)
		if lim.keys > 0 {
			step = step.ConcurrencyKey(`payload.key`, lim.n)
		}
		parts[i] = step
	}
	name := cfg.name("flow")
	if err := s.serve(ctx, eng, dsl.Flow(name, parts...)); err != nil {
		return Measurement{}, err
	}
	return measureCounted(ctx, n, len(steps)*n, FlowStarters, cd, lat, "flow runs through the engine",
		func(ctx context.Context, i int) error {
			if err := window.acquire(ctx); err != nil {
				return err
			}
			p := FlowPayload{Started: time.Now(), Pad: flowPad}
			if lim.keys > 0 {
				p.Key = strconv.Itoa(i % lim.keys)
			}
			if _, err := eng.Start(ctx, name, p); err != nil {
				return fmt.Errorf("start a run: %w", err)
			}
			return nil
		})
}

// engine is an engine on a connection of the scope's own, with
// FlowConcurrency handlers per step and the journal and store where where
// says; it closes when the scope ends.
func (s *scope) engine(ctx context.Context, where Stores) (*engine.Engine, error) {
	conn, err := s.open(ctx)
	if err != nil {
		return nil, err
	}
	ecfg := engine.Config{Conn: conn, Concurrency: FlowConcurrency, Logger: s.cfg.Logger}
	if where != InMemory {
		t, err := s.migratedTables(ctx)
		if err != nil {
			return nil, err
		}
		if ecfg.Journal, err = persistence.NewSQLJournal(s.cfg.DB, persistence.SQLJournalConfig{Tables: t}); err != nil {
			return nil, fmt.Errorf("run journal: %w", err)
		}
		if where == AllOnPostgres {
			if ecfg.Store, err = persistence.NewSQLIdempotencyStore(s.cfg.DB, persistence.SQLIdempotencyStoreConfig{Tables: t}); err != nil {
				return nil, fmt.Errorf("idempotency store: %w", err)
			}
		}
	}
	eng, err := engine.New(ecfg)
	if err != nil {
		return nil, fmt.Errorf("engine: %w", err)
	}
	s.closing("close the engine", eng.Close)
	return eng, nil
}

// serve registers f on eng, deletes what it declares when the scope ends,
// and starts a worker that the scope closes.
func (s *scope) serve(ctx context.Context, eng *engine.Engine, f *dsl.FlowDef) error {
	if err := eng.Register(f); err != nil {
		return fmt.Errorf("register the flow: %w", err)
	}
	fi, err := eng.Flow(f.Name())
	if err != nil {
		return err
	}
	deleteFlow(s, fi)
	w, err := eng.StartWorker(ctx)
	if err != nil {
		return fmt.Errorf("start a worker: %w", err)
	}
	s.closing("close the worker", w.Close)
	return nil
}

// deleteFlow deletes what a flow declares when the scope ends.
func deleteFlow(s *scope, fi engine.FlowInfo) {
	owned := func(q string) { s.deleteQueues(q, q+broker.DeadLetterSuffix, q+broker.ParkedSuffix) }
	for _, st := range fi.Steps {
		owned(st.Queue)
		if st.Compensation != "" {
			owned(st.Compensation)
		}
	}
	owned(fi.CompensateQueue)
	s.deleteExchanges(fi.Exchange)
}

// envelope is the header table of a pipeline message at position pos of
// the flow's three-step route (docs/wire.md).
func envelope(runID, causedBy string, pos, firstSeen int64) amqp.Table {
	h := amqp.Table{
		"x-acemq-first-seen": firstSeen, "x-acemq-attempt": int64(1), "x-acemq-run-id": runID,
		"x-acemq-route": []any{"validate", "charge", "ship"}, "x-acemq-route-position": pos,
	}
	if causedBy != "" {
		h["x-acemq-causation-id"] = causedBy
	}
	return h
}

// FlowChain sends cfg.N messages through a plain amqp091-go chain of three
// quorum queues with the flow's guarantees and concurrency: started
// (persistent, mandatory, confirmed) from FlowStarters goroutines with at
// most FlowInFlight under way, each
// link consumed with prefetch FlowPrefetch by FlowConcurrency handlers
// that republish to the next queue and acknowledge after the confirm.
// With enveloped, every message carries the envelope headers of a
// pipeline message. It needs RabbitMQ.
func FlowChain(ctx context.Context, cfg Config, enveloped bool) (_ Measurement, err error) {
	if cfg, err = cfg.withDefaults(); err != nil {
		return Measurement{}, err
	}
	if !cfg.rabbit() {
		return Measurement{}, errors.New("the plain chain needs RabbitMQ")
	}
	cfg, s, err := newScope(ctx, cfg)
	if err != nil {
		return Measurement{}, err
	}
	defer s.close(ctx, &err)
	queues := make([]string, FlowSteps)
	for i := range queues {
		if queues[i], err = s.consumerQueue(ctx, fmt.Sprintf("chain%d", i+1)); err != nil {
			return Measurement{}, err
		}
	}
	ac, err := s.dial()
	if err != nil {
		return Measurement{}, err
	}
	n := cfg.N
	lat, cd, window := newLatencies(n), newCountdown(n), newWindow(FlowInFlight)
	var consumers plainConsumers
	defer consumers.stop()
	for i, q := range queues {
		deliveries, err := consumers.consume(ac, q, FlowPrefetch)
		if err != nil {
			return Measurement{}, err
		}
		last := i == len(queues)-1
		for range FlowConcurrency {
			pch, err := plainChannel(ac, true)
			if err != nil {
				return Measurement{}, err
			}
			consumers.wg.Go(func() {
				for d := range deliveries {
					if last {
						var p FlowPayload
						if json.Unmarshal(d.Body, &p) == nil {
							lat.add(time.Since(p.Started))
						}
						if d.Ack(false) == nil {
							cd.add()
							window.release()
						}
						continue
					}
					headers := d.Headers
					if enveloped {
						first, _ := headers["x-acemq-first-seen"].(int64)
						run, _ := headers["x-acemq-run-id"].(string)
						headers = envelope(run, d.MessageId, int64(i+1), first)
					}
					err := publishConfirmed(ctx, pch, "", queues[i+1], true, amqp.Publishing{
						DeliveryMode: amqp.Persistent, ContentType: d.ContentType, MessageId: broker.NewID(), Body: d.Body,
						Headers: headers, CorrelationId: d.CorrelationId, Timestamp: time.Now(),
					})
					if err == nil {
						_ = d.Ack(false)
					} else {
						_ = d.Nack(false, true)
					}
				}
			})
		}
	}
	starters, err := confirmPool(ac, FlowStarters)
	if err != nil {
		return Measurement{}, err
	}
	what := "messages through the plain chain"
	if enveloped {
		what = "messages through the enveloped plain chain"
	}
	return measureCounted(ctx, n, FlowSteps*n, FlowStarters, cd, lat, what, func(ctx context.Context, _ int) error {
		if err := window.acquire(ctx); err != nil {
			return err
		}
		ch := <-starters
		defer func() { starters <- ch }()
		body, err := json.Marshal(FlowPayload{Started: time.Now(), Pad: flowPad})
		if err != nil {
			return fmt.Errorf("encode: %w", err)
		}
		msg := amqp.Publishing{
			DeliveryMode: amqp.Persistent, ContentType: "application/json", MessageId: broker.NewID(), Body: body, Timestamp: time.Now(),
		}
		if enveloped {
			msg.CorrelationId = msg.MessageId
			msg.Headers = envelope(broker.NewID(), "", 0, time.Now().UnixMilli())
		}
		return publishConfirmed(ctx, ch, "", queues[0], true, msg)
	})
}
