package main

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"maps"
	"slices"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/acemq/acemq-flow/engine"
	"github.com/acemq/acemq-flow/engine/journal"
	"github.com/acemq/acemq-flow/internal/chaos/chaosflow"
	"github.com/acemq/acemq-flow/persistence"
)

// What the driver does for the waits flow (chaosflow.Waits), whose runs
// wait for a signal and then go through a step with a concurrency limit
// per tenant: it sends every other run its signal right after its start,
// before the run reaches its wait, and the others once the journal shows
// them waiting there, in waves; and it counts, once the runs are over,
// the runs that did not go on with the signal they were sent and the
// most runs of one tenant the limited step saw at once.

// signalCounts is how the runs' signals were taken: sent right after the
// start (early) or once the run waited (late), and either kept for a run
// not yet at its wait or resuming one waiting there.
type signalCounts struct {
	earlyKept, earlyResumed int
	lateKept, lateResumed   int
	// over counts signals whose first try failed and whose next found the
	// run over: the first had got through and the run gone on to its end.
	over int
	// retried counts signals taken after more than one try.
	retried int
}

// lateWave is how often the driver looks for the runs waiting for the
// signals it holds back.
const lateWave = 2 * time.Second

// signalToken is the token of run id's signal.
func signalToken(id string) string { return "approval of " + id }

// signal sends run id its signal, trying again after an error that may
// pass (the driver's connection closed under it, the journal slow to show
// the run) until it is taken or ctx ends. A try that failed may have got
// through: the next finds the signal kept (the same payload again does
// nothing more), or the run over once it went on to its end.
func (s *session) signal(ctx context.Context, id string, late bool) {
	token := signalToken(id)
	backoff := 100 * time.Millisecond
	for tries := 1; ; tries++ {
		sent, err := s.eng.Signal(ctx, id, chaosflow.WaitsSignal, chaosflow.Approval{Token: token})
		over := tries > 1 && errors.Is(err, engine.ErrRunEnded)
		if err == nil || over {
			s.mu.Lock()
			s.signals[id] = token
			c := &s.sentSignals
			switch {
			case over:
				c.over++
			case late && sent.Resumed:
				c.lateResumed++
			case late:
				c.lateKept++
			case sent.Resumed:
				c.earlyResumed++
			default:
				c.earlyKept++
			}
			if tries > 1 {
				c.retried++
			}
			s.mu.Unlock()
			return
		}
		for _, refused := range []error{engine.ErrNoSuchWait, engine.ErrRunEnded, engine.ErrSignalTaken, engine.ErrSignalTimedOut, engine.ErrInvalidPayload} {
			if errors.Is(err, refused) {
				s.fail("the signal to run %s was refused: %v", id, err)
				return
			}
		}
		if ctx.Err() != nil {
			return
		}
		s.log.Warn("signal failed; sending it again", slog.String("run_id", id), slog.Any("error", err))
		if sleep(ctx, backoff) != nil {
			return
		}
		backoff = min(2*backoff, 2*time.Second)
	}
}

// signalWaiting, every lateWave, sends their signal to the runs left for
// it (lateSignals) that the journal shows waiting at their wait,
// startConcurrency at a time, until none is left once the starts are
// over, or ctx ends. The runs of a wave come through the wait together
// and crowd their tenants' places in the limited step.
func (s *session) signalWaiting(ctx context.Context, startsDone <-chan struct{}) {
	tick := time.NewTicker(lateWave)
	defer tick.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-tick.C:
		}
		s.mu.Lock()
		left := len(s.lateSignals)
		s.mu.Unlock()
		if left == 0 {
			if closed(startsDone) {
				return
			}
			continue
		}
		rows, err := s.pool.Query(ctx, `SELECT run_id FROM `+persistence.DefaultRunsTable+` WHERE flow = $1 AND status = $2 AND step = $3`,
			s.flow, string(journal.Waiting), chaosflow.WaitsSignal)
		if err != nil {
			s.log.Warn("runs waiting for their signal not read", slog.Any("error", err))
			continue
		}
		waiting, err := pgx.CollectRows(rows, pgx.RowTo[string])
		if err != nil {
			s.log.Warn("runs waiting for their signal not read", slog.Any("error", err))
			continue
		}
		var wave []string
		s.mu.Lock()
		for _, id := range waiting {
			if s.lateSignals[id] {
				wave = append(wave, id)
				delete(s.lateSignals, id)
			}
		}
		s.mu.Unlock()
		s.signalAll(ctx, wave)
	}
}

