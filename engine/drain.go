package engine

import (
	"context"
	"fmt"
	"slices"

	"github.com/acemq/acemq-flow/broker"
	"github.com/acemq/acemq-flow/broker/transport"
)

// DrainedStep is what DeleteDrained did with the queues of a step the flow
// no longer has: deleted them, or left them and why.
type DrainedStep struct {
	Step string `json:"step"`
	// Queues are the step's queues that existed: its own, its
	// compensation's, and their dead-letter and parked queues.
	Queues  []string `json:"queues"`
	Deleted bool     `json:"deleted"`
	// Left says why they were left, when they were.
	Left string `json:"left,omitempty"`
}

// DeleteDrained deletes the queues of the steps the flow called name no
// longer has (FlowCheck.Strays) once nothing is left in them and nothing
// consumes them: the step's queue and its compensation's, with their
// dead-letter and parked queues. It leaves, saying why, a step the flow
// still says Renamed or Removed (this version's workers consume its
// queues: take the migration out first), a queue a consumer still reads
// (a worker of an older version), and a step whose queues hold anything,
// failed runs in its dead-letter queue included (replay them from another
// step, or compensate them, first).
//
// RabbitMQ refuses a conditional delete (if-empty, if-unused) of a quorum
// queue, so DeleteDrained unbinds the queues first, so that nothing more
// is routed to them, looks again, and deletes them only if they are still
// empty and unread; a queue that filled in between is bound again and
// left. What an older worker sends to an unbound queue comes back to it
// unroutable (every hop is mandatory): refused, not lost.
func (e *Engine) DeleteDrained(ctx context.Context, name string) ([]DrainedStep, error) {
	f, err := e.flow(name)
	if err != nil {
		return nil, err
	}
	c, err := e.check(ctx, f)
	if err != nil {
		return nil, err
	}
	out := []DrainedStep{}
	for _, s := range c.Strays {
		d, err := e.deleteDrained(ctx, f, s)
		if err != nil {
			return out, fmt.Errorf("flow %q: delete the queues of step %q: %w", f.name, s.Step, err)
		}
		if len(d.Queues) > 0 {
			out = append(out, d)
		}
	}
	return out, nil
}

func (e *Engine) deleteDrained(ctx context.Context, f *flow, s StrayStep) (DrainedStep, error) {
	d := DrainedStep{Step: s.Step}
	t := e.conn.Transport()
	bindings := []transport.Binding{
		{Queue: s.Queue, Exchange: f.name, Key: s.Step},
		{Queue: s.CompensationQueue, Exchange: f.name, Key: compensateKey + "." + s.Step},
	}
	var queues []string
	for _, b := range bindings {
		queues = append(queues, b.Queue, b.Queue+broker.DeadLetterSuffix, b.Queue+broker.ParkedSuffix)
	}
	look := func() (why string, err error) {
		d.Queues = d.Queues[:0]
		for _, q := range queues {
			st, err := t.Inspect(ctx, q)
			switch {
			case transport.IsCode(err, transport.NotFound):
				continue
			case err != nil:
				return "", fmt.Errorf("look at queue %q: %w", q, err)
			}
			d.Queues = append(d.Queues, q)
			switch {
			case why != "":
			case st.Consumers > 0:
				why = fmt.Sprintf("%s has %d consumers (a worker of an older version?)", q, st.Consumers)
			case st.Messages > 0:
				why = fmt.Sprintf("%s holds %d messages", q, st.Messages)
			}
		}
		return why, nil
	}
	if _, migrated := f.removed[s.Step]; migrated || f.renamed.has(s.Step) {
		if _, err := look(); err != nil {
			return d, err
		}
		d.Left = "the flow still says Renamed or Removed for it, and its workers consume its queues: take that out first"
		return d, nil
	}
	why, err := look()
	if err != nil || why != "" || len(d.Queues) == 0 {
		d.Left = why
		return d, err
	}
	bindings = slices.DeleteFunc(bindings, func(b transport.Binding) bool { return !slices.Contains(d.Queues, b.Queue) })
	for _, b := range bindings {
		if err := t.Unbind(ctx, b); err != nil {
			return d, fmt.Errorf("unbind %q: %w", b.Queue, err)
		}
	}
	if why, err = look(); err != nil || why != "" {
		// Something came in before the unbinding: bind again, leave it.
		if err == nil {
			err = t.Declare(ctx, transport.Topology{Bindings: bindings})
		}
		d.Left = why
		return d, err
	}
	for _, q := range d.Queues {
		n, err := t.DeleteQueue(ctx, q)
		if err != nil {
			return d, fmt.Errorf("delete queue %q: %w", q, err)
		}
		if n > 0 {
			return d, fmt.Errorf("queue %q took %d messages with it: they came after it was unbound and found empty (published to it by name)", q, n)
		}
	}
	d.Deleted = true
	return d, nil
}
