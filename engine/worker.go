package engine

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"slices"
	"sync"
	"sync/atomic"
	"time"

	"github.com/acemq/acemq-flow/broker"
	"github.com/acemq/acemq-flow/dsl"
	"github.com/acemq/acemq-flow/engine/journal"
)

// Worker works the steps and compensations of some of an engine's flows:
// every step queue the flows have (but External ones), every compensation
// queue, each flow's compensate-now queue, and the scheduler ladder's
// control consumer. Close it to drain.
type Worker struct {
	e         *Engine
	flows     []string
	consumers []*broker.Consumer
	// queues are the consumers of steps and compensations, with whose
	// they are, for the heartbeat.
	queues []workedQueue
	// hb reports the worker to the journal (nil: it makes no reports);
	// draining is set once Close began.
	hb       *heartbeat
	draining atomic.Bool

	// bgCtx ends when the worker closes; background runs the worker's
	// own goroutines (housekeeping, cron triggers), waited for by Close.
	bgCtx      context.Context
	stopBg     context.CancelFunc
	background sync.WaitGroup
	// tidier takes compensated runs' messages out of dead-letter queues.
	tidier *tidier

	closeOnce sync.Once
	closeErr  error
}

// StartWorker declares the topology of the named flows (every registered
// flow when none is named) and starts consuming it. ctx bounds the setup;
// the worker runs until Close. An unknown flow is ErrUnknownFlow; a flow
// with a Transactional step needs a Store that runs transactions
// (ErrNoTransactions); a flow whose older versions left runs or messages
// at steps it does not have is refused with a StrandError (Check says
// what is where), and each flow's version is recorded in the journal
// otherwise; if any consumer cannot start, those already
// started are stopped and the error returned.
//
// A worker on a journal that keeps workers' reports (journal.WorkerStore)
// reports itself when it started and every Config.Heartbeat: its flows and
// their versions, its readiness (Config.Readiness), the deliveries its
// handlers hold per queue and its ladder's lateness; no report is made per
// message. Close removes the report; a worker that died is shown lost
// (journal.WorkerReport.Lost) and its report pruned after
// WorkerReportRetention.
func (e *Engine) StartWorker(ctx context.Context, flows ...string) (*Worker, error) {
	var fs []*flow
	if len(flows) == 0 {
		fs = e.registered()
	} else {
		for _, name := range flows {
			f, err := e.flow(name)
			if err != nil {
				return nil, err
			}
			fs = append(fs, f)
		}
	}
	if len(fs) == 0 {
		return nil, fmt.Errorf("%w: no flows registered", ErrInvalidConfig)
	}
	for _, f := range fs {
		if err := e.canRun(f); err != nil {
			return nil, err
		}
	}
	if err := e.checkVersions(ctx, fs); err != nil {
		return nil, err
	}
	w := &Worker{e: e, tidier: newTidier(e.conn, e.log)}
	w.bgCtx, w.stopBg = context.WithCancel(context.Background())
	for _, f := range fs {
		w.flows = append(w.flows, f.name)
		if err := e.declare(ctx, f); err != nil {
			return nil, err
		}
	}
	// Delays and held compensations ride the ladder even when no step
	// retries.
	if err := e.conn.RunLadder(ctx); err != nil {
		return nil, err
	}
	// No step of a run cancelled before this worker started may start.
	if err := e.readCancels(ctx); err != nil {
		return nil, err
	}
	for _, f := range fs {
		if err := w.consume(ctx, f); err != nil {
			_ = w.Close(context.WithoutCancel(ctx))
			return nil, err
		}
	}
	if err := w.startCron(ctx, fs); err != nil {
		_ = w.Close(context.WithoutCancel(ctx))
		return nil, err
	}
	w.startHousekeeping()
	w.startHeartbeat(fs)
	w.background.Go(func() { w.tidier.run(w.bgCtx) })
	w.background.Go(func() { w.followCancels(w.bgCtx) })
	if w.e.limits != nil && slices.ContainsFunc(fs, (*flow).limited) {
		w.background.Go(func() { w.sweepLimits(w.bgCtx) })
	}
	return w, nil
}

// followCancels reads the runs cancelled meanwhile from the journal every
// cancelPoll, until ctx ends, so that no step of theirs starts here.
func (w *Worker) followCancels(ctx context.Context) {
	if _, ok := w.e.journal.(journal.CancelFeed); !ok {
		return
	}
	failing := false
	every(ctx, cancelPoll, func() {
		err := w.e.readCancels(ctx)
		switch {
		case err != nil && ctx.Err() == nil && !failing:
			// Once per outage, not four times a second.
			w.e.log.Warn("cancelled runs not read from the journal; trying again every quarter second", slog.Any("error", err))
			failing = true
		case err == nil && failing:
			w.e.log.Info("cancelled runs read from the journal again")
			failing = false
		}
	})
}

// every calls f every d until ctx ends.
func every(ctx context.Context, d time.Duration, f func()) {
	tick := time.NewTicker(d)
	defer tick.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-tick.C:
			f()
		}
	}
}

