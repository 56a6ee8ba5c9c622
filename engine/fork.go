package engine

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"reflect"
	"slices"

	"github.com/acemq/acemq-flow/broker"
	"github.com/acemq/acemq-flow/dsl"
	"github.com/acemq/acemq-flow/engine/journal"
	"github.com/acemq/acemq-flow/patterns"
)

// A Parallel or a ForEach (a fork) is one place in its run's route, with a
// queue of its own, <flow>.<name>, that takes the run in and the branches
// back. Taking the run in opens the fork's join in the journal
// (journal.JoinStore) and sends the first branches, each on a route of its
// own: the branch's steps, then the fork's name, so that the last step's
// hop, whoever serves it, brings the branch back to the fork's queue (a
// worker that serves the fork too settles the branch where its last step
// ran, and sends only the arrival the join is due at: arriveHere). Each
// branch coming back is settled in the join once; the decision the join
// makes for it (hand out the next item, fire the join, compensate) is kept
// with it, so a redelivery makes the same one. The join fires under a key
// of its own through the one executor, so it runs once whatever is
// delivered twice.

// forkParent is what a join keeps to go on once its branches are back
// (journal.Join.Parent): the run's route and the fork's place on it, what
// the run had to compensate before the fork, and the payload that reached
// it.
type forkParent struct {
	Route []string `json:"route"`
	Pos   int      `json:"pos"`
	State runState `json:"state"`
	Input []byte   `json:"input"`
}

// forkOf says which fork step is on a branch of, if it is on one.
func (f *flow) forkOf(step string) (string, bool) {
	for _, s := range f.def.Steps() {
		if s.Fork == nil {
			continue
		}
		for _, b := range s.Fork.Branches {
			if slices.ContainsFunc(b, func(bs dsl.StepSpec) bool { return bs.Name == step }) {
				return s.Name, true
			}
		}
	}
	return "", false
}

// branchDeadLetters are the dead-letter queues of the steps on the
// branches of fork, but step's.
func (f *flow) branchDeadLetters(fork, step string) []string {
	var out []string
	for _, s := range f.def.Steps() {
		if s.Name != fork || s.Fork == nil {
			continue
		}
		for _, b := range s.Fork.Branches {
			for _, bs := range b {
				if bs.Name != step && !bs.External {
					out = append(out, f.queue(bs.Name)+broker.DeadLetterSuffix)
				}
			}
		}
	}
	return out
}

// joinKey is what a fork's join is kept under in the journal, for one run.
func joinKey(replays, pos int, name string) string {
	return fmt.Sprintf("%d/%d/%s", replays, pos, name)
}

// fork takes a run into the fork: it opens the join (once, under the
// fork's step key) and sends the first branches. A redelivery sends them
// again; their steps run once.
func (r *stepRunner) fork(ctx context.Context, a *stepAttempt) broker.Ack {
	d := &a.d
	fk := r.spec.Fork
	key := joinKey(d.replays, d.pos, r.spec.Name)
	var (
		items [][]byte
		st    journal.JoinStatus
	)
	total := len(fk.Branches)
	if fk.ForEach {
		var err error
		if items, err = fk.Items(ctx, decoder(d.m), r.f.codec.Encode); err != nil {
			return r.failed(ctx, a, err)
		}
		if len(items) == 0 {
			// Nothing to run: the join gets no outputs, now.
			a.join = func(ctx context.Context) (any, error) {
				return fk.Join(ctx, decoder(d.m), 0, func(int, any) error { return nil })
			}
			return r.runUnit(ctx, a, d.stepKey(r.spec.Name))
		}
		total = len(items)
	}
	limit := total
	if fk.ForEach {
		limit = min(fk.Concurrency, total)
	}
	parent, err := json.Marshal(forkParent{Route: d.wireRoute(), Pos: d.pos, State: d.state, Input: d.m.Body})
	if err != nil {
		return r.giveUp(ctx, a, d.state, nil, broker.Fatal(fmt.Errorf("keep what fork %q needs to go on: %w", r.spec.Name, err)))
	}
	st, _, err = r.e.joins.OpenJoin(ctx, journal.Join{RunID: d.m.RunID, Key: key, Total: total, Limit: limit, Parent: parent}, items)
	if err != nil {
		return broker.Retry(fmt.Errorf("open the join of fork %q: %w", r.spec.Name, err))
	}
	for b := range st.Limit {
		body := d.m.Body
		if fk.ForEach {
			body = items[b]
		}
		if err := r.sendBranch(ctx, d.m, branchRef{Join: key, Branch: b, At: d.pos}, body); err != nil {
			return broker.Retry(err)
		}
	}
	a.result, a.forked = resultForked, st
	return broker.Accept()
}

