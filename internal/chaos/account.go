package main

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"time"

	amqp "github.com/rabbitmq/amqp091-go"

	"github.com/acemq/acemq-flow/broker"
	"github.com/acemq/acemq-flow/engine/journal"
	"github.com/acemq/acemq-flow/internal/chaos/chaosflow"
)

// effect is one application of a step's effect.
type effect struct {
	worker string
	at     time.Time
	// as is the step's name it was applied under, when the flow renamed
	// the step (see session.alias) and it is not the effect's.
	as string
}

// fate is what became of one run, as the journal, the effects table and
// the queues tell it.
type fate struct {
	id string
	// sent says the driver's start of it succeeded.
	sent    bool
	run     *journal.Run
	effects map[string][]effect
	// queues are where its messages wait (an outbox counts as one).
	queues []string
}

// What can be wrong with a run, in the order the evidence is shown.
const (
	problemLost        = "lost: its last effect never happened and no queue holds it"
	problemDouble      = "double effect: a step's effect applied more than once"
	problemJoinTwice   = "join fired twice: a join's effect applied more than once"
	problemUnfinished  = "unfinished: not ended, its message still in a queue"
	problemBehind      = "journal behind: its last effect was applied but the journal does not show it ended"
	problemAhead       = "journal ahead: the journal shows it ended but its last effect never happened"
	problemMissing     = "effect missing: it ended without one of its steps' effects"
	problemUnannounced = "started though its start reported a failure"
	problemStranded    = "stranded: once every worker stopped, the journal shows it running or waiting, or a message of it is still in a queue"
)

var problemOrder = []string{problemLost, problemStranded, problemJoinTwice, problemDouble, problemMissing, problemAhead, problemBehind, problemUnfinished, problemUnannounced}

// evidenceRuns is how many runs of each problem the evidence shows.
const evidenceRuns = 5

// account fills r's counts from the journal, the effects table and the
// queues (every worker stopped), and prints the evidence of every run
// that went wrong.
func (s *session) account(ctx context.Context, r *row, progress io.Writer) {
	fates := map[string]*fate{}
	get := func(id string) *fate {
		f, ok := fates[id]
		if !ok {
			f = &fate{id: id, effects: map[string][]effect{}}
			fates[id] = f
		}
		return f
	}
	s.mu.Lock()
	for id := range s.sent {
		get(id).sent = true
	}
	s.mu.Unlock()
	runs, err := s.jr.Runs(ctx, journal.Query{Flow: s.flow, Limit: 2*s.runs + 1000})
	if err != nil {
		s.fail("read the journal: %v", err)
		return
	}
	for i := range runs {
		get(runs[i].ID).run = &runs[i]
	}
	if err := s.readEffects(ctx, get); err != nil {
		s.fail("read the effects: %v", err)
		return
	}
	queued, err := s.scanQueues(ctx)
	if err != nil {
		s.fail("look for messages in the queues: %v", err)
		return
	}
	for id, qs := range queued {
		get(id).queues = append(get(id).queues, qs...)
	}
	if s.outbox != nil {
		recs, err := s.outbox.Records(ctx, 0)
		if err != nil {
			s.fail("read the outbox: %v", err)
			return
		}
		for _, rec := range recs {
			if id, ok := rec.Message.Headers[broker.HeaderRunID].(string); ok {
				get(id).queues = append(get(id).queues, "outbox")
			}
		}
	}

	problems := map[string][]*fate{}
	r.Deployed = s.deploy != nil
	leftovers := 0
	defer func() {
		if leftovers > 0 {
			s.note("%d ended runs have a copy of a message left on the ladder (a put-back of a redelivery): it comes back as a duplicate, which its step accepts", leftovers)
		}
	}()
	for _, f := range fates {
		if !f.sent && f.run == nil && len(f.effects) == 0 {
			continue
		}
		r.Sent++
		if !f.sent {
			problems[problemUnannounced] = append(problems[problemUnannounced], f)
		}
		expected, expectedSet := s.expectedOf(f.id)
		// A scenario of the other flows may leave messages of ended runs
		// behind (a wait's timeout on the ladder): only a deploy counts.
		// Nor does a copy of an ended run's message on the ladder (a
		// put-back of a redelivery its step's key was busy with): it comes
		// back as a duplicate, which the step accepts.
		ladderOnly := !slices.ContainsFunc(f.queues, func(q string) bool { return !strings.HasPrefix(q, s.ladder+".") })
		endedRun := f.run != nil && f.run.Status.Stopped()
		if r.Deployed && endedRun && ladderOnly && len(f.queues) > 0 {
			leftovers++
		}
		if r.Deployed && (f.run != nil && (f.run.Status == journal.Running || f.run.Status == journal.Waiting) || len(f.queues) > 0 && !(endedRun && ladderOnly)) {
			r.Stranded++
			problems[problemStranded] = append(problems[problemStranded], f)
		}
		done := len(f.effects[s.lastEffect]) > 0
		ended := f.run != nil && f.run.Status == s.final
		if ended {
			r.Completed++
		}
		double := false
		for step, applied := range f.effects {
			isJoin := strings.HasPrefix(step, chaosflow.JoinPrefix)
			if isJoin {
				r.Joins++
			}
			switch {
			case len(applied) > 1 && isJoin:
				r.JoinsTwice += len(applied) - 1
				problems[problemJoinTwice] = append(problems[problemJoinTwice], f)
			case len(applied) > 1:
				r.DoubleEffects += len(applied) - 1
				double = true
			}
			if !expectedSet[step] {
				s.fail("run %s applied an effect no step of it has: %q", f.id, step)
			}
		}
		if double {
			problems[problemDouble] = append(problems[problemDouble], f)
		}
		switch {
		case done && !ended:
			problems[problemBehind] = append(problems[problemBehind], f)
		case !done && ended:
			problems[problemAhead] = append(problems[problemAhead], f)
		case !done && !ended && len(f.queues) == 0:
			r.Lost++
			problems[problemLost] = append(problems[problemLost], f)
		case !done && !ended:
			problems[problemUnfinished] = append(problems[problemUnfinished], f)
		}
		if done {
			for _, step := range expected {
				if len(f.effects[step]) == 0 {
					problems[problemMissing] = append(problems[problemMissing], f)
					break
				}
			}
		}
	}
	s.evidence(ctx, problems, progress)
}

