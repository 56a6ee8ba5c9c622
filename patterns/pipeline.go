package patterns

import (
	"context"
	"fmt"
	"slices"

	"github.com/acemq/acemq-flow/broker"
)

// Pipeline is a route declared once that messages travel by name: a
// direct exchange named after the pipeline, and behind each step a queue
// "name.step" bound with the step's name as routing key (the naming is
// Java's, exactly, so that a step in any AceMQ library listens where the
// others publish). A message on it carries x-acemq-route (the step
// names), x-acemq-route-position and x-acemq-run-id.
type Pipeline struct {
	name  string
	steps []string
}

// NewPipeline declares a pipeline called name with the steps in order. It
// refuses an empty name, no steps, an empty step name and a step named
// twice, with an error matching broker.ErrInvalidOption.
func NewPipeline(name string, steps ...string) (*Pipeline, error) {
	if name == "" {
		return nil, fmt.Errorf("%w: pipeline with no name", broker.ErrInvalidOption)
	}
	if len(steps) == 0 {
		return nil, fmt.Errorf("%w: pipeline %q has no steps", broker.ErrInvalidOption, name)
	}
	for i, s := range steps {
		if s == "" {
			return nil, fmt.Errorf("%w: pipeline %q: step %d has no name", broker.ErrInvalidOption, name, i)
		}
		if slices.Index(steps, s) != i {
			return nil, fmt.Errorf("%w: pipeline %q names step %q twice", broker.ErrInvalidOption, name, s)
		}
	}
	return &Pipeline{name: name, steps: slices.Clone(steps)}, nil
}

// Name is the pipeline's name, which is also its exchange.
func (p *Pipeline) Name() string { return p.name }

// Steps is the pipeline's step names, in order (a copy).
func (p *Pipeline) Steps() []string { return slices.Clone(p.steps) }

// Has reports whether the pipeline declares step.
func (p *Pipeline) Has(step string) bool { return slices.Contains(p.steps, step) }

// QueueFor is the queue behind step, "name.step", or "" when the pipeline
// has no such step (which Consume refuses).
func (p *Pipeline) QueueFor(step string) string {
	if !p.Has(step) {
		return ""
	}
	return p.name + "." + step
}

// Topology is everything the pipeline needs on the broker: its direct
// exchange, and for each step the queue (declared exactly as consuming it
// declares it, with its .dlq and .parked, so either may come first) bound
// under the step's name.
func (p *Pipeline) Topology() broker.Topology {
	t := broker.Topology{Exchanges: []broker.Exchange{{Name: p.name, Kind: "direct", Durable: true}}}
	for _, s := range p.steps {
		q := p.QueueFor(s)
		t = t.Merge(broker.ConsumerTopology(q))
		t.Bindings = append(t.Bindings, broker.Binding{Queue: q, Exchange: p.name, Key: s})
	}
	return t
}

// Slip is the pipeline as a routing slip, every step publishing to the
// pipeline's exchange under its own name: for starting a run that travels
// in the acemq-routing-slip form instead.
func (p *Pipeline) Slip() *RoutingSlip {
	s := NewRoutingSlip()
	for _, step := range p.steps {
		s.Step(step, p.name, step)
	}
	return s
}

// Start publishes payload to the first step with a new run id, in the
// x-acemq-route form, and returns the run id. It is the caller's own
// publish: opts are publish options (broker.Mandatory, broker.Type, a
// broker.RunID of the caller's choosing, ...) and publish's defaults apply.
func (p *Pipeline) Start(ctx context.Context, conn *broker.Conn, payload any, opts ...broker.PublishOption) (string, error) {
	if conn == nil {
		return "", fmt.Errorf("start pipeline %q: %w: nil connection", p.name, broker.ErrInvalidOption)
	}
	all := append([]broker.PublishOption{
		broker.ToExchange(p.name), broker.To(p.steps[0]),
		broker.Route(p.steps, 0), broker.RunID(broker.NewID()),
	}, opts...)
	runID, err := slipSend(ctx, conn, payload, all)
	if err != nil {
		return "", fmt.Errorf("start pipeline %q: %w", p.name, err)
	}
	return runID, nil
}

// Follow is FollowSlip with this pipeline: the handler for any step's
// queue, sending each message on to the next step.
func (p *Pipeline) Follow(conn *broker.Conn, step StepFunc, opts ...FollowOption) (broker.Handler, error) {
	return FollowSlip(conn, step, append([]FollowOption{OnPipeline(p)}, opts...)...)
}

// slipSend prepares and sends a run's first message and returns the run id
// it carries (the caller's, if one was given among opts).
func slipSend(ctx context.Context, conn *broker.Conn, payload any, opts []broker.PublishOption) (string, error) {
	out, err := conn.Prepare(ctx, payload, opts...)
	if err != nil {
		return "", err
	}
	if err := conn.Send(ctx, out); err != nil {
		return "", err
	}
	runID, _ := out.Message.Headers[broker.HeaderRunID].(string)
	return runID, nil
}