// signalAll sends the runs ids their signal, startConcurrency at a time.
func (s *session) signalAll(ctx context.Context, ids []string) {
	feed := make(chan string)
	var wg sync.WaitGroup
	for range min(startConcurrency, len(ids)) {
		wg.Go(func() {
			for id := range feed {
				s.signal(ctx, id, true)
			}
		})
	}
	for _, id := range ids {
		feed <- id
	}
	close(feed)
	wg.Wait()
}

// faultPause is how long killAndClose leaves the runs alone after each
// fault.
const faultPause = 2 * time.Second

// killAndClose injects two faults in turn, faultPause apart, from 10% of
// the runs completed to 70% (while runs wait for their signals and others
// crowd the limited step), each at least once: the oldest worker is
// SIGKILLed and another started, then the node closes every client
// connection, the workers' and the driver's, and so on. The kill comes
// first, so that a short scenario has it while the runs still need the
// workers (killAndReplace needs live workers at work after it). A kill
// that found no run in the limited step proves nothing of it: the driver
// kills another (killHolding).
func killAndClose(ctx context.Context, s *session) (func(context.Context), error) {
	if err := s.waitFraction(ctx, 0.1); err != nil {
		return nil, err
	}
	var rounds, closes, conns int
	for i := 0; i < 2 || s.completedPercent(ctx) < 70; i++ {
		if i%2 == 0 {
			if err := s.killHolding(ctx, "run in "+chaosflow.WaitsLast, isExport); err != nil {
				return nil, err
			}
			rounds++
		} else {
			out, err := s.ctl(ctx, "close-all")
			if err != nil {
				return nil, err
			}
			n, err := strconv.Atoi(strings.TrimSpace(out))
			if err != nil {
				return nil, fmt.Errorf("connections closed %q: %w", out, err)
			}
			closes++
			conns += n
		}
		if err := sleep(ctx, faultPause); err != nil {
			return nil, err
		}
	}
	s.note("from 10%% to %d%% completed, in turn: %d rounds of kills (each until a killed worker held runs in %s) and %d closes of every connection (%d connections in all)",
		s.completedPercent(ctx), rounds, chaosflow.WaitsLast, closes, conns)
	return nil, nil
}

// isExport says whether an idempotency key is the limited step's.
func isExport(key string) bool { return strings.HasSuffix(key, "/"+chaosflow.WaitsLast) }

// markKilled records in the effects' database that the driver is about
// to SIGKILL w: the limited step no longer counts the runs it marked in
// the step, which are taken on by other workers and counted there.
func (s *session) markKilled(ctx context.Context, w *worker) error {
	_, err := s.pool.Exec(ctx, `INSERT INTO `+chaosflow.KilledTable+` (worker) VALUES ($1) ON CONFLICT DO NOTHING`,
		chaosflow.WorkerNameOf(w.cmd.Process.Pid))
	if err != nil {
		return fmt.Errorf("mark %s killed: %w", w.name, err)
	}
	return nil
}

