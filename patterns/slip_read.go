package patterns

import (
	"errors"
	"fmt"

	"github.com/acemq/acemq-flow/broker"
)

// Errors of routing slips and pipelines. A message that fails with one of
// them is given up at once (broker.Fatal): it will not parse next time
// either.
var (
	// ErrInvalidSlip: a routing slip or route header that will not parse,
	// or a slip built without steps.
	ErrInvalidSlip = errors.New("invalid routing slip")
	// ErrNoSlip: the message carries neither acemq-routing-slip nor
	// x-acemq-route.
	ErrNoSlip = errors.New("message carries no routing slip or route")
	// ErrUnknownStep: a step the pipeline does not declare.
	ErrUnknownStep = errors.New("step not in the pipeline")
	// ErrNoPipeline: an x-acemq-route message cannot be sent on without the
	// pipeline that says where its steps are.
	ErrNoPipeline = errors.New("following an x-acemq-route message needs its pipeline")
)

// Form is the shape a slip travels in on the wire.
type Form int

// The forms a follower reads and writes.
const (
	// AsArrived writes a hop in the form its input arrived in: what lets a
	// Go step stand in the middle of a pipeline another library declared.
	AsArrived Form = iota
	// Route writes x-acemq-route, x-acemq-route-position and
	// x-acemq-run-id: the step names only, resolved against a pipeline.
	Route
	// Slip writes the acemq-routing-slip JSON header, which carries each
	// step's exchange and routing key.
	Slip
)

// String names the form.
func (f Form) String() string {
	switch f {
	case AsArrived:
		return "as-arrived"
	case Route:
		return "route"
	case Slip:
		return "slip"
	default:
		return fmt.Sprintf("Form(%d)", int(f))
	}
}

// SlipFrom reads the slip a message carries: the acemq-routing-slip header
// when there is one (a message carrying both forms is read as the slip),
// otherwise x-acemq-route and x-acemq-route-position, whose steps carry
// names only (the routing key is the name; the exchange, the pipeline's
// name, is not on the message and is left empty). A message with neither
// is ErrNoSlip; one that will not parse is ErrInvalidSlip.
func SlipFrom(m *broker.Message) (*RoutingSlip, error) {
	s, _, err := slipRead(m)
	return s, err
}

// slipRead is SlipFrom that also says which form the slip arrived in.
func slipRead(m *broker.Message) (*RoutingSlip, Form, error) {
	if v, ok := m.Headers[broker.HeaderRoutingSlip]; ok {
		var raw []byte
		switch x := v.(type) {
		case string:
			raw = []byte(x)
		case []byte:
			raw = x
		default:
			return nil, Slip, fmt.Errorf("%w: %s is a %T, want a JSON string", ErrInvalidSlip, broker.HeaderRoutingSlip, v)
		}
		s := &RoutingSlip{}
		if err := s.UnmarshalJSON(raw); err != nil {
			return nil, Slip, fmt.Errorf("read %s: %w", broker.HeaderRoutingSlip, err)
		}
		if s.Finished() {
			return nil, Slip, fmt.Errorf("%w: the itinerary is empty, so the message is at no step", ErrInvalidSlip)
		}
		return s, Slip, nil
	}
	if m.Route == nil {
		return nil, AsArrived, ErrNoSlip
	}
	if m.RoutePosition < 0 || m.RoutePosition >= len(m.Route) {
		return nil, Route, fmt.Errorf("%w: %s %d is outside the %d steps of %s",
			ErrInvalidSlip, broker.HeaderRoutePosition, m.RoutePosition, len(m.Route), broker.HeaderRoute)
	}
	s := &RoutingSlip{}
	for i, name := range m.Route {
		if name == "" {
			return nil, Route, fmt.Errorf("%w: step %d of %s is empty", ErrInvalidSlip, i, broker.HeaderRoute)
		}
		st := SlipStep{Name: name, RoutingKey: name}
		if i < m.RoutePosition {
			s.done = append(s.done, st)
		} else {
			s.itinerary = append(s.itinerary, st)
		}
	}
	return s, Route, nil
}
