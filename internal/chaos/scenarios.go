package main

import (
	"context"
	"fmt"
	"slices"
	"strings"
	"time"

	"github.com/acemq/acemq-flow/internal/chaos/chaosflow"
)

// scenario is one row of the table: a flow run many times while a fault
// is injected.
type scenario struct {
	n    int
	name string
	// runs is the scenario's own size; short its size in -short (0: not
	// in the short form).
	runs, short int
	// flow is chaosflow.Pipeline, chaosflow.Saga, chaosflow.Forks,
	// chaosflow.Waits or chaosflow.Deploy.
	flow    string
	workers int
	// workMillis is how long each step works before its effect (see
	// chaosflow.Order.WorkMillis). workSeconds, when set, chooses it from
	// the scenario's size instead: so that the deploy flow's slow steps,
	// chaosflow.DeployConcurrency runs at a time in each worker, take
	// about that long to work every run, whatever the size, and the runs
	// are in flight at them for as long.
	workMillis, workSeconds int
	// startRate, when set, is the most runs started per second: the runs
	// then come in steadily over the scenario rather than all at once, so
	// that its faults find each part of the flow busy throughout.
	startRate int
	// outbox starts runs with engine.StartTx through the outbox, relayed
	// by a patterns.OutboxRelay, instead of engine.Start.
	outbox bool
	// fault injects the fault while the runs go. It returns once the fault
	// is in place and over, or, for a fault that lasts the whole scenario,
	// with what ends it.
	fault func(ctx context.Context, s *session) (end func(context.Context), err error)
	// faultFirst holds the first start until fault has returned, or
	// said it is in place (session.faultInPlace): the fault is in place
	// from before the first run.
	faultFirst bool
	// tls runs the scenario on config.tlsAMQPURL (the cluster over amqps).
	tls bool
	// workerURL, when set, is the broker URL the workers get instead of
	// the driver's own (the same nodes in another order).
	workerURL func(driverURL string) (string, error)
	// setup runs before the workers start.
	setup func(ctx context.Context, s *session) error
}

// suites are the scenario lists -suite chooses from.
var suites = map[string][]scenario{"chaos": scenarios, "cluster": clusterScenarios}

// scenarios are the scenarios of docs/chaos.md, in order.
var scenarios = []scenario{
	{n: 1, name: "broker closes every connection every 2 s", runs: 20000, short: 2000, flow: chaosflow.Pipeline, workers: 3, fault: closeConnections, faultFirst: true},
	{n: 2, name: "RabbitMQ node stopped and started", runs: 5000, flow: chaosflow.Pipeline, workers: 2, workMillis: 2, fault: restartRabbitMQ},
	{n: 3, name: "PostgreSQL restarted (journal, idempotency, outbox)", runs: 5000, flow: chaosflow.Pipeline, workers: 2, workMillis: 2,
		outbox: true, fault: restartPostgreSQL},
	{n: 4, name: "worker SIGKILLed with steps in flight", runs: 5000, short: 2000, flow: chaosflow.Pipeline, workers: 2, workMillis: 20, fault: killWorker},
	{n: 5, name: "worker drained with SIGTERM under load", runs: 5000, flow: chaosflow.Pipeline, workers: 2, workMillis: 20, fault: drainWorker},
	{n: 6, name: "worker killed while compensating", runs: 1000, flow: chaosflow.Saga, workers: 2, workMillis: 150, fault: killCompensating},
	{n: 7, name: "forks: every connection closed every 2 s", runs: 20, short: 5, flow: chaosflow.Forks, workers: 3, fault: closeConnections, faultFirst: true},
	{n: 8, name: "forks: workers SIGKILLed with items in flight", runs: 20, flow: chaosflow.Forks, workers: 2, workMillis: 5, fault: killForking},
	{n: 9, name: "waits and limits: workers SIGKILLed, connections closed", runs: 2000, short: 500, flow: chaosflow.Waits, workers: 3, workMillis: 250,
		startRate: 40, fault: killAndClose},
	{n: 10, name: "rolling deploy (b renamed, a step inserted), connections closed every 2 s", runs: 5000, short: 500, flow: chaosflow.Deploy,
		workers: 3, workSeconds: 20, fault: rollingDeploy, faultFirst: true},
}

// Outages of scenarios 2 and 3: long enough for every worker to notice,
// short enough that no retry policy runs out.
const (
	rabbitDown   = 5 * time.Second
	postgresDown = 3 * time.Second
)

