package main

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"log/slog"
	"maps"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/acemq/acemq-flow/engine"
	"github.com/acemq/acemq-flow/engine/journal"
	"github.com/acemq/acemq-flow/internal/chaos/chaosflow"
	"github.com/acemq/acemq-flow/persistence"
)

// What the driver does for the rolling deploy (scenario 10,
// chaosflow.Deploy): it starts every run on the flow's first version,
// asks the second version's `flows check` what a deploy would do (and the
// second version without its dsl.Renamed, which must refuse), replaces
// the workers one at a time with workers of the second version, starts a
// tenth more runs on the second version, and once every run ended holds
// what happened against what the check said.

// deployState is what the deploy saw, for accountDeploy.
type deployState struct {
	// newRoute holds the runs started on the second version, after the
	// deploy (under session.mu); expectedV2 are the effects each of them
	// applies once (b2's as b's: session.alias), expectedV2Set the same.
	newRoute      map[string]bool
	expectedV2    []string
	expectedV2Set map[string]bool
	// check is the second version's `flows check` before the deploy,
	// control the same without its Renamed, after the second's after
	// every run ended and every worker stopped.
	check, control, after checkResult
	// atBBefore and atB are the runs the journal showed at b just before
	// and just after check.
	atBBefore, atB map[string]bool
	// inFlightAtStart and inFlightAtEnd are the journal's runs in flight
	// by step when the first worker was replaced and once the last
	// replacement worked.
	inFlightAtStart, inFlightAtEnd map[string]int
	began, ended                   time.Time
}

// checkResult is one `flows check -o json` of the chaos flow binary.
type checkResult struct {
	version string
	// code is its exit status; check its report of the deploy flow.
	code  int
	check engine.FlowCheck
	took  time.Duration
	tries int
}

// stray is what the check found at step ("": nothing).
func (c checkResult) stray(step string) (engine.StrayStep, bool) {
	for _, st := range c.check.Strays {
		if st.Step == step {
			return st, true
		}
	}
	return engine.StrayStep{}, false
}

// newRouteShare: the deploy starts runs/newRouteShare runs on the second
// version once it is over.
const newRouteShare = 10

// checkTries is how often the driver runs a `flows check` whose report it
// did not get (the node closed the check's connection under it).
const checkTries = 5

// versionEnv is the environment that makes the chaos flow binary serve
// the deploy flow at version.
func versionEnv(version string) []string { return []string{"CHAOS_FLOW_VERSION=" + version} }

// registerDeploy registers the deploy flow's first version with the
// driver's engine, and its second with an engine of its own (engV2), on
// the same connection and journal.
func (s *session) registerDeploy() error {
	v1, err := chaosflow.DeployFlow(s.prefix, nil, chaosflow.DeployV1)
	if err != nil {
		return err
	}
	if err := s.eng.Register(v1); err != nil {
		return fmt.Errorf("register the deploy flow's version 1: %w", err)
	}
	v2, err := chaosflow.DeployFlow(s.prefix, nil, chaosflow.DeployV2)
	if err != nil {
		return err
	}
	if s.engV2, err = engine.New(engine.Config{Conn: s.conn, Journal: s.jr, Logger: s.log}); err != nil {
		return fmt.Errorf("the driver's engine of version 2: %w", err)
	}
	if err := s.engV2.Register(v2); err != nil {
		return fmt.Errorf("register the deploy flow's version 2: %w", err)
	}
	d := s.deploy
	d.expectedV2Set = map[string]bool{}
	for _, st := range chaosflow.DeployStepsV2 {
		if a, ok := s.alias[st]; ok {
			st = a
		}
		d.expectedV2 = append(d.expectedV2, st)
		d.expectedV2Set[st] = true
	}
	return nil
}