// readEffects adds every applied effect to its run's fate.
func (s *session) readEffects(ctx context.Context, get func(string) *fate) error {
	rows, err := s.pool.Query(ctx, `SELECT run_id, step, worker, at FROM `+chaosflow.EffectsTable+` ORDER BY at`)
	if err != nil {
		return err
	}
	defer rows.Close()
	for rows.Next() {
		var id, step, worker string
		var at time.Time
		if err := rows.Scan(&id, &step, &worker, &at); err != nil {
			return err
		}
		f := get(id)
		e := effect{worker: s.fleet.nameOf(worker), at: at}
		if name, ok := s.alias[step]; ok {
			e.as, step = step, name
		}
		f.effects[step] = append(f.effects[step], e)
	}
	return rows.Err()
}

// expectedOf are the effects run id is to apply once each, in order, and
// the same as a set: those of the route it started on.
func (s *session) expectedOf(id string) ([]string, map[string]bool) {
	if s.deploy == nil {
		return s.expected, s.expectedSet
	}
	s.mu.Lock()
	v2 := s.deploy.newRoute[id]
	s.mu.Unlock()
	if !v2 {
		return s.expected, s.expectedSet
	}
	return s.deploy.expectedV2, s.deploy.expectedV2Set
}

// maxScanned bounds how many messages of one queue the scan reads.
const maxScanned = 100_000

// scanQueues reads, without taking them, the run ids of every message in
// the scenario's queues: each step's, compensation's, dead-letter and
// parking queue, and the ladder's. Nothing consumes them any more; every
// message read goes back to its queue when the scan's channel closes.
func (s *session) scanQueues(ctx context.Context) (map[string][]string, error) {
	conn, err := amqp.Dial(firstNode(s.cfg.amqpURL))
	if err != nil {
		return nil, fmt.Errorf("connect: %w", err)
	}
	defer conn.Close()
	out := map[string][]string{}
	for _, q := range s.queues() {
		if ctx.Err() != nil {
			return nil, ctx.Err()
		}
		ch, err := conn.Channel()
		if err != nil {
			return nil, fmt.Errorf("channel: %w", err)
		}
		info, err := ch.QueueDeclarePassive(q, true, false, false, false, nil)
		var ae *amqp.Error
		switch {
		case errors.As(err, &ae) && ae.Code == amqp.NotFound:
			// Not declared: nothing ever waited there. The failed
			// declare closed the channel.
			continue
		case err != nil:
			return nil, fmt.Errorf("inspect %s: %w", q, err)
		}
		for range min(info.Messages, maxScanned) {
			d, ok, err := ch.Get(q, false)
			if err != nil {
				// A partial scan would count the runs it missed as lost.
				return nil, fmt.Errorf("read %s: %w", q, err)
			}
			if !ok {
				break
			}
			id, _ := d.Headers[broker.HeaderRunID].(string)
			out[id] = append(out[id], q)
		}
		ch.Close()
	}
	return out, nil
}

// queues are the scenario's queues, by name.
func (s *session) queues() []string {
	var out []string
	seen := map[string]bool{}
	withSide := func(q string) {
		if !seen[q] {
			seen[q] = true
			out = append(out, q, q+broker.DeadLetterSuffix, q+broker.ParkedSuffix)
		}
	}
	infos := s.eng.Flows()
	if s.engV2 != nil {
		for _, fi := range s.engV2.Flows() {
			if fi.Name == s.flow {
				// Its queues: those it shares with the first are
				// listed once.
				infos = append(infos, fi)
			}
		}
	}
	for _, fi := range infos {
		for _, st := range fi.Steps {
			withSide(st.Queue)
			if st.Compensation != "" {
				withSide(st.Compensation)
			}
		}
		withSide(fi.CompensateQueue)
	}
	for _, q := range broker.LadderTopology(s.ladder).Queues {
		out = append(out, q.Name)
	}
	return out
}

