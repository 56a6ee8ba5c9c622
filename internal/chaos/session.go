package main

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net/url"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/acemq/acemq-flow/broker"
	"github.com/acemq/acemq-flow/engine"
	"github.com/acemq/acemq-flow/engine/journal"
	"github.com/acemq/acemq-flow/internal/chaos/chaosflow"
	"github.com/acemq/acemq-flow/patterns"
	"github.com/acemq/acemq-flow/persistence"
)

// startConcurrency is how many starts the driver has going at once: enough
// to keep confirms in flight, few enough to leave the two cores to the
// workers and the broker.
const startConcurrency = 16

// journalGrace is how long the journal may stay behind the effects once
// every run's last effect is applied, before the wait gives up on it.
const journalGrace = 10 * time.Second

// session is one scenario's run: its own database, flows, ladder and
// workers, and what it noticed on the way.
type session struct {
	cfg  config
	sc   scenario
	runs int
	// prefix names the scenario's flows, ladder and logs.
	prefix string
	// flow is the full name of the flow the scenario runs; final is the
	// status its runs end in, lastEffect the effect that ends them.
	flow       string
	final      journal.Status
	lastEffect string
	// expected are the effects each run applies once, in order;
	// expectedSet holds the same, to look them up.
	expected    []string
	expectedSet map[string]bool
	// workMillis is how long each step works before its effect: the
	// scenario's workMillis, or what its workSeconds makes of its size.
	workMillis int
	// alias names, for the deploy flow, the effect a step renamed applies
	// under its new name by its old (b2 is b): one run's b and b2 are one
	// effect applied twice.
	alias map[string]string
	// inPlace is closed once the fault is in place (faultInPlace): a
	// fault that goes on after it holds the first start until then.
	inPlace     chan struct{}
	inPlaceOnce sync.Once
	// engV2 starts runs of the deploy flow's second version, once the
	// workers run it (deploy.go); deploy is what the deploy saw.
	engV2  *engine.Engine
	deploy *deployState

	ladder  string
	dbURL   string
	logFile *os.File
	log     *slog.Logger
	pool    *pgxpool.Pool
	conn    *broker.Conn
	eng     *engine.Engine
	jr      *persistence.SQLJournal
	outbox  *persistence.SQLOutboxStore
	relay   *patterns.OutboxRelay
	fleet   *fleet

	mu       sync.Mutex
	notes    []string
	failures []string
	sent     map[string]bool
	// redelivered is what the node counted before a restart reset its
	// counters; redeliveredBase is the counter's value the rest counts from.
	redelivered, redeliveredBase int64
	// For a flow with a WaitFor (see waits.go): the signal each run was
	// sent (its token), the runs whose signal waits until they wait, and
	// how the signals were taken.
	signals     map[string]string
	lateSignals map[string]bool
	sentSignals signalCounts
}

// runScenario runs one scenario and returns its row; a scenario that
// cannot even be set up is a failed row saying why.
func runScenario(ctx context.Context, cfg config, sc scenario, progress io.Writer) row {
	fmt.Fprintf(progress, "chaos: scenario %d: %s\n", sc.n, sc.name)
	s, err := newSession(ctx, cfg, sc)
	if err != nil {
		return row{Scenario: sc.n, Name: sc.name, Notes: []string{"fail: set up: " + err.Error()}}
	}
	defer s.close()
	return s.run(ctx, progress)
}