// rollingDeploy is scenario 10's fault: the node closes every connection
// every 2 s from before the first start to the last completion; once
// every run is started, the second version's check, then each worker of
// the first version drained (SIGTERM) and one of the second started in
// its place, one at a time, then the runs of the second version.
func rollingDeploy(ctx context.Context, s *session) (func(context.Context), error) {
	end, err := closeConnections(ctx, s)
	if err != nil {
		return nil, err
	}
	s.faultInPlace()
	d := s.deploy
	for s.sentCount() < s.runs {
		if err := sleep(ctx, 100*time.Millisecond); err != nil {
			return end, err
		}
	}
	// The starts outrun a (which does not work): the check is to find the
	// runs past it, at b.
	if err := s.waitPast(ctx, "a", passTimeout); err != nil {
		return end, err
	}
	at := s.completedPercent(ctx)
	if d.atBBefore, err = s.runsAt(ctx, chaosflow.DeployRenamedFrom); err != nil {
		return end, err
	}
	if d.check, err = s.flowsCheck(ctx, chaosflow.DeployV2); err != nil {
		return end, err
	}
	if d.atB, err = s.runsAt(ctx, chaosflow.DeployRenamedFrom); err != nil {
		return end, err
	}
	if d.control, err = s.flowsCheck(ctx, chaosflow.DeployV2Unrenamed); err != nil {
		return end, err
	}
	s.note("before the deploy (every run started, %d%% completed): %s; the journal showed %d runs at %s just before it and %d just after",
		at, d.check.describe(), len(d.atBBefore), chaosflow.DeployRenamedFrom, len(d.atB))
	s.note("the same check of version 2 without dsl.Renamed (the control): %s", d.control.describe())
	if d.check.code != 0 {
		s.fail("flows check of version 2 exited %d before the deploy: its workers would refuse to start; the deploy was not made", d.check.code)
		return end, nil
	}
	if err := s.replaceWorkers(ctx); err != nil {
		return end, err
	}
	extra := max(s.runs/newRouteShare, 1)
	s.startRange(ctx, s.runs, s.runs+extra)
	s.note("%d runs started on version 2 once every worker ran it", extra)
	return end, nil
}

// replaceWorkers drains each worker of the first version in turn, which
// must exit 0 within its close timeout, and starts one of the second in
// its place, waiting until it works before the next.
func (s *session) replaceWorkers(ctx context.Context) error {
	d := s.deploy
	var err error
	if d.inFlightAtStart, err = s.jr.InFlight(ctx, s.flow); err != nil {
		return fmt.Errorf("the runs in flight before the deploy: %w", err)
	}
	d.began = time.Now()
	var steps []string
	for {
		w := s.fleet.oldestWithout(versionEnv(chaosflow.DeployV2))
		if w == nil {
			break
		}
		took, code, err := s.fleet.term(w, workerCloseTimeout+10*time.Second)
		if err != nil {
			return err
		}
		if code != 0 {
			s.fail("%s (version 1) exited with status %d after SIGTERM (log: %s)", w.name, code, w.logPath)
		}
		began := time.Now()
		nw, err := s.fleet.startWith(ctx, versionEnv(chaosflow.DeployV2))
		if err != nil {
			return fmt.Errorf("start a worker of version 2 in place of %s: %w", w.name, err)
		}
		steps = append(steps, fmt.Sprintf("%s drained in %s, %s (version 2) working %s later",
			w.name, took.Round(10*time.Millisecond), nw.name, time.Since(began).Round(10*time.Millisecond)))
	}
	d.ended = time.Now()
	if d.inFlightAtEnd, err = s.jr.InFlight(ctx, s.flow); err != nil {
		return fmt.Errorf("the runs in flight after the deploy: %w", err)
	}
	s.note("the deploy took %s: %s; runs in flight by step before it %s, after it %s",
		d.ended.Sub(d.began).Round(100*time.Millisecond), strings.Join(steps, "; "), byStep(d.inFlightAtStart), byStep(d.inFlightAtEnd))
	return nil
}

// oldestWithout is the longest-running live worker whose environment
// lacks env, nil if none.
func (f *fleet) oldestWithout(env []string) *worker {
	f.mu.Lock()
	defer f.mu.Unlock()
	for _, w := range f.workers {
		if !closed(w.done) && !w.asked.Load() && !slices.Equal(w.env, env) {
			return w
		}
	}
	return nil
}

// startRange starts the runs from to to (see startOne),
// startConcurrency at a time.
func (s *session) startRange(ctx context.Context, from, to int) {
	runs := make(chan int)
	var wg sync.WaitGroup
	for range startConcurrency {
		wg.Go(func() {
			for i := range runs {
				s.startOne(ctx, i)
			}
		})
	}
feed:
	for i := from; i < to; i++ {
		select {
		case runs <- i:
		case <-ctx.Done():
			break feed
		}
	}
	close(runs)
	wg.Wait()
}