// sendBranch sends branch ref.Branch of the fork on its way with body as
// its payload: to the first step of its route whose When holds, held on
// the ladder when a delay comes before it. Its message id is the branch's,
// the same every time it is sent.
func (r *stepRunner) sendBranch(ctx context.Context, m *broker.Message, ref branchRef, body []byte) error {
	fk := r.spec.Fork
	steps := fk.Branches[0]
	if !fk.ForEach {
		steps = fk.Branches[ref.Branch]
	}
	route := make([]string, 0, len(steps)+1)
	for _, s := range steps {
		route = append(route, s.Name)
	}
	route = append(route, r.spec.Name)
	var payload any = json.RawMessage(body)
	if first := steps[0]; first.When != nil || first.DelayUntil != nil {
		v, err := r.f.decodeAs(first.In, body)
		if err != nil {
			return fmt.Errorf("branch %d of fork %q: %w", ref.Branch, r.spec.Name, err)
		}
		payload = v
	}
	plan, err := r.f.plan(route, -1, payload, r.e.now())
	if err != nil {
		return fmt.Errorf("branch %d of fork %q: %w", ref.Branch, r.spec.Name, err)
	}
	h, err := jsonHeader(ref)
	if err != nil {
		return err
	}
	headers := carried(m)
	delete(headers, HeaderBranch)
	headers[HeaderBranch] = h
	opts := []broker.PublishOption{
		broker.ToExchange(r.f.name), broker.To(route[plan.next]), broker.Mandatory(),
		broker.CausedBy(m), broker.RunID(m.RunID), broker.FirstSeen(m.FirstSeen),
		broker.MessageID(fmt.Sprintf("%s/branch/%s/%d", m.RunID, ref.Join, ref.Branch)),
		broker.Headers(headers), broker.WithCodec(encoded{r.f.codec.ContentType()}), broker.Route(route, plan.next),
	}
	if m.Type != "" {
		opts = append(opts, broker.Type(m.Type))
	}
	out, err := r.e.conn.Prepare(ctx, body, opts...)
	if err != nil {
		return fmt.Errorf("branch %d of fork %q: %w", ref.Branch, r.spec.Name, err)
	}
	if !plan.due.IsZero() {
		markDue(&out, plan.due)
	}
	k := keptOf(keptHop, plan, out)
	return r.e.carryOut(ctx, r.spec.Name, m.RunID, k)
}

// decodeAs decodes body, in the flow's codec, as a value of type t.
func (f *flow) decodeAs(t reflect.Type, body []byte) (any, error) {
	v := reflect.New(t)
	if err := f.codec.Decode(body, v.Interface()); err != nil {
		return nil, &broker.DecodeError{ContentType: f.codec.ContentType(), Err: err}
	}
	return v.Elem().Interface(), nil
}

// arrive settles a branch that came back to the fork's queue, with what
// its last step returned, and carries out what the join decided for it:
// the next item handed out, the join fired (the last branch back), or,
// once a branch was given up, what the arrived branches did compensated.
func (r *stepRunner) arrive(ctx context.Context, a *stepAttempt) broker.Ack {
	d := &a.d
	if d.hold != nil {
		return r.holdEnded(ctx, a)
	}
	ref := *d.branch
	dec, err := r.settleArrival(ctx, d)
	if err != nil {
		return broker.Retry(err)
	}
	a.result = resultArrived
	a.extra = []journal.Event{r.arrivalEvent(d, ref, dec)}
	switch {
	case !dec.Last:
		return broker.Accept()
	case dec.Failed:
		if err := r.e.compensateJoin(ctx, r.f, d.m, ref, ""); err != nil {
			return broker.Retry(err)
		}
		return broker.Accept()
	}
	return r.fireJoin(ctx, a, ref)
}

