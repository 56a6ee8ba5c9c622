package patterns

import (
	"context"
	"encoding/json"
	"fmt"
	"time"

	"github.com/acemq/acemq-flow/broker"
)

// StepFunc is the work of one step of a slip, a pipeline or a
// ThenPublish: it returns the payload to send on, or End (an untyped nil
// reads the same) to send nothing and end the run there. An error retries
// the message, as broker.Func does; one wrapped with broker.Fatal gives it
// up at once. A typed nil is given up with ErrNilResult rather than sent
// as null.
type StepFunc func(ctx context.Context, m *broker.Message) (any, error)

// FollowOption configures FollowSlip and Pipeline.Follow.
type FollowOption func(*slipFollower) error

// OnPipeline resolves route-form messages (and slips becoming routes)
// against p, and reports the pipeline run metrics under its name. A nil
// pipeline is refused.
func OnPipeline(p *Pipeline) FollowOption {
	return func(f *slipFollower) error {
		if p == nil {
			return fmt.Errorf("%w: nil pipeline", broker.ErrInvalidOption)
		}
		f.pipeline = p
		return nil
	}
}

// Write chooses the form every hop is written in (default AsArrived).
// Route needs OnPipeline. A form that is not one of the constants is
// refused.
func Write(form Form) FollowOption {
	return func(f *slipFollower) error {
		if form < AsArrived || form > Slip {
			return fmt.Errorf("%w: unknown slip form %d", broker.ErrInvalidOption, int(form))
		}
		f.write = form
		return nil
	}
}

// slipFollower is the handler FollowSlip returns.
type slipFollower struct {
	conn     *broker.Conn
	step     StepFunc
	pipeline *Pipeline
	write    Form
	metrics  *pipelineMetrics
}

// FollowSlip returns the handler for one step of a routing slip or a
// declared pipeline: it runs step, then publishes what step returned to
// the next stop as a new message (a new message id, the causation and the
// correlation recorded, the run id and x-acemq-first-seen carried, the
// attempt back to 1, the application headers carried without the broker's
// dead-lettering headers and trace context), mandatory and confirmed, and
// only then accepts the input. So a hop nothing is bound to receive
// retries the step rather than being dropped, which is why a step that
// changes anything should be idempotent.
//
// step returning End (or nil) ends the run at this step (counted
// ended_early on a pipeline) and the message is accepted; at the last step
// the run is completed whatever step returns. A slip that will not parse,
// a message carrying no slip, a route with no pipeline to resolve it
// (ErrNoPipeline) and a route naming a step the pipeline lacks
// (ErrUnknownStep) are given up at once, before step runs: none of them
// can succeed on a retry.
//
// The Ack's error tells the step's failure (*StepError) from a failure to
// pass its result on (*HopError). Under Idempotent with a ResultStore the
// next message is kept under the key before it is sent, so a redelivery
// after a lost confirm sends it again, with the same message id, and never
// runs the step twice. A slip is passed on as it arrived: its steps are
// not rewritten, only the one just done gains its time.
//
// FollowSlip refuses a nil connection or step, and invalid options, with
// an error matching broker.ErrInvalidOption.
func FollowSlip(conn *broker.Conn, step StepFunc, opts ...FollowOption) (broker.Handler, error) {
	if conn == nil || step == nil {
		return nil, fmt.Errorf("follow slip: %w: nil connection or step", broker.ErrInvalidOption)
	}
	f := &slipFollower{conn: conn, step: step}
	for _, o := range opts {
		if o == nil {
			return nil, fmt.Errorf("follow slip: %w: nil option", broker.ErrInvalidOption)
		}
		if err := o(f); err != nil {
			return nil, fmt.Errorf("follow slip: %w", err)
		}
	}
	if f.write == Route && f.pipeline == nil {
		return nil, fmt.Errorf("follow slip: %w: writing routes needs OnPipeline", broker.ErrInvalidOption)
	}
	if f.pipeline != nil {
		pm, err := newPipelineMetrics(conn)
		if err != nil {
			return nil, fmt.Errorf("follow pipeline %q: %w", f.pipeline.name, err)
		}
		f.metrics = pm
	}
	return f.handle, nil
}