func newSession(ctx context.Context, cfg config, sc scenario) (_ *session, err error) {
	s := &session{cfg: cfg, sc: sc, runs: sc.runs, prefix: fmt.Sprintf("chaos-s%d", sc.n), sent: map[string]bool{},
		inPlace: make(chan struct{})}
	defer func() {
		if err != nil {
			s.close()
		}
	}()
	switch {
	case cfg.runs > 0:
		s.runs = cfg.runs
	case cfg.short && sc.short > 0:
		s.runs = sc.short
	}
	s.workMillis = sc.workMillis
	if sc.workSeconds > 0 {
		s.workMillis = sc.workSeconds * 1000 * sc.workers * chaosflow.DeployConcurrency / max(s.runs, 1)
	}
	if sc.tls {
		cfg.amqpURL = cfg.tlsAMQPURL
		s.cfg = cfg
	}
	workerURL := cfg.amqpURL
	if sc.workerURL != nil {
		if workerURL, err = sc.workerURL(cfg.amqpURL); err != nil {
			return nil, err
		}
	}
	s.flow = s.prefix + "." + sc.flow
	s.ladder = s.prefix + ".schedule"
	expected := chaosflow.PipelineSteps
	s.final, s.lastEffect = journal.Completed, "c"
	switch sc.flow {
	case chaosflow.Saga:
		s.final, s.lastEffect = journal.Compensated, chaosflow.SagaUndos[len(chaosflow.SagaUndos)-1]
		expected = append(append([]string(nil), chaosflow.SagaSteps...), chaosflow.SagaUndos...)
	case chaosflow.Forks:
		s.lastEffect, expected = chaosflow.ForksLast, chaosflow.ForksEffects()
	case chaosflow.Waits:
		s.lastEffect, expected = chaosflow.WaitsLast, chaosflow.WaitsSteps
		s.signals = map[string]string{}
		s.lateSignals = map[string]bool{}
	case chaosflow.Deploy:
		expected = chaosflow.DeploySteps
		s.alias = map[string]string{chaosflow.DeployRenamedTo: chaosflow.DeployRenamedFrom}
		s.deploy = &deployState{newRoute: map[string]bool{}}
	}
	s.expected = expected
	s.expectedSet = make(map[string]bool, len(expected))
	for _, e := range expected {
		s.expectedSet[e] = true
	}
	if s.logFile, err = os.Create(filepath.Join(cfg.logs, s.prefix+"-driver.log")); err != nil {
		return nil, fmt.Errorf("driver log: %w", err)
	}
	s.log = slog.New(slog.NewTextHandler(s.logFile, &slog.HandlerOptions{Level: slog.LevelInfo}))
	if s.dbURL, err = createDatabase(ctx, cfg.databaseURL, strings.ReplaceAll(s.prefix, "-", "_")); err != nil {
		return nil, err
	}
	if s.pool, err = pgxpool.New(ctx, s.dbURL); err != nil {
		return nil, fmt.Errorf("scenario database: %w", err)
	}
	if err := persistence.Migrate(ctx, s.pool); err != nil {
		return nil, fmt.Errorf("migrate the scenario database: %w", err)
	}
	if _, err := s.pool.Exec(ctx, chaosflow.CreateTables); err != nil {
		return nil, fmt.Errorf("create the chaos flows' tables: %w", err)
	}
	if s.jr, err = persistence.NewSQLJournal(s.pool, persistence.SQLJournalConfig{}); err != nil {
		return nil, err
	}
	if s.conn, err = (broker.Config{Logger: s.log, Ladder: s.ladder}).Open(ctx, cfg.amqpURL); err != nil {
		return nil, fmt.Errorf("connect to the chaos node: %w", err)
	}
	if s.eng, err = engine.New(engine.Config{Conn: s.conn, Journal: s.jr, Logger: s.log}); err != nil {
		return nil, err
	}
	if err := s.eng.Register(chaosflow.Flows(s.prefix, nil)...); err != nil {
		return nil, fmt.Errorf("register the chaos flows: %w", err)
	}
	env := append(cleanEnviron(), "ACEMQ_URL="+workerURL, "ACEMQ_DATABASE_URL="+s.dbURL,
		"ACEMQ_LADDER="+s.ladder, "CHAOS_PREFIX="+s.prefix)
	if s.deploy != nil {
		if err := s.registerDeploy(); err != nil {
			return nil, err
		}
		env = append(env, "CHAOS_FLOW_VERSION="+chaosflow.DeployV1)
	}
	if sc.outbox {
		if s.outbox, err = persistence.NewSQLOutboxStore(s.pool, persistence.SQLOutboxStoreConfig{}); err != nil {
			return nil, err
		}
		s.relay, err = patterns.NewOutboxRelay(s.conn, s.outbox, patterns.OutboxRelayConfig{InFlight: 64, Logger: s.log})
		if err != nil {
			return nil, err
		}
	}
	s.fleet = newFleet(ctx, cfg.bin, cfg.logs, s.prefix, env, s)
	return s, nil
}

