package engine

import (
	"context"
	"errors"
	"fmt"
	"hash/fnv"
	"log/slog"
	"sync"
	"time"

	"github.com/acemq/acemq-flow/broker"
	"github.com/acemq/acemq-flow/broker/transport"
	"github.com/acemq/acemq-flow/dsl"
)

// ErrCronLocked: another worker already runs the flow's cron triggers
// without a database (Config.CronAlone).
var ErrCronLocked = errors.New("another worker runs these cron triggers")

// CronGuard decides which worker starts a cron tick's run, so that a
// tick starts one run however many workers run its flow:
// persistence.SQLCronGuard is one.
type CronGuard interface {
	// Fire claims a tick of flow's trigger: true for exactly one caller.
	Fire(ctx context.Context, flow, trigger string, tick time.Time) (bool, error)
	// Last is the latest tick anyone claimed, and false for none: what a
	// worker starting up catches up from.
	Last(ctx context.Context, flow, trigger string) (time.Time, bool, error)
}

// maxMissedTicks bounds how far back a worker counts missed ticks.
const maxMissedTicks = 100_000

// TriggerInfo describes a cron trigger for a person: its schedule and
// when it fires next.
type TriggerInfo struct {
	Flow    string    `json:"flow"`
	Spec    string    `json:"spec"`
	CatchUp string    `json:"catch_up"`
	Next    time.Time `json:"next"`
}

// Triggers lists the cron triggers of the registered flows with their
// next firing.
func (e *Engine) Triggers() []TriggerInfo {
	now := e.now()
	var out []TriggerInfo
	for _, f := range e.registered() {
		for _, c := range f.def.Crons() {
			out = append(out, TriggerInfo{Flow: f.name, Spec: c.Spec, CatchUp: c.CatchUp.String(), Next: c.Next(now)})
		}
	}
	return out
}

// startCron runs the cron triggers of the worker's flows until the worker
// closes: with the engine's CronGuard on every worker, or alone (holding a
// lock on the broker) on a worker of an engine with CronAlone; otherwise
// it says that nothing fires them.
func (w *Worker) startCron(ctx context.Context, fs []*flow) error {
	e := w.e
	for _, f := range fs {
		crons := f.def.Crons()
		if len(crons) == 0 {
			continue
		}
		if e.cfg.CronGuard == nil && !e.cfg.CronAlone {
			e.log.Warn("flow has cron triggers, but this worker fires none: give the workers a database, or run exactly one with --cron",
				slog.String("flow", f.name))
			continue
		}
		if e.cfg.CronGuard == nil {
			if err := w.cronLock(ctx, f); err != nil {
				return err
			}
		}
		for _, c := range crons {
			t := w.newTrigger(w.bgCtx, f, c)
			w.background.Go(t.run)
		}
	}
	return nil
}

// cronLock makes this worker the only one firing f's triggers without a
// database: an exclusive consumer on <flow>.cron-lock, which the broker
// gives one connection at a time and takes back when it goes.
func (w *Worker) cronLock(ctx context.Context, f *flow) error {
	q := f.name + ".cron-lock"
	if err := w.e.conn.Declare(ctx, broker.Topology{Queues: []broker.Queue{{Name: q, Durable: true}}}); err != nil {
		return fmt.Errorf("cron lock of %q: %w", f.name, err)
	}
	c, err := w.e.conn.Consume(ctx, q, func(context.Context, *broker.Message) broker.Ack { return broker.Accept() },
		broker.Existing(), broker.Exclusive(), broker.WithRetry(broker.NoRetry()))
	var ae *transport.AMQPError
	if errors.As(err, &ae) && (ae.Code == 403 || ae.Code == 405) {
		return fmt.Errorf("%w: %q: %v", ErrCronLocked, f.name, err)
	}
	if err != nil {
		return fmt.Errorf("cron lock of %q: %w", f.name, err)
	}
	w.consumers = append(w.consumers, c)
	return nil
}

// trigger is one cron trigger of a running worker: a timer on the
// connection's clock for its next tick, whose call starts the tick's run
// and arms the timer for the tick after. A clock a test moves by hand
// (package engine/flowtest) calls it on the goroutine moving the clock:
// by the time the clock has moved, the run has started and the next tick
// is armed.
type trigger struct {
	w     *Worker
	ctx   context.Context
	f     *flow
	c     dsl.CronSpec
	clock broker.Clock

	mu sync.Mutex
	// note goes into the next run's start (missed ticks skipped).
	note string
	// stop stops the armed timer; done says the worker is closing, and
	// no timer is to be armed again; firing counts the timers armed and
	// not yet stopped or returned.
	stop   func() bool
	done   bool
	firing sync.WaitGroup
}