// journalPurger is a journal that deletes the runs it no longer keeps.
type journalPurger interface {
	Retention() time.Duration
	PurgeEnded(ctx context.Context, olderThan time.Duration) (int64, error)
}

// storePurger is a store that deletes its expired keys.
type storePurger interface {
	PurgeExpired(ctx context.Context) (int64, error)
}

// firePurger is a cron guard that forgets old ticks.
type firePurger interface {
	PurgeFires(ctx context.Context) (int64, error)
}

// startHousekeeping runs the purges the journal and store can do, every
// Housekeeping, until Close.
func (w *Worker) startHousekeeping() {
	jp, _ := w.e.journal.(journalPurger)
	sp, _ := w.e.store.(storePurger)
	fp, _ := w.e.cfg.CronGuard.(firePurger)
	if jp != nil && jp.Retention() <= 0 {
		jp = nil
	}
	ctx := w.bgCtx
	if w.e.cfg.Housekeeping < 0 || (jp == nil && sp == nil && fp == nil) {
		return
	}
	w.background.Go(func() {
		every(ctx, w.e.cfg.Housekeeping, func() {
			if jp != nil {
				n, err := jp.PurgeEnded(ctx, jp.Retention())
				w.e.log.Info("journal: runs past their retention purged", slog.Int64("runs", n), slog.Duration("retention", jp.Retention()), slog.Any("error", err))
			}
			if sp != nil {
				n, err := sp.PurgeExpired(ctx)
				w.e.log.Debug("idempotency: expired keys purged", slog.Int64("keys", n), slog.Any("error", err))
			}
			if fp != nil {
				n, err := fp.PurgeFires(ctx)
				w.e.log.Debug("cron: old ticks purged", slog.Int64("ticks", n), slog.Any("error", err))
			}
		})
	})
}

func (w *Worker) consume(ctx context.Context, f *flow) error {
	e := w.e
	runners, forks := make([]*stepRunner, len(f.steps)), map[string]*stepRunner{}
	for i, s := range f.steps {
		if s.External {
			continue
		}
		runners[i] = newStepRunner(e, f, i, w.tidier.add)
		runners[i].forks = forks
		if s.Fork != nil {
			forks[s.Name] = runners[i]
		}
	}
	for i, s := range f.steps {
		if s.External {
			continue
		}
		olds, oldComps := f.renamedQueues(s)
		if err := w.consumeStep(ctx, runners[i], olds); err != nil {
			return err
		}
		if s.Compensable {
			if err := w.consumeCompensation(ctx, newCompRunner(e, f, i, w.tidier.add), oldComps); err != nil {
				return err
			}
		}
	}
	steps, comps := f.removedRunners(e, w.tidier.add)
	for _, r := range steps {
		if err := w.consumeStep(ctx, r, nil); err != nil {
			return err
		}
	}
	for _, c := range comps {
		if err := w.consumeCompensation(ctx, c, nil); err != nil {
			return err
		}
	}
	n := &nowRunner{e: e, f: f}
	return w.start(ctx, nil, f.compensateNowQueue(), n.handle, broker.Existing(), broker.WithRetry(*e.cfg.Retry),
		broker.WithCodec(f.codec), broker.OnSettle(n.settled), broker.LogTo(e.log.With(slog.String("flow", f.name))))
}

// consumeStep consumes r's queue, and the queues of the step's old names
// (olds, dsl.Renamed) each with a runner of its own: as r, but recording,
// dead-lettering and tidying under the queue it consumed, where what it
// sets aside is. Their messages are renamed as they are read
// (flow.migrate).
func (w *Worker) consumeStep(ctx context.Context, r *stepRunner, olds []string) error {
	e, f, s := w.e, r.f, r.spec
	for i, q := range append([]string{r.queue}, olds...) {
		if i > 0 {
			old := *r
			old.queue = q
			r = &old
		}
		opts := []broker.ConsumeOption{
			broker.Existing(), broker.Prefetch(f.prefetch(s, e.cfg)), broker.Concurrency(f.concurrency(s, e.cfg)),
			broker.WithRetry(r.policy), broker.WithCodec(f.codec), broker.OnSettle(r.settled), broker.BeforeSettle(r.releasing(beforeSettle(e, f.name, s.Name, r.queue, r.outcome))),
			// The consumer's lines say the flow and the step; a give-up is
			// the engine's "step given up" at WARN, the set-aside a DEBUG
			// line beside it.
			broker.LogTo(e.log.With(slog.String("flow", f.name), slog.String("step", s.Name))), broker.SetAsideLogLevel(slog.LevelDebug),
		}
		if key := f.orderKey(s, e); key != nil {
			opts = append(opts, broker.OrderBy(key))
		}
		if err := w.start(ctx, &workedQueue{flow: f.name, step: s.Name}, r.queue, r.handle, opts...); err != nil {
			return err
		}
	}
	return nil
}