// closeConnections has the node close every client connection every 2 s
// until the scenario ends.
func closeConnections(ctx context.Context, s *session) (func(context.Context), error) {
	if _, err := s.ctl(ctx, "close-loop-start"); err != nil {
		return nil, err
	}
	s.note("the node closed every connection every 2 s from before the first start to the last completion")
	return func(ctx context.Context) {
		if _, err := s.ctl(ctx, "close-loop-stop"); err != nil {
			s.fail("stopping the connection closer: %v", err)
		}
	}, nil
}

// restartRabbitMQ stops the node once 30% of the runs completed and starts
// it again rabbitDown later.
func restartRabbitMQ(ctx context.Context, s *session) (func(context.Context), error) {
	if err := s.waitFraction(ctx, 0.3); err != nil {
		return nil, err
	}
	at := s.completedPercent(ctx)
	// The node's counters start again from zero.
	if err := s.checkpointRedelivered(ctx); err != nil {
		return nil, err
	}
	began := time.Now()
	if _, err := s.ctl(ctx, "rabbit-stop"); err != nil {
		return nil, err
	}
	if err := sleep(ctx, rabbitDown); err != nil {
		return nil, err
	}
	if _, err := s.ctl(ctx, "rabbit-start"); err != nil {
		return nil, err
	}
	s.note("RabbitMQ stopped at %d%% completed, back %s later", at, time.Since(began).Round(100*time.Millisecond))
	return nil, nil
}

// restartPostgreSQL stops PostgreSQL abruptly (pg_ctl -m immediate: a
// crash, recovered from its WAL) once 30% of the runs completed, and
// starts it again postgresDown later.
func restartPostgreSQL(ctx context.Context, s *session) (func(context.Context), error) {
	if err := s.waitFraction(ctx, 0.3); err != nil {
		return nil, err
	}
	at := s.completedPercent(ctx)
	began := time.Now()
	if _, err := s.ctl(ctx, "pg-stop", "immediate"); err != nil {
		return nil, err
	}
	if err := sleep(ctx, postgresDown); err != nil {
		return nil, err
	}
	if _, err := s.ctl(ctx, "pg-start"); err != nil {
		return nil, err
	}
	s.note("PostgreSQL crashed (immediate stop) at %d%% completed, back %s later", at, time.Since(began).Round(100*time.Millisecond))
	return nil, nil
}

// killWorker SIGKILLs the oldest worker once 30% of the runs completed,
// starts another, and deals with the claims the dead one held.
func killWorker(ctx context.Context, s *session) (func(context.Context), error) {
	if err := s.waitFraction(ctx, 0.3); err != nil {
		return nil, err
	}
	return nil, s.killHolding(ctx, "step", func(key string) bool { return !isCompensation(key) })
}

// drainWorker sends SIGTERM to the oldest worker once 30% of the runs
// completed, checks that it drained within its close timeout and left no
// step claimed, and starts another.
func drainWorker(ctx context.Context, s *session) (func(context.Context), error) {
	if err := s.waitFraction(ctx, 0.3); err != nil {
		return nil, err
	}
	w := s.fleet.oldest()
	if w == nil {
		return nil, fmt.Errorf("no worker left to drain")
	}
	at := s.completedPercent(ctx)
	took, code, err := s.fleet.term(w, workerCloseTimeout+10*time.Second)
	if err != nil {
		return nil, err
	}
	s.note("%s got SIGTERM at %d%% completed and exited %d after %s (close timeout %s)",
		w.name, at, code, took.Round(10*time.Millisecond), workerCloseTimeout)
	if code != 0 {
		s.fail("%s exited with status %d after SIGTERM (log: %s)", w.name, code, w.logPath)
	}
	if took > workerCloseTimeout+2*time.Second {
		s.fail("%s took %s to drain, past its close timeout of %s", w.name, took.Round(10*time.Millisecond), workerCloseTimeout)
	}
	since, err := s.dbNow(ctx)
	if err != nil {
		return nil, err
	}
	if _, err := s.fleet.start(ctx); err != nil {
		return nil, err
	}
	if _, err := s.settleDeadClaims(ctx, since); err != nil {
		return nil, err
	}
	keys, err := s.inFlight(ctx, chaosflow.WorkerNameOf(w.cmd.Process.Pid))
	if err != nil {
		return nil, err
	}
	if len(keys) > 0 {
		s.fail("the drained worker left %d steps claimed (they wait out the claim's lease): %s", len(keys), sample(keys))
	}
	return nil, nil
}