// settleArrival settles d's branch at r's fork with what its last step
// returned (d's payload, and d's run state for the compensations), and
// hands out the next item of a ForEach when the join says so. Both are
// safe to do again: a branch settled before gets the decision it got
// then, and an item goes with its own message id.
func (r *stepRunner) settleArrival(ctx context.Context, d *delivery) (journal.Decision, error) {
	ref := *d.branch
	entries, err := json.Marshal(d.state)
	if err != nil {
		return journal.Decision{}, err
	}
	dec, err := r.e.joins.Settle(ctx, d.m.RunID, ref.Join, ref.Branch, journal.Settled{OK: true, Output: d.m.Body, Entries: entries})
	if err != nil {
		return journal.Decision{}, fmt.Errorf("settle branch %d of fork %q: %w", ref.Branch, r.spec.Name, err)
	}
	if dec.Next >= 0 {
		if err := r.sendItem(ctx, d.m, branchRef{Join: ref.Join, Branch: dec.Next, At: ref.At}, dec.Item); err != nil {
			return journal.Decision{}, err
		}
	}
	return dec, nil
}

// arriveHere carries out k, the hop of a branch's last step to its fork
// (at, served by this worker too), where the step ran: the branch is
// settled at the fork (settleArrival) and the arrival recorded with the
// step's events, without a message to the fork's queue. Only the arrival
// the join is due at (the last branch back, which fires the join or
// compensates a failed fork) is sent there, where the fork's handler
// settles it again (getting the same decision) and goes on. A redelivery
// of the step carries k out again, which settles nothing twice.
func (r *stepRunner) arriveHere(ctx context.Context, a *stepAttempt, at *stepRunner, k kept) error {
	runID := a.d.m.RunID
	if err := r.e.putSpills(ctx, runID, k.spills); err != nil {
		return &patterns.HopError{Step: r.spec.Name, To: k.out.RoutingKey, Err: err}
	}
	env, h, err := broker.EnvelopeOf(&k.out.Message)
	if err != nil {
		return &patterns.HopError{Step: r.spec.Name, To: k.out.RoutingKey, Err: err}
	}
	m := &broker.Message{Envelope: env, Headers: h, Body: k.out.Message.Body, Queue: at.queue, Exchange: k.out.Exchange, RoutingKey: k.out.RoutingKey}
	d := readStep(m)
	if d.err != nil || d.branch == nil {
		return r.e.send(ctx, r.spec.Name, k)
	}
	dec, err := at.settleArrival(ctx, &d)
	if err != nil {
		return &patterns.HopError{Step: r.spec.Name, To: k.out.RoutingKey, Err: err}
	}
	if dec.Last {
		return r.e.send(ctx, r.spec.Name, k)
	}
	a.extra = []journal.Event{at.arrivalEvent(&d, *d.branch, dec)}
	return nil
}

// arrivesAt is the fork a branch's step hands k to, when this worker
// serves it and nothing is between (no delay, no routing slip): nil
// otherwise, and k goes as a message.
func (r *stepRunner) arrivesAt(d *delivery, k kept) *stepRunner {
	if d.branch == nil || d.slip != nil || k.kind != keptHop || !k.planned || !k.due.IsZero() || k.next != len(d.route)-1 {
		return nil
	}
	return r.forks[d.route[k.next]]
}

// sendItem hands out item ref.Branch of a ForEach: item, or when that is
// nil the item read from the join.
func (r *stepRunner) sendItem(ctx context.Context, m *broker.Message, ref branchRef, item []byte) error {
	if item != nil {
		return r.sendBranch(ctx, m, ref, item)
	}
	items, err := r.e.joins.JoinItems(ctx, m.RunID, ref.Join, ref.Branch, 1)
	if err != nil {
		return fmt.Errorf("item %d of fork %q: %w", ref.Branch, r.spec.Name, err)
	}
	if len(items) != 1 {
		return fmt.Errorf("item %d of fork %q: %w", ref.Branch, r.spec.Name, journal.ErrJoinNotFound)
	}
	return r.sendBranch(ctx, m, ref, items[0])
}

