// Package fleet is the fleet view: which workers are up, draining or
// lost and whether each is ready, and per step of the flows how many
// messages wait in its queue, how many the workers' handlers hold, and
// how many are in its dead-letter and parked queues, with the scheduler
// ladder's backlog and lateness. One value (View), read by [Read] for the
// dashboard's /fleet page and /api/fleet and for `acemq-flow top`, so that
// neither works it out on its own.
//
// # Where it comes from
//
// The workers come from the reports they make of themselves to the run
// journal (journal.WorkerStore; engine.Config.Heartbeat): a worker is up
// while it renews its report, draining while it closes, and lost once
// journal.LostAfter of its heartbeat intervals passed without a report (it
// died, or cannot reach the journal); a worker that closed removed its
// report. What is in flight at a step is the sum of what the last reports
// of the workers not lost say their handlers hold.
//
// The depths come from the broker: a passive declare of each queue, which
// says how many messages are ready and how many consumers read it, and
// declares nothing. A queue the broker does not have is shown as missing
// (nothing declared it yet), not as empty. The ladder's backlog is what
// waits in its rungs and in its control queue; its lateness, what the
// workers' control consumers measured over their last interval.
//
//	v, err := fleet.Read(ctx, fleet.Source{Journal: eng.Journal(), Conn: eng.Conn(), Flows: eng.Flows()})
package fleet

import (
	"cmp"
	"context"
	"fmt"
	"slices"
	"strconv"
	"sync"
	"time"

	"github.com/acemq/acemq-flow/broker"
	"github.com/acemq/acemq-flow/broker/transport"
	"github.com/acemq/acemq-flow/engine"
	"github.com/acemq/acemq-flow/engine/journal"
)

// DefaultTimeout bounds what Read asks the broker, together: a broker
// that is away must not hold a page up.
const DefaultTimeout = 5 * time.Second

// inspectors is how many queues Read asks the broker about at once.
const inspectors = 4

// The states of a worker.
const (
	// StateUp: it renews its report every heartbeat interval.
	StateUp = "up"
	// StateDraining: it is closing, letting its steps in flight finish.
	StateDraining = "draining"
	// StateLost: journal.LostAfter intervals passed without a report.
	StateLost = "lost"
)

// Source is what a View is read from.
type Source struct {
	// Journal holds the workers' reports (nil, or a journal that is not a
	// journal.WorkerStore: no workers are listed, and View.Reports says
	// why).
	Journal journal.Journal
	// Conn is asked for the queues' depths (nil: none are shown). Nothing
	// is declared through it.
	Conn *broker.Conn
	// Flows are flows whose steps are listed even when no worker reports
	// them: those of the reader's engine (engine.Engine.Flows). Flows the
	// workers report are listed too.
	Flows []engine.FlowInfo
	// Now is the clock a worker is judged lost on (nil = time.Now).
	Now func() time.Time
	// Timeout bounds the broker's part (0 = DefaultTimeout).
	Timeout time.Duration
}

// View is the fleet at one moment.
type View struct {
	At time.Time `json:"at"`
	// Reports says whether the journal keeps the workers' reports: when
	// false, Workers is empty for want of reports, not of workers.
	Reports bool     `json:"reports"`
	Workers []Worker `json:"workers"`
	Steps   []Step   `json:"steps"`
	Ladders []Ladder `json:"ladders"`
	// Problems are what could not be read, each a sentence: the
	// journal's reports, queues the broker did not answer for.
	Problems []string `json:"problems,omitempty"`
}

// Count is how many workers are in state.
func (v View) Count(state string) int {
	n := 0
	for _, w := range v.Workers {
		if w.State == state {
			n++
		}
	}
	return n
}