// killCompensating SIGKILLs the oldest worker twice while compensations
// run (at 25% and at 60% of the runs compensated), starting another after
// each.
func killCompensating(ctx context.Context, s *session) (func(context.Context), error) {
	for _, frac := range []float64{0.25, 0.6} {
		if err := s.waitFraction(ctx, frac); err != nil {
			return nil, err
		}
		if err := s.killHolding(ctx, "compensation", isCompensation); err != nil {
			return nil, err
		}
	}
	return nil, nil
}

// killForking SIGKILLs the oldest worker twice while the runs' items are
// worked (at 30% and at 70% of their effects applied: a run of a thousand
// items completes only near the end), starting another after each.
func killForking(ctx context.Context, s *session) (func(context.Context), error) {
	for _, frac := range []float64{0.3, 0.7} {
		if err := s.waitEffects(ctx, frac); err != nil {
			return nil, err
		}
		if err := s.killHolding(ctx, "step", func(key string) bool { return !isCompensation(key) }); err != nil {
			return nil, err
		}
	}
	return nil, nil
}

// killTries is how many workers killHolding kills, at most, to find one
// that held what the scenario is about.
const killTries = 3

// killHolding kills workers (killAndReplace) until one of them was inside
// what (a step, a compensation: its key says): the scenario's
// premise is a kill with that in flight, and a worker can be between two
// of them at the instant it dies. It fails the scenario if none of
// killTries did.
func (s *session) killHolding(ctx context.Context, what string, is func(key string) bool) error {
	for range killTries {
		keys, err := s.killAndReplace(ctx)
		if err != nil {
			return err
		}
		if slices.ContainsFunc(keys, is) {
			return nil
		}
		s.note("the killed worker held no %s: killing another", what)
	}
	s.fail("none of %d killed workers held a %s: the scenario proved nothing", killTries, what)
	return nil
}

// isCompensation says whether an idempotency key is a compensation's.
func isCompensation(key string) bool { return strings.Contains(key, "/compensate/") }

// killAndReplace SIGKILLs the oldest worker, starts another, expires the
// claims the dead one made apart from its transactions (see
// settleDeadClaims), and returns what it was inside (see inFlight).
func (s *session) killAndReplace(ctx context.Context) ([]string, error) {
	w := s.fleet.oldest()
	if w == nil {
		return nil, fmt.Errorf("no worker left to kill")
	}
	at := fmt.Sprintf("%d%% %s", s.completedPercent(ctx), s.final)
	if s.sc.flow == chaosflow.Forks {
		at = fmt.Sprintf("%d%% of the effects applied", s.effectsPercent(ctx))
	}
	if err := s.markKilled(ctx, w); err != nil {
		return nil, err
	}
	s.fleet.kill(w)
	since, err := s.dbNow(ctx)
	if err != nil {
		return nil, err
	}
	nw, err := s.fleet.start(ctx)
	if err != nil {
		return nil, err
	}
	if _, err := s.settleDeadClaims(ctx, since); err != nil {
		return nil, err
	}
	keys, err := s.inFlight(ctx, chaosflow.WorkerNameOf(w.cmd.Process.Pid))
	if err != nil {
		return nil, err
	}
	comps, exports := 0, 0
	for _, k := range keys {
		switch {
		case isCompensation(k):
			comps++
		case isExport(k):
			exports++
		}
	}
	how := "their claims gone with their transactions; claims made apart expired by the driver, as their lease would have done"
	if !s.cfg.expireDeadClaims {
		how = "their claims gone with their transactions; claims made apart left to their 5-minute lease"
	}
	held := ""
	if s.sc.flow == chaosflow.Waits {
		held = fmt.Sprintf(" (%d of them in %s)", exports, chaosflow.WaitsLast)
	}
	s.note("%s SIGKILLed at %s (%s) holding %d steps%s and %d compensations (%s); %s started",
		w.name, stamp(s.fleet.killedAt(w.name)), at, len(keys)-comps, held, comps, how, nw.name)
	return keys, nil
}

// sleep waits d, or until ctx ends.
func sleep(ctx context.Context, d time.Duration) error {
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-t.C:
		return nil
	case <-ctx.Done():
		return ctx.Err()
	}
}

// sample is a few of keys, for a message.
func sample(keys []string) string {
	const most = 5
	if len(keys) <= most {
		return strings.Join(keys, ", ")
	}
	return strings.Join(keys[:most], ", ") + fmt.Sprintf(" and %d more", len(keys)-most)
}