// fireJoin runs the fork's join once every branch is back: its function
// gets the payload that reached the fork and every branch's output, and
// the run goes on from the fork's place on its route with what the steps
// before it and every branch have to compensate. It runs once, under the
// join's key, however many arrivals see it due.
func (r *stepRunner) fireJoin(ctx context.Context, a *stepAttempt, ref branchRef) broker.Ack {
	m := a.d.m
	st, err := r.e.joins.JoinStatus(ctx, m.RunID, ref.Join)
	if err != nil {
		return broker.Retry(fmt.Errorf("join of fork %q: %w", r.spec.Name, err))
	}
	var parent forkParent
	if err := json.Unmarshal(st.Parent, &parent); err != nil || parent.Pos < 0 || parent.Pos >= len(parent.Route) {
		return r.giveUp(ctx, a, a.d.state, nil, broker.Fatal(fmt.Errorf("join of fork %q: what it kept to go on is unreadable (%v)", r.spec.Name, err)))
	}
	arrivals, state, err := r.e.arrivals(ctx, m.RunID, ref.Join, st.Total, parent.State)
	if err != nil {
		return broker.Retry(err)
	}
	// From here the delivery is the run's, at the fork, going on.
	a.d = delivery{m: m, route: parent.Route, pos: parent.Pos, replays: a.d.replays, returns: a.d.returns, state: state}
	a.joined = &ref
	fk := r.spec.Fork
	a.join = func(ctx context.Context) (any, error) {
		in := func(v any) error { return decodeBody(m, parent.Input, v) }
		return fk.Join(ctx, in, len(arrivals), func(i int, v any) error { return decodeBody(m, arrivals[i].Output, v) })
	}
	return r.runUnit(ctx, a, fmt.Sprintf("%s/join/%s", m.RunID, ref.Join))
}

// decodeBody decodes body as m's codec reads m's own.
func decodeBody(m *broker.Message, body []byte, v any) error {
	c := *m
	c.Body = body
	return decoder(&c)(v)
}

// arrivals reads every branch of a join back, in branch order, and the
// run's compensation state once the join fires: what it was before the
// fork, then what each branch completed.
func (e *Engine) arrivals(ctx context.Context, runID, key string, total int, before runState) ([]journal.Arrival, runState, error) {
	out, state, _, err := e.readJoin(ctx, runID, key, total, before)
	return out, state, err
}

// readJoin is arrivals, and why the join failed: the words of the first
// branch that was given up ("" when none said).
func (e *Engine) readJoin(ctx context.Context, runID, key string, total int, before runState) ([]journal.Arrival, runState, string, error) {
	const page = 1000
	out := make([]journal.Arrival, 0, total)
	state := runState{Compensate: slices.Clone(before.Compensate)}
	why := ""
	for from := 0; from < total; {
		got, err := e.joins.Arrivals(ctx, runID, key, from, page)
		if err != nil {
			return nil, runState{}, "", fmt.Errorf("read the branches of join %q back: %w", key, err)
		}
		if len(got) == 0 {
			break
		}
		for _, a := range got {
			if !a.OK {
				if why == "" {
					why = string(a.Output)
				}
				continue
			}
			out = append(out, a)
			var st runState
			if len(a.Entries) > 0 {
				if err := json.Unmarshal(a.Entries, &st); err != nil {
					return nil, runState{}, "", fmt.Errorf("branch %d of join %q: %w", a.Branch, key, err)
				}
			}
			state.Compensate = append(state.Compensate, st.Compensate...)
		}
		from = got[len(got)-1].Branch + 1
	}
	return out, state, why, nil
}

// stopIfFailed stops a branch at its next step once its fork's join has
// failed (another branch was given up): what the branch completed is
// compensated, and the branch settled as stopped.
func (r *stepRunner) stopIfFailed(ctx context.Context, a *stepAttempt) (broker.Ack, bool) {
	d := &a.d
	st, err := r.e.joins.JoinStatus(ctx, d.m.RunID, d.branch.Join)
	if err != nil {
		return broker.Retry(fmt.Errorf("look up the join of step %q's branch: %w", r.spec.Name, err)), true
	}
	if !st.Failed {
		return broker.Ack{}, false
	}
	if err := r.e.stopBranch(ctx, r.f, d.m, *d.branch, d.state, r.spec.Name, branchStopped, ""); err != nil {
		return broker.Retry(err), true
	}
	a.result = resultStopped
	return broker.Accept(), true
}