// passTimeout bounds waitPast.
const passTimeout = time.Minute

// waitPast waits until the journal shows no run of the flow at step, or
// for limit (then it notes so and goes on).
func (s *session) waitPast(ctx context.Context, step string, limit time.Duration) error {
	deadline := time.Now().Add(limit)
	for {
		inFlight, err := s.jr.InFlight(ctx, s.flow)
		if err == nil && inFlight[step] == 0 {
			return nil
		}
		if time.Now().After(deadline) {
			s.note("the journal still showed runs at %s %s after the last start: the check went ahead", step, limit)
			return nil
		}
		if err := sleep(ctx, 100*time.Millisecond); err != nil {
			return err
		}
	}
}

// runsAt are the runs of the flow the journal shows running or waiting
// at step.
func (s *session) runsAt(ctx context.Context, step string) (map[string]bool, error) {
	rows, err := s.pool.Query(ctx, `SELECT run_id FROM `+persistence.DefaultRunsTable+`
		WHERE flow = $1 AND step = $2 AND status IN ('running', 'waiting')`, s.flow, step)
	if err != nil {
		return nil, fmt.Errorf("the runs at %s: %w", step, err)
	}
	ids, err := pgx.CollectRows(rows, pgx.RowTo[string])
	if err != nil {
		return nil, fmt.Errorf("the runs at %s: %w", step, err)
	}
	out := make(map[string]bool, len(ids))
	for _, id := range ids {
		out[id] = true
	}
	return out, nil
}

// flowsCheck runs the chaos flow binary's `flows check <flow> -o json` at
// version, with the workers' environment, and returns its report; it
// runs it again, up to checkTries times, when it printed none. Its output
// goes to the logs.
func (s *session) flowsCheck(ctx context.Context, version string) (checkResult, error) {
	var last error
	for try := 1; try <= checkTries; try++ {
		began := time.Now()
		cmd := exec.CommandContext(ctx, s.cfg.bin, "flows", "check", s.flow, "-o", "json")
		cmd.Env = append(slices.Clone(s.fleet.env), versionEnv(version)...)
		var stdout, stderr bytes.Buffer
		cmd.Stdout, cmd.Stderr = &stdout, &stderr
		runErr := cmd.Run()
		took := time.Since(began)
		code := -1
		if cmd.ProcessState != nil {
			code = cmd.ProcessState.ExitCode()
		}
		log := filepath.Join(s.cfg.logs, fmt.Sprintf("%s-check-v%s-%s-try%d.log", s.prefix, version, began.Format("150405.000"), try))
		if err := os.WriteFile(log, append(stdout.Bytes(), stderr.Bytes()...), 0o644); err != nil {
			return checkResult{}, fmt.Errorf("flows check log: %w", err)
		}
		var checks []engine.FlowCheck
		jerr := json.Unmarshal(stdout.Bytes(), &checks)
		if jerr == nil && len(checks) == 1 {
			return checkResult{version: version, code: code, check: checks[0], took: took, tries: try}, nil
		}
		last = fmt.Errorf("try %d: exit %d (%v), report %v: %s", try, code, runErr, jerr, strings.TrimSpace(stderr.String()))
		s.log.Warn("flows check printed no report; running it again", slog.String("version", version), slog.Any("error", last))
		if err := sleep(ctx, time.Second); err != nil {
			return checkResult{}, err
		}
	}
	return checkResult{}, fmt.Errorf("flows check of version %s: no report in %d tries: %w", version, checkTries, last)
}

// describe is what the check said, for a note.
func (c checkResult) describe() string {
	var strays []string
	for _, st := range c.check.Strays {
		strays = append(strays, fmt.Sprintf("at %s %d runs, %d messages in %s, %q", st.Step, st.Runs, st.Messages, st.Queue, st.Fate))
	}
	return fmt.Sprintf("flows check of version %s (%s, try %d): version %s after %s, added %s, removed %s; %s; exit %d",
		c.version, c.took.Round(10*time.Millisecond), c.tries, c.check.Version, orNone([]string{c.check.Before}),
		orNone(c.check.Added), orNone(c.check.Removed), orNone(strays), c.code)
}