// consumeCompensation consumes c's queue, and those of the step's old
// names' compensations (olds), as consumeStep does the step's. They run
// as many at once as their step does.
func (w *Worker) consumeCompensation(ctx context.Context, c *compRunner, olds []string) error {
	e, f, s := w.e, c.f, c.spec
	for i, q := range append([]string{c.queue}, olds...) {
		if i > 0 {
			old := *c
			old.queue = q
			c = &old
		}
		if err := w.start(ctx, &workedQueue{flow: f.name, step: s.Name, compensation: true}, c.queue, c.handle, broker.Existing(), broker.WithRetry(c.policy),
			broker.Prefetch(f.prefetch(s, e.cfg)), broker.Concurrency(f.concurrency(s, e.cfg)),
			broker.WithCodec(f.codec), broker.OnSettle(c.settled), broker.BeforeSettle(beforeSettle(e, f.name, s.Name, c.queue, c.outcome)),
			broker.LogTo(e.log.With(slog.String("flow", f.name), slog.String("step", s.Name))), broker.SetAsideLogLevel(slog.LevelDebug)); err != nil {
			return err
		}
	}
	return nil
}

// start consumes queue with h; q, when not nil, says whose step or
// compensation it is, for the heartbeat.
func (w *Worker) start(ctx context.Context, q *workedQueue, queue string, h broker.Handler, opts ...broker.ConsumeOption) error {
	c, err := w.e.conn.Consume(ctx, queue, h, opts...)
	if err != nil {
		return fmt.Errorf("work %q: %w", queue, err)
	}
	w.consumers = append(w.consumers, c)
	if q != nil {
		q.c = c
		w.queues = append(w.queues, *q)
	}
	return nil
}

// orderKey is the ordering key of a step with OrderedBy, nil otherwise. A
// key that cannot be worked out leaves the message unordered rather than
// holding it.
func (f *flow) orderKey(s dsl.StepSpec, e *Engine) func(*broker.Message) string {
	switch {
	case s.OrderHeader != "":
		name := s.OrderHeader
		return func(m *broker.Message) string {
			if v, ok := m.Headers[name]; ok && v != nil {
				return fmt.Sprint(v)
			}
			return ""
		}
	case s.OrderKey != nil:
		return func(m *broker.Message) string {
			k, err := f.keyOf(s, s.OrderKey, m)
			if err != nil {
				e.log.Debug("ordering key not worked out; handling unordered", "flow", f.name, "step", s.Name, "error", err)
				return ""
			}
			return k
		}
	}
	return nil
}

// Flows is the names of the flows the worker works.
func (w *Worker) Flows() []string { return append([]string(nil), w.flows...) }

// Err says why a consumer of the worker ended on its own (its queue was
// deleted, the broker cancelled it and it could not come back), or nil
// while every one runs: what a readiness check looks at.
func (w *Worker) Err() error {
	var errs []error
	for _, c := range w.consumers {
		select {
		case <-c.Done():
			if err := c.Err(); err != nil {
				errs = append(errs, fmt.Errorf("%s: %w", c.Queue(), err))
			} else {
				errs = append(errs, fmt.Errorf("%s: consumer ended", c.Queue()))
			}
		default:
		}
	}
	return errors.Join(errs...)
}

// Close drains the worker: every consumer stops taking deliveries, lets its
// in-flight steps finish and settles them, all under one deadline (ctx's,
// or the engine's CloseTimeout when ctx has none); deliveries not started go
// back to their queues. Then what the journal writer holds is flushed, and
// the worker's report removed from the journal (it reports itself
// draining meanwhile). Idempotent.
func (w *Worker) Close(ctx context.Context) error {
	w.closeOnce.Do(func() {
		w.draining.Store(true)
		if w.hb != nil {
			w.hb.draining()
		}
		w.stopBg()
		w.background.Wait()
		if _, ok := ctx.Deadline(); !ok {
			var cancel context.CancelFunc
			ctx, cancel = context.WithTimeout(ctx, w.e.cfg.CloseTimeout)
			defer cancel()
		}
		errs := make([]error, len(w.consumers))
		var wg sync.WaitGroup
		for i, c := range w.consumers {
			wg.Go(func() { errs[i] = c.Cancel(ctx) })
		}
		wg.Wait()
		if err := w.e.writer.Flush(ctx); err != nil && !errors.Is(err, context.DeadlineExceeded) {
			errs = append(errs, err)
		}
		if w.hb != nil {
			w.hb.close(ctx)
		}
		w.closeErr = errors.Join(errs...)
	})
	return w.closeErr
}

// Run works the named flows (every registered flow when none is named)
// until ctx ends, then drains within the engine's CloseTimeout: what
// `acemq-flow worker` does on SIGTERM.
func (e *Engine) Run(ctx context.Context, flows ...string) error {
	w, err := e.StartWorker(ctx, flows...)
	if err != nil {
		return err
	}
	<-ctx.Done()
	return w.Close(context.WithoutCancel(ctx))
}