// Worker is one worker, from its last report.
type Worker struct {
	ID    string `json:"id"`
	Host  string `json:"host"`
	PID   int    `json:"pid"`
	Build string `json:"build,omitempty"`
	// Flows are the flows it works and the version of each.
	Flows []journal.ServedFlow `json:"flows"`
	// State is StateUp, StateDraining or StateLost.
	State string `json:"state"`
	// Ready says whether its readiness checks all held at its last
	// report; NotReady is "check: why" of each that did not.
	Ready    bool     `json:"ready"`
	NotReady []string `json:"not_ready,omitempty"`
	// StartedAt is when it started, LastSeen when it last reported, and
	// Interval how often it reports.
	StartedAt time.Time `json:"started_at"`
	LastSeen  time.Time `json:"last_seen"`
	Interval  Seconds   `json:"interval"`
	// InFlight is what its handlers held at its last report, over every
	// queue it consumes.
	InFlight int `json:"in_flight"`
	// Ladder is the ladder its control consumer runs, and what it
	// delivered over its last interval and how late.
	Ladder LadderLoad `json:"ladder"`
}

// LadderLoad is what a ladder's control consumers delivered over their
// last interval: how many messages, the 99th percentile of their
// lateness (an upper bound) and the lateness of the last one delivered.
type LadderLoad struct {
	Name      string  `json:"name"`
	Delivered int64   `json:"delivered"`
	LateP99   Seconds `json:"late_p99"`
	LateLast  Seconds `json:"late_last"`
}

// Queue is what the broker said of one queue.
type Queue struct {
	Name string `json:"name"`
	// Messages are ready to be delivered; Consumers read the queue.
	Messages  int `json:"messages"`
	Consumers int `json:"consumers"`
	// Exists is false when the broker has no such queue (nothing
	// declared it yet) or was not asked; Error says why it did not
	// answer, when it did not.
	Exists bool   `json:"exists"`
	Error  string `json:"error,omitempty"`
}

// Step is one step of a flow.
type Step struct {
	Flow string `json:"flow"`
	Step string `json:"step"`
	// Queue is the step's queue; DeadLetter and Parked are the queues
	// beside it that hold what was given up and what could not be read.
	Queue      Queue `json:"queue"`
	DeadLetter Queue `json:"dead_letter"`
	Parked     Queue `json:"parked"`
	// InFlight is what the handlers of the workers not lost hold of the
	// step's queue (its old names' too), and Compensating of its
	// compensation's queue, at their last reports.
	InFlight     int `json:"in_flight"`
	Compensating int `json:"compensating"`
	// Workers is how many workers not lost consume the step's queue.
	Workers int `json:"workers"`
}

// Ladder is a scheduler ladder: its rungs, longest first, and its control
// queue, and what the workers' control consumers on it delivered.
type Ladder struct {
	LadderLoad
	Rungs   []Queue `json:"rungs"`
	Control Queue   `json:"control"`
	// Backlog is every message on the ladder, in its rungs and its
	// control queue; Due those in the control queue: due, and waiting to
	// be moved on (while it grows, scheduled messages arrive late).
	Backlog int `json:"backlog"`
	Due     int `json:"due"`
	// Workers is how many workers not lost run its control consumer.
	Workers int `json:"workers"`
}

// Seconds is a duration that JSON shows in seconds (0.25, not 250000000).
type Seconds time.Duration

// MarshalJSON writes s in seconds.
func (s Seconds) MarshalJSON() ([]byte, error) {
	return strconv.AppendFloat(nil, time.Duration(s).Seconds(), 'f', -1, 64), nil
}

// UnmarshalJSON reads s in seconds; it refuses anything but a number.
func (s *Seconds) UnmarshalJSON(b []byte) error {
	f, err := strconv.ParseFloat(string(b), 64)
	if err != nil {
		return fmt.Errorf("fleet: seconds %s: %w", b, err)
	}
	*s = Seconds(f * float64(time.Second))
	return nil
}