func (f *slipFollower) handle(ctx context.Context, m *broker.Message) broker.Ack {
	slip, arrived, err := slipRead(m)
	if err != nil {
		return broker.Reject(broker.Fatal(fmt.Errorf("follow slip: %w", err)))
	}
	form := f.write
	if form == AsArrived {
		form = arrived
	}
	current, _ := slip.NextStep()
	if ack, ok := resent(ctx, f.conn, current.Name); ok {
		return ack
	}
	// Resolve the onward route before the step runs: a hop that can never
	// be published must not cost the step's side effects first.
	if slip, err = f.resolve(slip, arrived, form); err != nil {
		return broker.Reject(broker.Fatal(fmt.Errorf("follow slip at %q: %w", current.Name, err)))
	}
	payload, err := f.step(ctx, m)
	if err != nil {
		return stepFailed(current.Name, err)
	}
	end, err := ending(payload)
	if err != nil {
		return stepFailed(current.Name, broker.Fatal(err))
	}
	next := slip.Advance(time.Now())
	if next.Finished() {
		f.left(ctx, m, current.Name, PipelineCompleted)
		return broker.Accept()
	}
	if end {
		f.left(ctx, m, current.Name, PipelineEndedEarly)
		return broker.Accept()
	}
	to, _ := next.NextStep()
	out, err := f.hop(ctx, m, next, form, payload)
	if err != nil {
		return broker.Reject(broker.Fatal(&HopError{Step: current.Name, To: fmt.Sprintf("step %q", to.Name), Err: err}))
	}
	return onward(ctx, f.conn, current.Name, out)
}

// resolve checks that slip can be written onward in form. Anything but
// a slip staying a slip is resolved against the pipeline: every step must
// be one of its steps, and goes to its exchange under the step's name,
// because a route carries names and no destinations.
func (f *slipFollower) resolve(slip *RoutingSlip, arrived, form Form) (*RoutingSlip, error) {
	if arrived == Slip && form == Slip {
		return slip, nil
	}
	p := f.pipeline
	if p == nil {
		return nil, ErrNoPipeline
	}
	out := slip.clone()
	out.forgetRaw()
	for _, steps := range [][]SlipStep{out.done, out.itinerary} {
		for i := range steps {
			if !p.Has(steps[i].Name) {
				return nil, fmt.Errorf("%w: %q is not a step of pipeline %q", ErrUnknownStep, steps[i].Name, p.name)
			}
			steps[i].Exchange, steps[i].RoutingKey = p.name, steps[i].Name
		}
	}
	return out, nil
}

// slipDropped are the input's headers a hop does not carry besides the
// broker's own dead-lettering record (broker.StripBrokerHeaders): a trace
// context the hop's own publish replaces, a replay's stamps (the hop is a
// new message, never replayed) and the slip, which the hop writes afresh
// in its own form.
var slipDropped = []string{
	"traceparent", "tracestate",
	broker.HeaderReplayedFrom, broker.HeaderReplayedAt, broker.HeaderReplayCount,
	broker.HeaderRoutingSlip,
}

// hop builds the next message of the run: the contract's hop rules.
func (f *slipFollower) hop(ctx context.Context, m *broker.Message, next *RoutingSlip, form Form, payload any) (broker.Outgoing, error) {
	to := next.itinerary[0]
	headers := m.Headers.Clone()
	broker.StripBrokerHeaders(headers)
	for _, h := range slipDropped {
		delete(headers, h)
	}
	runID := m.RunID
	if runID == "" {
		// A run started by something that gave it no id gets one here, so
		// every later hop can be followed as one run.
		runID = broker.NewID()
	}
	opts := []broker.PublishOption{
		broker.ToExchange(to.Exchange), broker.To(to.RoutingKey), broker.Mandatory(),
		broker.CausedBy(m), broker.RunID(runID), broker.FirstSeen(m.FirstSeen),
		broker.Headers(headers),
	}
	if form == Route {
		names := make([]string, 0, len(next.done)+len(next.itinerary))
		for _, st := range next.done {
			names = append(names, st.Name)
		}
		for _, st := range next.itinerary {
			names = append(names, st.Name)
		}
		opts = append(opts, broker.Route(names, len(next.done)))
	} else {
		header, err := json.Marshal(next)
		if err != nil {
			return broker.Outgoing{}, err
		}
		opts = append(opts, broker.Header(broker.HeaderRoutingSlip, string(header)))
	}
	return f.conn.Prepare(ctx, payload, opts...)
}

// left records a run leaving a pipeline; a bare slip reports nothing,
// having no pipeline name to report under.
func (f *slipFollower) left(ctx context.Context, m *broker.Message, step, outcome string) {
	if f.metrics == nil {
		return
	}
	f.metrics.left(ctx, f.pipeline.name, step, outcome, time.Since(m.FirstSeen))
}