// stopBranch undoes what a branch completed (st), in a compensation chain
// of its own that settles the branch as stopped when it ends; a branch
// with nothing to undo is settled now.
func (e *Engine) stopBranch(ctx context.Context, f *flow, m *broker.Message, ref branchRef, st runState, step, reason, why string) error {
	if len(st.Compensate) == 0 {
		return e.settleStopped(ctx, f, m, ref, false, why)
	}
	cs := compState{Failed: step, Error: journal.Truncate(reason), Replays: replays(m.Headers), Branch: &ref}
	out, _, ok, err := e.nextCompensation(ctx, f, m, st.Compensate, cs)
	switch {
	case err != nil:
		return err
	case !ok:
		return e.settleStopped(ctx, f, m, ref, false, why)
	}
	if err := e.conn.Send(ctx, out); err != nil {
		return fmt.Errorf("compensate the branch of run %s: %w", m.RunID, err)
	}
	return nil
}

// branchStopped is why a branch stopped by another's failure is undone.
const branchStopped = "another branch was given up"

// undoneMark is what a stopped branch that undid something settles with
// (journal.Settled.Entries), so that the join knows the run's
// compensation did something even when nothing else is left to undo.
var undoneMark = []byte(`{"undone":true}`)

// settleStopped settles a branch whose own work is undone (undid says it
// had something to undo); the last branch of a failed join to settle
// compensates what the others that arrived did, and what the run did
// before the fork.
func (e *Engine) settleStopped(ctx context.Context, f *flow, m *broker.Message, ref branchRef, undid bool, why string) error {
	// A stopped branch settles with what stopped it when it was the one
	// given up, for the run's compensation to say.
	s := journal.Settled{Output: []byte(why)}
	if undid {
		s.Entries = undoneMark
	}
	dec, err := e.joins.Settle(ctx, m.RunID, ref.Join, ref.Branch, s)
	if err != nil {
		return fmt.Errorf("settle branch %d of join %q: %w", ref.Branch, ref.Join, err)
	}
	if dec.Last {
		return e.compensateJoin(ctx, f, m, ref, why)
	}
	return nil
}

// compensateJoin starts the compensation of a run whose fork failed, once
// every branch has settled: what the branches that arrived completed,
// then what the run completed before the fork. Its first message has the
// run's compensation id, so a redelivery starts it once. why is the
// failure's own words when the caller knows them ("" asks the journal).
func (e *Engine) compensateJoin(ctx context.Context, f *flow, m *broker.Message, ref branchRef, why string) error {
	st, err := e.joins.JoinStatus(ctx, m.RunID, ref.Join)
	if err != nil {
		return fmt.Errorf("join %q: %w", ref.Join, err)
	}
	var parent forkParent
	if err := json.Unmarshal(st.Parent, &parent); err != nil || parent.Pos < 0 || parent.Pos >= len(parent.Route) {
		return fmt.Errorf("join %q: what it kept to go on is unreadable (%v)", ref.Join, err)
	}
	_, state, given, err := e.readJoin(ctx, m.RunID, ref.Join, st.Dispatched, parent.State)
	if err != nil {
		return err
	}
	if why == "" {
		why = given
	}
	fork := parent.Route[parent.Pos]
	reason := why
	if reason == "" {
		reason = "a branch of " + fork + " was given up"
	}
	// A child run failed at its fork is a failed child, as one given up on
	// its main line is: its parent's step hears it first.
	var p parentRef
	if found, err := readJSONHeader(m.Headers, HeaderParent, &p); err != nil {
		return err
	} else if found {
		if err := e.childFailed(ctx, &delivery{m: m, parent: &p}, errors.New(reason)); err != nil {
			return err
		}
	}
	if len(state.Compensate) == 0 {
		return e.branchesUndone(ctx, f, m, ref, st, fork)
	}
	base := *m
	base.Headers = m.Headers.Clone()
	delete(base.Headers, HeaderBranch)
	_, _, err = e.startCompensation(ctx, f, &base, state, nil, fork, reason, 0)
	return err
}

// branchesUndone records a run whose failed fork left nothing to undo but
// what its stopped branches undid themselves as compensated, when they
// undid anything; otherwise the run stays failed.
func (e *Engine) branchesUndone(ctx context.Context, f *flow, m *broker.Message, ref branchRef, st journal.JoinStatus, fork string) error {
	undid := false
	for from := 0; from < st.Dispatched && !undid; {
		got, err := e.joins.Arrivals(ctx, m.RunID, ref.Join, from, 1000)
		if err != nil {
			return fmt.Errorf("read the branches of join %q back: %w", ref.Join, err)
		}
		if len(got) == 0 {
			break
		}
		for _, a := range got {
			undid = undid || !a.OK && len(a.Entries) > 0
		}
		from = got[len(got)-1].Branch + 1
	}
	if !undid {
		return nil
	}
	now, r := e.now(), replays(m.Headers)
	return e.writer.RecordSync(ctx, journal.Event{RunID: m.RunID, Flow: f.name, Kind: journal.KindCompensation,
		Step: fork, Outcome: "compensated: every branch undone", StartedAt: now, EndedAt: now,
		Status: journal.Compensated, Replays: r, Seq: journal.Seq(r, 2*journal.CompensationStage-1, 0, 0),
		Key: "branches-undone/" + ref.Join})
}