// Read reads the fleet from src: the workers' reports from its journal,
// then the depths of every step's queues and of the ladders from its
// broker, within src.Timeout. What could not be read is said in
// View.Problems rather than failing the whole: Read returns an error
// only when ctx ended.
func Read(ctx context.Context, src Source) (View, error) {
	now := time.Now
	if src.Now != nil {
		now = src.Now
	}
	timeout := cmp.Or(src.Timeout, DefaultTimeout)
	v := View{At: now(), Workers: []Worker{}, Steps: []Step{}, Ladders: []Ladder{}}
	reports := readReports(ctx, src.Journal, &v)
	if err := ctx.Err(); err != nil {
		return View{}, err
	}
	v.Workers = workers(reports, v.At)
	live := slices.DeleteFunc(slices.Clone(reports), func(r journal.WorkerReport) bool { return r.Lost(v.At) })
	v.Steps = steps(src.Flows, live)
	v.Ladders = ladders(src.Conn, live)
	if src.Conn != nil {
		bctx, cancel := context.WithTimeout(ctx, timeout)
		defer cancel()
		inspect(bctx, src.Conn.Transport(), &v)
	}
	if err := ctx.Err(); err != nil {
		return View{}, err
	}
	return v, nil
}

// readReports are the journal's workers' reports, v.Reports set when it
// keeps them and a problem said when it did not answer.
func readReports(ctx context.Context, j journal.Journal, v *View) []journal.WorkerReport {
	ws, ok := j.(journal.WorkerStore)
	if !ok {
		return nil
	}
	v.Reports = true
	rs, err := ws.Workers(ctx)
	if err != nil {
		v.Problems = append(v.Problems, fmt.Sprintf("the workers' reports were not read from the journal: %v", err))
		return nil
	}
	return rs
}

// workers are the reports as Workers, at now: the lost ones last, then by
// host, start and id.
func workers(reports []journal.WorkerReport, now time.Time) []Worker {
	out := make([]Worker, 0, len(reports))
	for _, r := range reports {
		w := Worker{ID: r.ID, Host: r.Host, PID: r.PID, Build: r.Build, Flows: r.Flows, State: StateUp, Ready: r.Ready(),
			StartedAt: r.StartedAt, LastSeen: r.SeenAt, Interval: Seconds(r.Interval), InFlight: r.InFlight(),
			Ladder: LadderLoad{Name: r.Ladder.Name, Delivered: r.Ladder.Delivered, LateP99: Seconds(r.Ladder.P99), LateLast: Seconds(r.Ladder.Last)}}
		if w.Flows == nil {
			w.Flows = []journal.ServedFlow{}
		}
		switch {
		case r.Lost(now):
			w.State = StateLost
		case r.Draining:
			w.State = StateDraining
		}
		for _, c := range r.Checks {
			if c.Error != "" {
				w.NotReady = append(w.NotReady, c.Name+": "+c.Error)
			}
		}
		out = append(out, w)
	}
	slices.SortFunc(out, func(a, b Worker) int {
		return cmp.Or(cmp.Compare(stateOrder(a.State), stateOrder(b.State)), cmp.Compare(a.Host, b.Host),
			a.StartedAt.Compare(b.StartedAt), cmp.Compare(a.ID, b.ID))
	})
	return out
}

// stateOrder puts the workers up first and the lost last.
func stateOrder(state string) int {
	switch state {
	case StateUp:
		return 0
	case StateDraining:
		return 1
	}
	return 2
}

// steps are the steps of flows (but External ones, whose queues another
// service owns), in their order, then those of the flows only the live
// workers report, with what the workers hold of each.
func steps(flows []engine.FlowInfo, live []journal.WorkerReport) []Step {
	type key struct{ flow, step string }
	var out []Step
	at := map[key]int{}
	add := func(flow, step, queue string) int {
		k := key{flow, step}
		if i, ok := at[k]; ok {
			return i
		}
		at[k] = len(out)
		out = append(out, Step{Flow: flow, Step: step, Queue: Queue{Name: queue},
			DeadLetter: Queue{Name: queue + broker.DeadLetterSuffix}, Parked: Queue{Name: queue + broker.ParkedSuffix}})
		return len(out) - 1
	}
	for _, f := range flows {
		for _, s := range f.Steps {
			if !s.External {
				add(f.Name, s.Name, s.Queue)
			}
		}
	}
	known := len(out)
	for _, r := range live {
		for _, q := range r.Queues {
			if q.Compensation {
				continue
			}
			// A step's old name's queue counts for the step, but the
			// step's own queue is <flow>.<step>.
			i := add(q.Flow, q.Step, q.Flow+"."+q.Step)
			out[i].InFlight += q.InFlight
			if q.Queue == out[i].Queue.Name {
				out[i].Workers++
			}
		}
	}
	for _, r := range live {
		for _, q := range r.Queues {
			if i, ok := at[key{q.Flow, q.Step}]; ok && q.Compensation {
				out[i].Compensating += q.InFlight
			}
		}
	}
	// The flows only workers report by name, each one's steps as its
	// workers listed them.
	slices.SortStableFunc(out[known:], func(a, b Step) int { return cmp.Compare(a.Flow, b.Flow) })
	if out == nil {
		out = []Step{}
	}
	return out
}