// byStep is a count by step, for a note.
func byStep(n map[string]int) string {
	steps := make([]string, 0, len(n))
	for st := range n {
		steps = append(steps, st)
	}
	slices.Sort(steps)
	parts := make([]string, len(steps))
	for i, st := range steps {
		parts[i] = fmt.Sprintf("%s %d", st, n[st])
	}
	return "(" + orNone(parts) + ")"
}

// accountDeploy holds, once every run ended and every worker stopped,
// what happened against what the check said before the deploy: the
// versions and the steps added and removed, that nothing was stranded
// (the same check after the runs finds nothing at b), that every run the
// journal showed at b at the check completed with b's effect once (as b,
// by a worker of the first version, or as b2, by one of the second), and
// that the runs took the route they started on.
func (s *session) accountDeploy(ctx context.Context) {
	d := s.deploy
	if d.check.version == "" {
		s.fail("the deploy never ran its check: nothing to hold the outcome against")
		return
	}
	s.holdVersions(ctx, d)
	var err error
	if d.after, err = s.flowsCheck(ctx, chaosflow.DeployV2); err != nil {
		s.fail("flows check after the runs: %v", err)
	} else {
		s.note("after the runs, every worker stopped: %s", d.after.describe())
		b, ok := d.after.stray(chaosflow.DeployRenamedFrom)
		if d.after.code != 0 || !ok || b.Holds() || b.DeadLettered > 0 {
			s.fail("flows check after the runs: something is left at %s (exit %d): %s", chaosflow.DeployRenamedFrom, d.after.code, d.after.describe())
		}
	}
	inFlight, err := s.jr.InFlight(ctx, s.flow)
	if err != nil {
		s.fail("the runs in flight after the runs: %v", err)
	} else if len(inFlight) > 0 {
		s.fail("the journal shows runs in flight after every run ended: %s", byStep(inFlight))
	}
	if err := s.holdAtB(ctx, d); err != nil {
		s.fail("the runs at %s at the check: %v", chaosflow.DeployRenamedFrom, err)
	}
	if err := s.holdRoutes(ctx, d); err != nil {
		s.fail("the runs' routes: %v", err)
	}
}

// holdVersions checks the check's versions and steps against those the
// journal recorded for the workers, and the check's verdicts: nothing
// stranded, what was at b goes on at b2; the control's b stranded.
func (s *session) holdVersions(ctx context.Context, d *deployState) {
	versions, err := s.jr.Versions(ctx, s.flow)
	if err != nil {
		s.fail("the flow's versions: %v", err)
		return
	}
	var v1, v2 string
	var seen []string
	for _, v := range versions {
		seen = append(seen, fmt.Sprintf("%s (%s)", v.Version, strings.Join(v.Steps, ", ")))
		switch {
		case slices.Equal(v.Steps, chaosflow.DeploySteps):
			v1 = v.Version
		case slices.Equal(v.Steps, chaosflow.DeployStepsV2):
			v2 = v.Version
		}
	}
	s.note("the journal recorded the versions %s", strings.Join(seen, ", "))
	c := d.check.check
	switch {
	case len(versions) != 2 || v1 == "" || v2 == "":
		s.fail("the journal recorded %d versions of the flow (%s), want version 1 and version 2", len(versions), strings.Join(seen, ", "))
	case c.Before != v1 || c.Version != v2:
		s.fail("the check compared version %s with %s; the workers ran %s, then %s", c.Version, c.Before, v1, v2)
	}
	if !sameSet(c.Added, []string{chaosflow.DeployInserted, chaosflow.DeployRenamedTo}) || !sameSet(c.Removed, []string{chaosflow.DeployRenamedFrom}) {
		s.fail("the check found added %v and removed %v, want added [%s %s] and removed [%s]", c.Added, c.Removed,
			chaosflow.DeployInserted, chaosflow.DeployRenamedTo, chaosflow.DeployRenamedFrom)
	}
	if len(c.Strays) != 1 {
		s.fail("the check found %d steps version 2 does not have, want 1 (%s): %s", len(c.Strays), chaosflow.DeployRenamedFrom, d.check.describe())
	}
	if b, ok := d.check.stray(chaosflow.DeployRenamedFrom); !ok || b.Fate != "goes on at "+chaosflow.DeployRenamedTo || c.Strands() || d.check.code != 0 {
		s.fail("the check did not say that what is at %s goes on at %s and nothing is stranded: %s", chaosflow.DeployRenamedFrom,
			chaosflow.DeployRenamedTo, d.check.describe())
	} else if b.Runs == 0 && b.Messages == 0 {
		s.fail("the check found nothing at %s: the deploy came too late to prove anything", chaosflow.DeployRenamedFrom)
	}
	if b, ok := d.control.stray(chaosflow.DeployRenamedFrom); !ok || b.Fate != engine.FateStranded || d.control.code != 1 {
		s.fail("the check without dsl.Renamed did not find %s stranded and exit 1: %s", chaosflow.DeployRenamedFrom, d.control.describe())
	}
}