// evidence notes how many runs had each problem and writes, for a few of
// each, what every side says about them, to progress and to the
// scenario's evidence file in the logs.
func (s *session) evidence(ctx context.Context, problems map[string][]*fate, progress io.Writer) {
	if len(problems) == 0 {
		return
	}
	path := filepath.Join(s.cfg.logs, s.prefix+"-evidence.txt")
	file, err := os.Create(path)
	if err != nil {
		s.fail("evidence file: %v", err)
		return
	}
	defer file.Close()
	w := io.MultiWriter(progress, file)
	for _, p := range problemOrder {
		fs := problems[p]
		if len(fs) == 0 {
			continue
		}
		slices.SortFunc(fs, func(a, b *fate) int { return cmp.Compare(a.id, b.id) })
		s.note("%d runs %s (evidence in %s)", len(fs), p, path)
		switch p {
		case problemDouble, problemJoinTwice, problemLost, problemStranded:
			// They fail the row by their counts.
		case problemUnannounced:
			// A start whose confirm was lost: the run is one all the same.
		default:
			s.fail("%d runs %s", len(fs), strings.SplitN(p, ":", 2)[0])
		}
		fmt.Fprintf(w, "chaos: s%d: %d runs %s\n", s.sc.n, len(fs), p)
		if p == problemStranded {
			s.note("the stranded runs' messages by queue: %s", byQueue(fs))
		}
		for _, f := range fs[:min(len(fs), evidenceRuns)] {
			s.describe(ctx, w, f)
		}
	}
	fmt.Fprintf(w, "chaos: s%d: what the workers warned about (count, level, message, queue):\n", s.sc.n)
	for _, l := range s.fleet.warnings(logWarnings) {
		fmt.Fprintf(w, "  %s\n", l)
	}
}

// byQueue counts the messages of fs by the queue they are in, for a note.
func byQueue(fs []*fate) string {
	n := map[string]int{}
	for _, f := range fs {
		for _, q := range f.queues {
			n[q]++
		}
	}
	return byStep(n)
}

// logWarnings is how many kinds of warning the evidence lists.
const logWarnings = 15

// describe writes what the journal, the effects and the queues say about
// one run.
func (s *session) describe(ctx context.Context, w io.Writer, f *fate) {
	fmt.Fprintf(w, "  run %s\n", f.id)
	if f.run == nil {
		fmt.Fprintln(w, "    journal: no such run")
	} else {
		fmt.Fprintf(w, "    journal: %s at %s, started %s, updated %s", f.run.Status, f.run.Step, stamp(f.run.StartedAt), stamp(f.run.UpdatedAt))
		if f.run.Error != "" {
			fmt.Fprintf(w, ", error %q", f.run.Error)
		}
		if f.run.DeadLetter != "" {
			fmt.Fprintf(w, ", dead letter %s", f.run.DeadLetter)
		}
		fmt.Fprintln(w)
	}
	steps := make([]string, 0, len(f.effects))
	for step := range f.effects {
		steps = append(steps, step)
	}
	slices.SortFunc(steps, func(a, b string) int {
		return cmp.Compare(f.effects[a][0].at.UnixNano(), f.effects[b][0].at.UnixNano())
	})
	var applied []string
	for _, step := range steps {
		for _, e := range f.effects[step] {
			a := fmt.Sprintf("%s by %s at %s", step, e.worker, stamp(e.at))
			if e.as != "" {
				a = fmt.Sprintf("%s (as %s) by %s at %s", step, e.as, e.worker, stamp(e.at))
			}
			switch k := s.fleet.killedAt(e.worker); {
			case k.IsZero():
			case k.After(e.at) && k.Sub(e.at) < time.Second:
				a += fmt.Sprintf(" (%s SIGKILLed %s later)", e.worker, k.Sub(e.at).Round(time.Millisecond))
			case !k.After(e.at):
				// PostgreSQL ran what the worker had sent before it died.
				a += fmt.Sprintf(" (committed %s after %s was SIGKILLed)", e.at.Sub(k).Round(time.Millisecond), e.worker)
			}
			applied = append(applied, a)
		}
	}
	fmt.Fprintf(w, "    effects: %s\n", orNone(applied))
	fmt.Fprintf(w, "    queues: %s\n", orNone(f.queues))
	events, err := s.jr.Timeline(ctx, f.id)
	if err != nil {
		fmt.Fprintf(w, "    timeline: %v\n", err)
		return
	}
	fmt.Fprintln(w, "    timeline:")
	for _, e := range events {
		fmt.Fprintf(w, "      %s .. %s  %-12s %-12s #%d  %s", stamp(e.StartedAt), stamp(e.EndedAt), e.Kind, e.Step, e.Attempt, e.Outcome)
		if e.Error != "" {
			fmt.Fprintf(w, "  (%s)", e.Error)
		}
		fmt.Fprintln(w)
	}
}

func stamp(t time.Time) string { return t.Local().Format("15:04:05.000") }

func orNone(items []string) string {
	if len(items) == 0 {
		return "none"
	}
	return strings.Join(items, "; ")
}