// ladders are conn's ladder and those the live workers run, with what
// their control consumers delivered.
func ladders(conn *broker.Conn, live []journal.WorkerReport) []Ladder {
	var out []Ladder
	at := map[string]int{}
	add := func(name string) int {
		if i, ok := at[name]; ok {
			return i
		}
		at[name] = len(out)
		l := Ladder{LadderLoad: LadderLoad{Name: name}, Control: Queue{Name: name + broker.DueSuffix}}
		for _, r := range broker.LadderRungs() {
			l.Rungs = append(l.Rungs, Queue{Name: name + r.Suffix})
		}
		out = append(out, l)
		return len(out) - 1
	}
	if conn != nil {
		add(conn.Ladder())
	}
	for _, r := range live {
		if r.Ladder.Name == "" {
			continue
		}
		l := &out[add(r.Ladder.Name)]
		l.Workers++
		l.Delivered += r.Ladder.Delivered
		l.LateP99 = max(l.LateP99, Seconds(r.Ladder.P99))
		l.LateLast = max(l.LateLast, Seconds(r.Ladder.Last))
	}
	if out == nil {
		out = []Ladder{}
	}
	return out
}

// inspect asks the broker about every queue of v, inspectors at a time,
// until ctx ends, and says in v.Problems how many did not answer.
func inspect(ctx context.Context, t transport.Transport, v *View) {
	var qs []*Queue
	for i := range v.Steps {
		s := &v.Steps[i]
		qs = append(qs, &s.Queue, &s.DeadLetter, &s.Parked)
	}
	for i := range v.Ladders {
		l := &v.Ladders[i]
		for j := range l.Rungs {
			qs = append(qs, &l.Rungs[j])
		}
		qs = append(qs, &l.Control)
	}
	next := make(chan *Queue)
	var wg sync.WaitGroup
	for range min(inspectors, len(qs)) {
		wg.Go(func() {
			for q := range next {
				ask(ctx, t, q)
			}
		})
	}
	for _, q := range qs {
		next <- q
	}
	close(next)
	wg.Wait()
	for i := range v.Ladders {
		l := &v.Ladders[i]
		l.Due = l.Control.Messages
		l.Backlog = l.Due
		for _, r := range l.Rungs {
			l.Backlog += r.Messages
		}
	}
	var failed []*Queue
	for _, q := range qs {
		if q.Error != "" {
			failed = append(failed, q)
		}
	}
	if len(failed) > 0 {
		v.Problems = append(v.Problems, fmt.Sprintf("the broker did not answer for %d of %d queues (%s: %s)", len(failed), len(qs), failed[0].Name, failed[0].Error))
	}
}

// ask fills q in from a passive declare of it: a queue that does not
// exist is missing (Exists false, no error).
func ask(ctx context.Context, t transport.Transport, q *Queue) {
	if err := ctx.Err(); err != nil {
		q.Error = "not asked: " + err.Error()
		return
	}
	st, err := t.Inspect(ctx, q.Name)
	switch {
	case transport.IsCode(err, transport.NotFound):
	case err != nil:
		q.Error = err.Error()
	default:
		q.Exists, q.Messages, q.Consumers = true, st.Messages, st.Consumers
	}
}