// createDatabase (re)creates the database called name in the cluster of
// adminURL and returns its URL.
func createDatabase(ctx context.Context, adminURL, name string) (string, error) {
	conn, err := pgx.Connect(ctx, adminURL)
	if err != nil {
		return "", fmt.Errorf("connect to the chaos cluster: %w", err)
	}
	defer conn.Close(context.WithoutCancel(ctx))
	id := pgx.Identifier{name}.Sanitize()
	for _, stmt := range []string{"DROP DATABASE IF EXISTS " + id + " WITH (FORCE)", "CREATE DATABASE " + id} {
		if _, err := conn.Exec(ctx, stmt); err != nil {
			return "", fmt.Errorf("%s: %w", stmt, err)
		}
	}
	u, err := url.Parse(adminURL)
	if err != nil {
		return "", fmt.Errorf("-database-url: %w", err)
	}
	u.Path = "/" + name
	return u.String(), nil
}

// cleanEnviron is the driver's environment without any ACEMQ_ variable,
// which a worker would read as a flag.
func cleanEnviron() []string {
	var out []string
	for _, kv := range os.Environ() {
		if !strings.HasPrefix(kv, "ACEMQ_") {
			out = append(out, kv)
		}
	}
	return out
}

// run starts the workers and the runs, injects the fault, waits for every
// run to end, stops everything and counts.
func (s *session) run(ctx context.Context, progress io.Writer) row {
	r := row{Scenario: s.sc.n, Name: s.sc.name}
	if s.sc.setup != nil {
		if err := s.sc.setup(ctx, s); err != nil {
			s.fail("set up: %v", err)
			return s.finish(ctx, r, progress)
		}
	}
	for range s.sc.workers {
		if _, err := s.fleet.start(ctx); err != nil {
			s.fail("start a worker: %v", err)
			s.fleet.stopAll()
			return s.finish(ctx, r, progress)
		}
	}
	base, err := s.redeliveredNow(ctx)
	if err != nil {
		s.fail("read the node's redelivery counter: %v", err)
	}
	s.redeliveredBase = base
	if s.relay != nil {
		if err := s.relay.Start(ctx); err != nil {
			s.fail("start the outbox relay: %v", err)
		}
	}

	began := time.Now()
	var wg sync.WaitGroup
	faultCtx, stopFault := context.WithCancel(ctx)
	defer stopFault()
	faultDone := make(chan struct{})
	var endFault func(context.Context)
	wg.Go(func() {
		defer close(faultDone)
		end, err := s.sc.fault(faultCtx, s)
		if err != nil && faultCtx.Err() == nil {
			s.fail("inject the fault: %v", err)
		}
		endFault = end
	})
	startCtx, stopStarts := context.WithCancel(ctx)
	defer stopStarts()
	startsDone := make(chan struct{})
	wg.Go(func() {
		defer close(startsDone)
		if s.sc.faultFirst {
			select {
			case <-faultDone:
			case <-s.inPlace:
			case <-startCtx.Done():
				return
			}
		}
		s.startRuns(startCtx)
	})
	end, why := s.wait(ctx, startsDone, faultDone, progress)
	if why != "" {
		s.fail("%s", why)
	}
	r.Seconds = end.Sub(began).Seconds()
	stopStarts()
	stopFault()
	wg.Wait()
	stop := context.WithoutCancel(ctx)
	if endFault != nil {
		endFault(stop)
	}
	s.fleet.stopAll()
	if s.relay != nil {
		if err := s.relay.Close(stop); err != nil {
			s.fail("close the outbox relay: %v", err)
		}
	}
	return s.finish(ctx, r, progress)
}