// accountWaits fills r's signal and limit counts from the effects and the
// journal (every worker stopped), and notes how the signals were taken,
// how many runs waited for a place and the most runs of each tenant in
// the limited step at once.
func (s *session) accountWaits(ctx context.Context, r *row) {
	r.Limit = chaosflow.TenantLimit
	s.mu.Lock()
	signals, sent, c := maps.Clone(s.signals), maps.Clone(s.sent), s.sentSignals
	s.mu.Unlock()
	r.Signals = len(signals)
	s.note("signals: %d sent right after the start (%d kept for a run not yet at its wait, %d found it waiting), %d once the run waited (%d resumed it, %d kept); %d took more than one try, %d of them finding the run gone on to its end",
		c.earlyKept+c.earlyResumed, c.earlyKept, c.earlyResumed, c.lateKept+c.lateResumed, c.lateResumed, c.lateKept, c.retried, c.over)
	if c.earlyKept == 0 || c.lateResumed == 0 {
		s.fail("no signal was kept for a run not yet at its wait, or none resumed a waiting run: the scenario proved nothing of one of them")
	}
	var unsent []string
	for id := range sent {
		if _, ok := signals[id]; !ok {
			unsent = append(unsent, id)
		}
	}
	if len(unsent) > 0 {
		slices.Sort(unsent)
		s.fail("%d runs were never sent their signal: %s", len(unsent), sample(unsent))
	}

	rows, err := s.pool.Query(ctx, `SELECT run_id, coalesce(signal, '') FROM `+chaosflow.EffectsTable+` WHERE step = $1`, chaosflow.WaitsLast)
	if err != nil {
		s.fail("read the signals the runs went on with: %v", err)
		return
	}
	given := map[string][]string{}
	var id, token string
	_, err = pgx.ForEachRow(rows, []any{&id, &token}, func() error {
		given[id] = append(given[id], token)
		return nil
	})
	if err != nil {
		s.fail("read the signals the runs went on with: %v", err)
		return
	}
	var lost []string
	for id, token := range signals {
		if !slices.Contains(given[id], token) {
			lost = append(lost, fmt.Sprintf("%s (went on with %q)", id, given[id]))
		}
	}
	r.LostSignals = len(lost)
	if len(lost) > 0 {
		slices.Sort(lost)
		s.note("%d runs did not go on with the signal they were sent: %s", len(lost), sample(lost))
	}

	rows, err = s.pool.Query(ctx, `SELECT tenant, most FROM `+chaosflow.MostInStepTable+` ORDER BY tenant`)
	if err != nil {
		s.fail("read the most runs in %s: %v", chaosflow.WaitsLast, err)
		return
	}
	var tenant string
	var most int
	var each []string
	_, err = pgx.ForEachRow(rows, []any{&tenant, &most}, func() error {
		r.MostInStep = max(r.MostInStep, most)
		each = append(each, fmt.Sprintf("%s %d", tenant, most))
		return nil
	})
	if err != nil {
		s.fail("read the most runs in %s: %v", chaosflow.WaitsLast, err)
		return
	}
	var parked int
	// What the timeline says of a run parked for a place (and not of a
	// retry's wait on the ladder).
	err = s.pool.QueryRow(ctx, `SELECT count(DISTINCT run_id) FROM `+persistence.DefaultRunEventsTable+`
		WHERE step = $1 AND status = $2 AND outcome LIKE 'waiting for a place%'`,
		chaosflow.WaitsLast, string(journal.Waiting)).Scan(&parked)
	if err != nil {
		s.fail("count the runs that waited for a place: %v", err)
		return
	}
	s.note("%d runs waited for a place in %s (their tenant's %d taken); the most runs of a tenant in it at once: %s",
		parked, chaosflow.WaitsLast, chaosflow.TenantLimit, strings.Join(each, ", "))
	if parked == 0 {
		s.fail("no run waited for a place in %s: the scenario never reached its limit", chaosflow.WaitsLast)
	}
	if n := s.fleet.logged(waiterNotSent); n > 0 {
		s.note("%d times a worker handed a waiter its place but could not send its message (its connection closed): it came with a worker's sweep, some 30 s later", n)
	}
}

// waiterNotSent is what a worker logs when it hands a waiting run a place
// of the limited step and cannot send the message that brings it back:
// the run then waits for a worker's sweep to send it.
const waiterNotSent = `msg="a waiter's message not sent`