// branchGivenUp is what giving a branch's step up does to its fork: the
// join fails (no more branches handed out, the others stop at their next
// step) and what the branch completed is compensated (stopBranch). st is
// what the branch has to compensate.
func (e *Engine) branchGivenUp(ctx context.Context, f *flow, m *broker.Message, ref branchRef, st runState, step, reason string) error {
	if err := e.joins.FailJoin(ctx, m.RunID, ref.Join); err != nil {
		return fmt.Errorf("fail the join of step %q's branch: %w", step, err)
	}
	return e.stopBranch(ctx, f, m, ref, st, step, reason, reason)
}

// arrivalEvent is the journal's record of a branch back at its fork.
func (r *stepRunner) arrivalEvent(d *delivery, ref branchRef, dec journal.Decision) journal.Event {
	m, now := d.m, r.e.now()
	outcome := fmt.Sprintf("branch %d arrived", ref.Branch)
	if r.spec.Fork.ForEach {
		outcome = fmt.Sprintf("item %d arrived", ref.Branch)
	}
	if dec.Failed {
		outcome += " after another was given up"
	}
	return journal.Event{RunID: m.RunID, Flow: r.f.name, Kind: journal.KindStep, Step: r.spec.Name, Outcome: outcome,
		StartedAt: now, EndedAt: now, Queue: r.queue, Replays: d.replays,
		// After every branch's steps (inBranch), before the join.
		Seq: journal.Seq(d.replays, ref.At+1, 0xfd000|ref.Branch&0xfff, 3), Key: fmt.Sprintf("arrived/%s/%d", ref.Join, ref.Branch)}
}

// forkOutcome is the outcome a fork records when it takes a run in.
func forkOutcome(fk *dsl.ForkSpec, st journal.JoinStatus) string {
	if fk.ForEach {
		return fmt.Sprintf("forked: %d items, %d in flight", st.Total, st.Limit)
	}
	return fmt.Sprintf("forked: %d branches", st.Total)
}

// inBranch places e, an event of a step at position pos on a branch, in
// its run: its key names the branch, its stage is the fork's, and it leaves the run's
// status alone unless the branch failed (the run is running while its
// branches are).
func inBranch(e *journal.Event, b *branchRef, pos int) {
	e.Key = fmt.Sprintf("branch/%s/%d/%s", b.Join, b.Branch, e.Key)
	// Within the fork's stage, the branches' steps by their position on
	// the branch, then by branch (the first 16 apart), then attempt (which
	// stays below 1,024): a timeline reads the same every time.
	replays, attempt, phase := e.Seq>>48, e.Seq>>4&0xfffff, e.Seq&0xf
	e.Seq = journal.Seq(int(replays), b.At+1, min(pos+1, 62)<<14|(b.Branch&0xf)<<10|int(min(attempt, 0x3ff)), int(phase))
	if e.Status == journal.Running || e.Status == journal.Waiting {
		e.Status = ""
	}
}

// joinedEvent places e, an event of the delivery that fired a join, in its
// run: under the join's key, and at the fork's stage after every branch's
// events.
func joinedEvent(e *journal.Event, b *branchRef) {
	e.Key = fmt.Sprintf("join/%s/%s", b.Join, e.Key)
	// Only what happens at the fork's stage; what the hop leads to (a
	// delay, a hand-off, skips) keeps its own place.
	if stage := int(e.Seq >> 24 & 0xffffff); stage == b.At+1 {
		const attemptBits = int64(0xfffff) << 4
		e.Seq |= attemptBits
	}
}