// holdAtB checks that every run the journal showed at b at the check
// completed with b's effect once (as b or as b2) and no effect of the
// inserted step, and notes how many went through each name.
func (s *session) holdAtB(ctx context.Context, d *deployState) error {
	ids := make([]string, 0, len(d.atB))
	for id := range d.atB {
		ids = append(ids, id)
	}
	status := map[string]string{}
	rows, err := s.pool.Query(ctx, `SELECT run_id, status FROM `+persistence.DefaultRunsTable+` WHERE run_id = ANY($1)`, ids)
	if err != nil {
		return err
	}
	var id, st string
	if _, err := pgx.ForEachRow(rows, []any{&id, &st}, func() error { status[id] = st; return nil }); err != nil {
		return err
	}
	applied := map[string]map[string]int{}
	rows, err = s.pool.Query(ctx, `SELECT run_id, step, count(*) FROM `+chaosflow.EffectsTable+`
		WHERE run_id = ANY($1) AND step = ANY($2) GROUP BY run_id, step`, ids,
		[]string{chaosflow.DeployRenamedFrom, chaosflow.DeployRenamedTo, chaosflow.DeployInserted})
	if err != nil {
		return err
	}
	var n int
	if _, err := pgx.ForEachRow(rows, []any{&id, &st, &n}, func() error {
		if applied[id] == nil {
			applied[id] = map[string]int{}
		}
		applied[id][st] = n
		return nil
	}); err != nil {
		return err
	}
	var asB, asB2, notCompleted, notOnce, inserted []string
	for _, id := range ids {
		a := applied[id]
		if status[id] != string(journal.Completed) {
			notCompleted = append(notCompleted, fmt.Sprintf("%s (%s)", id, orNone([]string{status[id]})))
		}
		switch {
		case a[chaosflow.DeployRenamedFrom]+a[chaosflow.DeployRenamedTo] != 1:
			notOnce = append(notOnce, fmt.Sprintf("%s (%s %d, %s %d)", id, chaosflow.DeployRenamedFrom, a[chaosflow.DeployRenamedFrom],
				chaosflow.DeployRenamedTo, a[chaosflow.DeployRenamedTo]))
		case a[chaosflow.DeployRenamedTo] == 1:
			asB2 = append(asB2, id)
		default:
			asB = append(asB, id)
		}
		if a[chaosflow.DeployInserted] > 0 {
			inserted = append(inserted, id)
		}
	}
	s.note("of the %d runs the journal showed at %s at the check: %d completed, %d went through %s once (%d as %s, by a worker of version 1, %d as %s, by one of version 2), %d ran %s",
		len(ids), chaosflow.DeployRenamedFrom, len(ids)-len(notCompleted), len(asB)+len(asB2), chaosflow.DeployRenamedFrom, len(asB),
		chaosflow.DeployRenamedFrom, len(asB2), chaosflow.DeployRenamedTo, len(inserted), chaosflow.DeployInserted)
	slices.Sort(notCompleted)
	slices.Sort(notOnce)
	slices.Sort(inserted)
	if len(notCompleted) > 0 {
		s.fail("%d runs at %s at the check did not complete: %s", len(notCompleted), chaosflow.DeployRenamedFrom, sample(notCompleted))
	}
	if len(notOnce) > 0 {
		s.fail("%d runs at %s at the check went through it other than once: %s", len(notOnce), chaosflow.DeployRenamedFrom, sample(notOnce))
	}
	if len(inserted) > 0 {
		s.fail("%d runs at %s at the check ran %s, which their route does not have: %s", len(inserted), chaosflow.DeployRenamedFrom,
			chaosflow.DeployInserted, sample(inserted))
	}
	if len(asB2) == 0 {
		s.fail("no run at %s at the check went on at %s: the deploy proved nothing", chaosflow.DeployRenamedFrom, chaosflow.DeployRenamedTo)
	}
	return nil
}