// newTrigger catches up on the ticks of c missed while no worker ran,
// and arms the timer for its next tick before the worker's start
// returns: on a clock a test moves, a tick the test moves past fires.
func (w *Worker) newTrigger(ctx context.Context, f *flow, c dsl.CronSpec) *trigger {
	t := &trigger{w: w, ctx: ctx, f: f, c: c, clock: w.e.conn.Clock()}
	t.note = w.catchUp(ctx, f, c)
	t.mu.Lock()
	t.arm()
	t.mu.Unlock()
	return t
}

// run starts a run on every tick until the trigger's context ends.
func (t *trigger) run() {
	<-t.ctx.Done()
	t.mu.Lock()
	t.done = true
	if t.stop() {
		t.firing.Done()
	}
	t.mu.Unlock()
	t.firing.Wait()
}

// arm sets the timer for the next tick. t.mu is held.
func (t *trigger) arm() {
	now := t.clock.Now()
	tick := t.c.Next(now)
	t.firing.Add(1)
	t.stop = t.clock.AfterFunc(tick.Sub(now), func() {
		defer t.firing.Done()
		t.mu.Lock()
		note := t.note
		t.mu.Unlock()
		started := t.w.fire(t.ctx, t.f, t.c, tick, note)
		t.mu.Lock()
		defer t.mu.Unlock()
		if started {
			t.note = ""
		}
		if !t.done {
			t.arm()
		}
	})
}

// catchUp looks at what the trigger missed since its last claimed tick:
// it starts a run for the last one (CatchUpLast), or says they were
// skipped in the next run's timeline.
func (w *Worker) catchUp(ctx context.Context, f *flow, c dsl.CronSpec) string {
	g := w.e.cfg.CronGuard
	if g == nil {
		return ""
	}
	last, ok, err := g.Last(ctx, f.name, c.Spec)
	if err != nil || !ok {
		return ""
	}
	now := w.e.now()
	var missed int
	var latest time.Time
	for t := c.Next(last); t.Before(now) && missed < maxMissedTicks; t = c.Next(t) {
		missed, latest = missed+1, t
	}
	if missed == 0 {
		return ""
	}
	if c.CatchUp == dsl.CatchUpLast {
		w.fire(ctx, f, c, latest, fmt.Sprintf("caught up: the last of %d missed ticks", missed))
		return ""
	}
	return fmt.Sprintf("%d missed ticks skipped", missed)
}

// fire claims tick and, having won it, starts its run; it says whether
// the run was started.
func (w *Worker) fire(ctx context.Context, f *flow, c dsl.CronSpec, tick time.Time, note string) bool {
	e := w.e
	log := e.log.With(slog.String("flow", f.name), slog.String("cron", c.Spec), slog.Time("tick", tick))
	if g := e.cfg.CronGuard; g != nil {
		won, err := g.Fire(ctx, f.name, c.Spec, tick)
		if err != nil {
			log.Error("cron tick not claimed: no run for it", slog.Any("error", err))
			return false
		}
		if !won {
			return false
		}
	}
	payload, err := c.Payload(ctx, tick)
	if err != nil {
		log.Error("cron tick's payload failed: no run for it", slog.Any("error", err))
		return false
	}
	outcome := "started (cron tick " + tick.Format(time.RFC3339) + ")"
	if note != "" {
		outcome = "started (cron tick " + tick.Format(time.RFC3339) + "; " + note + ")"
	}
	// The same run id for the same tick: a start tried again is one run.
	id := fmt.Sprintf("cron/%s/%08x/%d", f.name, fnv32(c.Spec), tick.Unix())
	backoff := 100 * time.Millisecond
	for attempt := 1; ; attempt++ {
		_, err := e.Start(ctx, f.name, payload, RunID(id), startOutcome(outcome))
		if err == nil {
			return true
		}
		if attempt == 5 || ctx.Err() != nil {
			log.Error("cron run not started", slog.String("run_id", id), slog.Any("error", err))
			return false
		}
		select {
		case <-time.After(backoff):
		case <-ctx.Done():
			return false
		}
		backoff *= 2
	}
}

func fnv32(s string) uint32 {
	h := fnv.New32a()
	_, _ = h.Write([]byte(s))
	return h.Sum32()
}