// branchGivenUp gives up a step on a branch: the fork's join fails and
// what the branch completed is compensated (Engine.branchGivenUp). The
// message is accepted when something of the run is being compensated,
// which then has the run; otherwise it is set aside for a person.
func (r *stepRunner) branchGivenUp(ctx context.Context, a *stepAttempt, st runState, serr error, reject bool) broker.Ack {
	m := a.d.m
	ref := *a.d.branch
	if r.f.hold > 0 && a.expect != broker.OutcomeLabelParked {
		return r.holdBranch(ctx, a, st, serr, reject)
	}
	if err := r.e.branchGivenUp(ctx, r.f, m, ref, st, r.spec.Name, serr.Error()); err != nil {
		r.e.log.Warn("a branch's failure could not be carried out; the failed step will be tried again",
			"flow", r.f.name, "run_id", m.RunID, "step", r.spec.Name, "error", err)
		a.result, a.expect = resultBusy, ""
		return broker.InProgress(r.e.cfg.InProgressDelay)
	}
	compensating := len(st.Compensate) > 0
	if !compensating {
		js, err := r.e.joins.JoinStatus(ctx, m.RunID, ref.Join)
		var parent forkParent
		if err == nil && json.Unmarshal(js.Parent, &parent) == nil {
			compensating = len(parent.State.Compensate) > 0
		}
	}
	if compensating && a.expect != broker.OutcomeLabelParked {
		a.result, a.compensation = resultCompensating, compensationStarted
		return broker.Accept()
	}
	if reject {
		return broker.Reject(serr)
	}
	return broker.Retry(serr)
}

// holdBranch holds a branch given up in a flow with HoldForReplay: its
// message goes to the step's dead-letter queue for a replay, the other
// branches go on, and a timer on the ladder comes back to the fork's
// queue when the hold ends (holdEnded). st is what the branch has to
// compensate.
func (r *stepRunner) holdBranch(ctx context.Context, a *stepAttempt, st runState, serr error, reject bool) broker.Ack {
	d := &a.d
	until := r.e.now().Add(r.f.hold)
	timer, err := r.f.hopMessage(ctx, r.e.conn, d.m, d.wireRoute(), len(d.route)-1, json.RawMessage(d.m.Body), st, nil)
	if err == nil {
		var h string
		if h, err = jsonHeader(holdRef{Step: r.spec.Name, Replays: d.replays}); err == nil {
			headers := timer.Message.Headers.Clone()
			headers[HeaderHold] = h
			timer.Message.Headers = headers
			timer.Message.MessageID = fmt.Sprintf("%s/hold/%s/%d/%d", d.m.RunID, d.branch.Join, d.branch.Branch, d.replays)
			err = r.e.conn.Schedule(ctx, until, timer)
		}
	}
	if err != nil {
		r.e.log.Warn("a branch could not be held for replay; the failed step will be tried again",
			"flow", r.f.name, "run_id", d.m.RunID, "step", r.spec.Name, "error", err)
		a.result, a.expect = resultBusy, ""
		return broker.InProgress(r.e.cfg.InProgressDelay)
	}
	a.compensation, a.holdUntil = compensationHeld, until
	if reject {
		return broker.Reject(serr)
	}
	return broker.Retry(serr)
}

// holdEnded is the timer of a held branch: a run replayed since (or
// cancelled) drops it; otherwise the branch is given up for good, as a
// branch of a flow without a hold is: the join fails, the other branches
// stop at their next step, and what the branch completed is undone.
func (r *stepRunner) holdEnded(ctx context.Context, a *stepAttempt) broker.Ack {
	d := &a.d
	run, err := r.e.journal.Run(ctx, d.m.RunID)
	switch {
	case err != nil && !errors.Is(err, journal.ErrRunNotFound):
		return broker.Retry(fmt.Errorf("look up run %s at the end of its branch's hold: %w", d.m.RunID, err))
	case err == nil && (run.Replays > d.hold.Replays || run.Status == journal.Cancelled):
		a.result = resultHoldDropped
		return broker.Accept()
	}
	why := branchStopped
	if err == nil && run.Error != "" {
		why = run.Error
	}
	// The failed message no longer waits for a person.
	r.tidy(r.f.queue(d.hold.Step)+broker.DeadLetterSuffix, d.m.RunID)
	if err := r.e.branchGivenUp(ctx, r.f, d.m, *d.branch, d.state, d.hold.Step, why); err != nil {
		return broker.Retry(err)
	}
	a.result = resultHoldEnded
	return broker.Accept()
}