// finish counts what became of the runs and fills the row in.
func (s *session) finish(ctx context.Context, r row, progress io.Writer) row {
	stop, cancel := context.WithTimeout(context.WithoutCancel(ctx), 2*time.Minute)
	defer cancel()
	if err := s.eng.Close(stop); err != nil {
		s.fail("flush the driver's journal writer: %v", err)
	}
	if s.engV2 != nil {
		if err := s.engV2.Close(stop); err != nil {
			s.fail("flush the journal writer of the driver's version 2: %v", err)
		}
	}
	n, err := s.redeliveredNow(stop)
	if err != nil {
		s.fail("read the node's redelivery counter: %v", err)
	}
	s.mu.Lock()
	r.DuplicateDeliveries = s.redelivered + n - s.redeliveredBase
	s.mu.Unlock()
	s.account(stop, &r, progress)
	if s.signals != nil {
		s.accountWaits(stop, &r)
	}
	if s.deploy != nil {
		s.accountDeploy(stop)
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	r.Notes = append(r.Notes, s.notes...)
	for _, f := range s.failures {
		r.Notes = append(r.Notes, "fail: "+f)
	}
	r.OK = len(s.failures) == 0 && r.clean()
	return r
}

// close releases what the session holds; safe on a half-built session.
func (s *session) close() {
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	if s.fleet != nil {
		s.fleet.stopAll()
	}
	if s.relay != nil {
		_ = s.relay.Close(ctx)
	}
	if s.eng != nil {
		_ = s.eng.Close(ctx)
	}
	if s.engV2 != nil {
		_ = s.engV2.Close(ctx)
	}
	if s.conn != nil {
		if s.eng != nil {
			// The next scenario runs on the same node: each scenario's
			// quorum queues are a Raft group apiece, and a few hundred
			// left from the ones before stalled a 2-core node's
			// connection handshakes for 30 s (scenario 10 after 1-9).
			for _, q := range s.queues() {
				_, _ = s.conn.Transport().DeleteQueue(ctx, q)
			}
		}
		_ = s.conn.Close(ctx)
	}
	if s.pool != nil {
		s.pool.Close()
	}
	if s.logFile != nil {
		_ = s.logFile.Close()
	}
}

// startRuns starts the scenario's runs, startConcurrency at a time (and
// at most startRate a second, when the scenario says), each tried again
// until it is started or ctx ends; for a flow with a WaitFor, it returns
// once every run was also sent its signal.
func (s *session) startRuns(ctx context.Context) {
	runs := make(chan int)
	var wg sync.WaitGroup
	for range startConcurrency {
		wg.Go(func() {
			for i := range runs {
				s.startOne(ctx, i)
			}
		})
	}
	startsDone := make(chan struct{})
	var late sync.WaitGroup
	if s.signals != nil {
		late.Go(func() { s.signalWaiting(ctx, startsDone) })
	}
	var pace <-chan time.Time
	if s.sc.startRate > 0 {
		t := time.NewTicker(time.Second / time.Duration(s.sc.startRate))
		defer t.Stop()
		pace = t.C
	}
feed:
	for i := range s.runs {
		if pace != nil {
			select {
			case <-pace:
			case <-ctx.Done():
				break feed
			}
		}
		select {
		case runs <- i:
		case <-ctx.Done():
			break feed
		}
	}
	close(runs)
	wg.Wait()
	close(startsDone)
	late.Wait()
}

// startOne starts the i-th run, trying again (under the same id, so that
// a start that did get through is not a second run) until it is started
// or ctx ends; for a flow with a WaitFor, it then sends the run's signal
// at once or leaves it for when the run waits, every other run.
func (s *session) startOne(ctx context.Context, i int) {
	id := fmt.Sprintf("%s-%06d", s.prefix, i+1)
	o := chaosflow.Order{ID: id, WorkMillis: s.workMillis}
	eng := s.eng
	if i >= s.runs && s.engV2 != nil {
		// A run started after the deploy, by the new version.
		eng = s.engV2
	}
	if s.signals != nil {
		o.Tenant = chaosflow.Tenant(i)
	}
	backoff := 100 * time.Millisecond
	for {
		var err error
		if s.outbox == nil {
			_, err = eng.Start(ctx, s.flow, o, engine.RunID(id))
		} else {
			err = pgx.BeginFunc(ctx, s.pool, func(tx pgx.Tx) error {
				_, err := engine.StartTx(ctx, s.eng, s.outbox, persistence.DB(tx), s.flow, o, engine.RunID(id))
				return err
			})
		}
		if err == nil {
			s.mu.Lock()
			s.sent[id] = true
			if eng == s.engV2 {
				s.deploy.newRoute[id] = true
			}
			if s.signals != nil && i%2 == 1 {
				s.lateSignals[id] = true
			}
			s.mu.Unlock()
			if s.signals != nil && i%2 == 0 {
				s.signal(ctx, id, false)
			}
			return
		}
		if ctx.Err() != nil {
			return
		}
		s.log.Warn("start failed; starting it again under the same id", slog.String("run_id", id), slog.Any("error", err))
		if sleep(ctx, backoff) != nil {
			return
		}
		backoff = min(2*backoff, 2*time.Second)
	}
}

func (s *session) sentCount() int {
	s.mu.Lock()
	defer s.mu.Unlock()
	return len(s.sent)
}

// wait waits until every run sent has ended as it should (the journal
// says so) once the starts and the fault are over, and returns when that
// happened; otherwise it says why it gave up, and returns when the runs
// last moved: no progress for the stall time, or the journal stuck short
// of what the effects show.
func (s *session) wait(ctx context.Context, startsDone, faultDone <-chan struct{}, progress io.Writer) (time.Time, string) {
	tick := time.NewTicker(time.Second)
	defer tick.Stop()
	began := time.Now()
	var lastJ, lastE int
	lastChange, journalMoved, printed := began, began, began
	for {
		select {
		case <-ctx.Done():
			return lastChange, "interrupted"
		case <-tick.C:
		}
		j, e, err := s.progress(ctx)
		now := time.Now()
		if err != nil {
			// The database may be down on purpose, but not for ever.
			if now.Sub(lastChange) > s.cfg.stall {
				return lastChange, fmt.Sprintf("no progress for %s: the database does not answer: %v", s.cfg.stall, err)
			}
			continue
		}
		if j != lastJ || e != lastE {
			lastChange = now
		}
		if j != lastJ {
			journalMoved = now
		}
		lastJ, lastE = j, e
		sent := s.sentCount()
		over := closed(startsDone) && closed(faultDone)
		if now.Sub(printed) >= 5*time.Second {
			printed = now
			fmt.Fprintf(progress, "chaos: s%d %5.0fs  sent %d/%d  %s %d (last effect applied: %d)  workers %d\n",
				s.sc.n, now.Sub(began).Seconds(), sent, s.runs, s.final, j, e, s.fleet.alive())
		}
		switch {
		case over && j >= sent:
			return now, ""
		case over && e >= sent && now.Sub(journalMoved) > journalGrace:
			return lastChange, fmt.Sprintf("every run's last effect was applied but the journal stopped at %d of %d runs %s", j, sent, s.final)
		case now.Sub(lastChange) > s.cfg.stall:
			return lastChange, fmt.Sprintf("no progress for %s: %d of %d runs %s (last effect applied: %d)", s.cfg.stall, j, sent, s.final, e)
		}
	}
}

func closed(c <-chan struct{}) bool {
	select {
	case <-c:
		return true
	default:
		return false
	}
}

// progress is how many runs the journal shows ended as they should, and
// how many had their last effect applied.
func (s *session) progress(ctx context.Context) (journaled, effected int, err error) {
	err = s.pool.QueryRow(ctx, `SELECT
		(SELECT count(*) FROM `+persistence.DefaultRunsTable+` WHERE flow = $1 AND status = $2),
		(SELECT count(DISTINCT run_id) FROM `+chaosflow.EffectsTable+` WHERE step = $3)`,
		s.flow, string(s.final), s.lastEffect).Scan(&journaled, &effected)
	return journaled, effected, err
}

// waitFraction waits until the journal shows frac of the scenario's runs
// ended as they should.
func (s *session) waitFraction(ctx context.Context, frac float64) error {
	want := int(frac * float64(s.runs))
	for {
		if j, _, err := s.progress(ctx); err == nil && j >= want {
			return nil
		}
		if err := sleep(ctx, 200*time.Millisecond); err != nil {
			return err
		}
	}
}

// waitEffects waits until frac of every effect the scenario's runs are to
// apply has been applied: a kill then lands in the middle of the runs'
// work, which for a flow of a thousand items per run is long before any
// run completes.
func (s *session) waitEffects(ctx context.Context, frac float64) error {
	want := int(frac * float64(s.runs*len(s.expected)))
	for {
		var n int
		err := s.pool.QueryRow(ctx, `SELECT count(*) FROM `+chaosflow.EffectsTable).Scan(&n)
		if err == nil && n >= want {
			return nil
		}
		if err := sleep(ctx, 200*time.Millisecond); err != nil {
			return err
		}
	}
}

// effectsPercent is the share of the runs' effects applied, for notes.
func (s *session) effectsPercent(ctx context.Context) int {
	var n int
	if err := s.pool.QueryRow(ctx, `SELECT count(*) FROM `+chaosflow.EffectsTable).Scan(&n); err != nil || s.runs == 0 {
		return 0
	}
	return n * 100 / (s.runs * len(s.expected))
}

// completedPercent is the share of runs ended as they should, for notes.
func (s *session) completedPercent(ctx context.Context) int {
	j, _, err := s.progress(ctx)
	if err != nil || s.runs == 0 {
		return 0
	}
	return j * 100 / s.runs
}

// ctl runs one action of scripts/chaos.sh ctl and returns its output.
func (s *session) ctl(ctx context.Context, action string, args ...string) (string, error) {
	cmd := exec.CommandContext(ctx, s.cfg.ctl, append([]string{"ctl", action}, args...)...)
	var stderr strings.Builder
	cmd.Stderr = &stderr
	out, err := cmd.Output()
	s.log.Info("ctl", slog.String("action", action), slog.Any("args", args), slog.Any("error", err))
	if err != nil {
		return "", fmt.Errorf("chaos.sh ctl %s: %w: %s", action, err, strings.TrimSpace(stderr.String()))
	}
	return string(out), nil
}

// redeliveredNow is the node's count of deliveries it made again (the
// redelivered flag set: the message had been delivered to a connection
// that died, or whose channel closed, before acknowledging it).
func (s *session) redeliveredNow(ctx context.Context) (int64, error) {
	out, err := s.ctl(ctx, "redelivered")
	if err != nil {
		return 0, err
	}
	n, err := strconv.ParseInt(strings.TrimSpace(out), 10, 64)
	if err != nil {
		return 0, fmt.Errorf("redelivery counter %q: %w", out, err)
	}
	return n, nil
}

// checkpointRedelivered keeps what the node counted so far, before a
// restart starts its counters again from zero.
func (s *session) checkpointRedelivered(ctx context.Context) error {
	n, err := s.redeliveredNow(ctx)
	if err != nil {
		return err
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	s.redelivered += n - s.redeliveredBase
	s.redeliveredBase = 0
	return nil
}

// dbNow is the database's clock, which the idempotency claims are timed by.
func (s *session) dbNow(ctx context.Context) (time.Time, error) {
	var t time.Time
	if err := s.pool.QueryRow(ctx, "SELECT now()").Scan(&t); err != nil {
		return t, fmt.Errorf("read the database's clock: %w", err)
	}
	return t, nil
}

// claimSettle is how long after a kill the driver looks for the dead
// worker's claims: the live workers have long finished, and confirmed,
// every step they had claimed before it.
const claimSettle = 5 * time.Second

// deadQuiet is how long after a kill the dead worker's last statements may
// still be running in PostgreSQL: a backend runs what it was sent before
// it notices that its client is gone.
const deadQuiet = 2 * time.Second

// inFlight is what the worker called name was inside when it was killed,
// from the marks its steps and compensations leave (chaosflow.InFlightTable),
// as keys that isCompensation and isExport read: run/step, or
// run/compensate/step; the marks are taken away.
func (s *session) inFlight(ctx context.Context, name string) ([]string, error) {
	rows, err := s.pool.Query(ctx, `DELETE FROM `+chaosflow.InFlightTable+` WHERE worker = $1 RETURNING run_id, step`, name)
	if err != nil {
		return nil, fmt.Errorf("in flight in %s: %w", name, err)
	}
	var keys []string
	var run, step string
	_, err = pgx.ForEachRow(rows, []any{&run, &step}, func() error {
		if undone, ok := strings.CutPrefix(step, chaosflow.UndoPrefix); ok {
			keys = append(keys, run+"/compensate/"+undone)
		} else {
			keys = append(keys, run+"/"+step)
		}
		return nil
	})
	if err != nil {
		return nil, fmt.Errorf("in flight in %s: %w", name, err)
	}
	return keys, nil
}

// settleDeadClaims finds the idempotency claims still held by a worker
// that died at died (database clock), and, unless the driver was told to
// wait out their lease, expires them, as the lease would 5 minutes later.
// Only claims made apart from a transaction are ever left (a limited
// step's): with none live, it returns at once.
//
// A claim (persistence.SQLIdempotencyStore) names its holder, one per
// worker process, but the holder names no process. A holder is dead when
// it has claimed and confirmed nothing since deadQuiet after the kill,
// while the live workers, busy with the runs, have: claims and
// confirmations are stamped with the database's clock plus the lease
// (persistence.DefaultClaimTimeout) or the retention
// (persistence.DefaultIdempotencyRetention), which the workers run with.
func (s *session) settleDeadClaims(ctx context.Context, died time.Time) ([]string, error) {
	idem := persistence.DefaultIdempotencyTable
	var claimed bool
	if err := s.pool.QueryRow(ctx, `SELECT EXISTS (SELECT 1 FROM `+idem+` WHERE state = 'claimed' AND expires_at > now())`).Scan(&claimed); err != nil {
		return nil, fmt.Errorf("dead claims: %w", err)
	}
	if !claimed {
		// Every claim is a transaction (ClaimInTx), gone with the dead
		// worker's connection: nothing to wait for, the runs go on.
		return nil, nil
	}
	if err := sleep(ctx, claimSettle); err != nil {
		return nil, err
	}
	since := died.Add(deadQuiet)
	rows, err := s.pool.Query(ctx, `SELECT DISTINCT holder FROM `+idem+`
		WHERE (state = 'claimed' AND expires_at > $1::timestamptz + $2 * interval '1 second')
		   OR (state = 'confirmed' AND expires_at > $1::timestamptz + $3 * interval '1 second')`,
		since, persistence.DefaultClaimTimeout.Seconds(), persistence.DefaultIdempotencyRetention.Seconds())
	if err != nil {
		return nil, fmt.Errorf("live claim holders: %w", err)
	}
	live, err := pgx.CollectRows(rows, pgx.RowTo[string])
	if err != nil {
		return nil, fmt.Errorf("live claim holders: %w", err)
	}
	if len(live) == 0 {
		// Nobody claimed anything since: every claim would look dead,
		// the live workers' too.
		return nil, errors.New("dead claims: no worker claimed or confirmed anything since the kill, so the dead one's claims cannot be told apart")
	}
	q := `SELECT convert_from(key, 'UTF8') FROM ` + idem + `
		WHERE state = 'claimed' AND expires_at > now() AND holder <> ALL($1)`
	if s.cfg.expireDeadClaims {
		q = `UPDATE ` + idem + ` SET expires_at = now()
			WHERE state = 'claimed' AND expires_at > now() AND holder <> ALL($1)
			RETURNING convert_from(key, 'UTF8')`
	}
	rows, err = s.pool.Query(ctx, q, live)
	if err != nil {
		return nil, fmt.Errorf("dead claims: %w", err)
	}
	keys, err := pgx.CollectRows(rows, pgx.RowTo[string])
	if err != nil {
		return nil, fmt.Errorf("dead claims: %w", err)
	}
	s.log.Info("dead claims", slog.Int("count", len(keys)), slog.Any("keys", keys), slog.Int("live_holders", len(live)),
		slog.Bool("expired", s.cfg.expireDeadClaims))
	return keys, nil
}

// faultInPlace says the fault is in place: a scenario with faultFirst
// starts its runs.
func (s *session) faultInPlace() { s.inPlaceOnce.Do(func() { close(s.inPlace) }) }

// note records something the row's reader should know.
func (s *session) note(format string, args ...any) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.notes = append(s.notes, fmt.Sprintf(format, args...))
}

// fail records why the scenario failed, beyond its counts.
func (s *session) fail(format string, args ...any) {
	msg := fmt.Sprintf(format, args...)
	s.log.Error("scenario failure", slog.String("why", msg))
	s.mu.Lock()
	defer s.mu.Unlock()
	s.failures = append(s.failures, msg)
}