// holdRoutes checks that each run took the route of the version it
// started on, as the journal records it: the first version's runs a, b
// (under either name), c and never the inserted step (session.account
// fails a run with an effect its route lacks), the second's a, the
// inserted step, b2 and c; and notes how many of the first's went through
// b2.
func (s *session) holdRoutes(ctx context.Context, d *deployState) error {
	runs, err := s.jr.Runs(ctx, journal.Query{Flow: s.flow, Limit: 2*s.runs + 1000})
	if err != nil {
		return err
	}
	v1, v2 := s.eng.Flows(), s.engV2.Flows()
	version := func(infos []engine.FlowInfo) string {
		for _, fi := range infos {
			if fi.Name == s.flow {
				return fi.Version
			}
		}
		return ""
	}
	want := map[bool]string{false: version(v1), true: version(v2)}
	rows, err := s.pool.Query(ctx, `SELECT DISTINCT run_id, step FROM `+chaosflow.EffectsTable+` WHERE step = ANY($1)`,
		[]string{chaosflow.DeployRenamedTo, chaosflow.DeployInserted})
	if err != nil {
		return err
	}
	var viaB2, viaInserted []string
	var id, step string
	if _, err := pgx.ForEachRow(rows, []any{&id, &step}, func() error {
		if step == chaosflow.DeployInserted {
			viaInserted = append(viaInserted, id)
		} else {
			viaB2 = append(viaB2, id)
		}
		return nil
	}); err != nil {
		return err
	}
	s.mu.Lock()
	newRoute := maps.Clone(d.newRoute)
	s.mu.Unlock()
	var wrong []string
	oldRuns, newRuns := 0, 0
	for _, run := range runs {
		isNew := newRoute[run.ID]
		if isNew {
			newRuns++
		} else {
			oldRuns++
		}
		if run.Version != want[isNew] {
			wrong = append(wrong, fmt.Sprintf("%s (version %s, want %s)", run.ID, run.Version, want[isNew]))
		}
	}
	count := func(ids []string) (old, new int) {
		for _, id := range ids {
			if newRoute[id] {
				new++
			} else {
				old++
			}
		}
		return old, new
	}
	oldViaB2, newViaB2 := count(viaB2)
	oldViaInserted, newViaInserted := count(viaInserted)
	s.note("%d runs started on version 1 (%s): %d went through %s by workers of version 1, %d through %s by workers of version 2, %d through %s; %d started on version 2 (%s): %d through %s, %d through %s",
		oldRuns, want[false], oldRuns-oldViaB2, chaosflow.DeployRenamedFrom, oldViaB2, chaosflow.DeployRenamedTo, oldViaInserted, chaosflow.DeployInserted,
		newRuns, want[true], newViaInserted, chaosflow.DeployInserted, newViaB2, chaosflow.DeployRenamedTo)
	if len(wrong) > 0 {
		slices.Sort(wrong)
		return fmt.Errorf("%d runs recorded on a version other than their start's: %s", len(wrong), sample(wrong))
	}
	if oldViaInserted > 0 {
		return fmt.Errorf("%d runs started on version 1 went through %s, which their route does not have", oldViaInserted, chaosflow.DeployInserted)
	}
	if newViaB2 != newRuns || newViaInserted != newRuns {
		return fmt.Errorf("of the %d runs started on version 2, %d went through %s and %d through %s", newRuns, newViaInserted,
			chaosflow.DeployInserted, newViaB2, chaosflow.DeployRenamedTo)
	}
	return nil
}

// sameSet says whether a and b hold the same strings, in any order.
func sameSet(a, b []string) bool {
	a, b = slices.Clone(a), slices.Clone(b)
	slices.Sort(a)
	slices.Sort(b)
	return slices.Equal(a, b)
}
