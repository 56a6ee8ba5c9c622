package patterns

import (
	"context"
	"encoding/json"
	"fmt"
	"strings"
	"time"

	"github.com/acemq/acemq-flow/broker"
)

// SlipStep is one stop of a routing slip: a name for people and metrics,
// and the exchange and routing key the message is published to for it. At
// is when the step finished; it is zero for a step still on the itinerary.
type SlipStep struct {
	Name       string
	Exchange   string
	RoutingKey string
	At         time.Time
}

// String is the step's name.
func (s SlipStep) String() string { return s.Name }

// RoutingSlip is an itinerary that travels with a message in the
// acemq-routing-slip header: the steps still to run (the first is the one
// the message is at or going to) and the steps done, each stamped with the
// time it finished.
//
// Building a slip with Step mutates it and returns it, so the calls chain;
// Advance returns a copy, because once a slip is on a message it must not
// change under a handler.
type RoutingSlip struct {
	itinerary []SlipStep
	done      []SlipStep
	// rawItinerary and rawDone are, for a slip read from a message, each
	// step exactly as it arrived (nil for a step changed or added since):
	// a slip passed on is written back as it came, never inflated with
	// fields its writer left out (a 114 KB slip rewritten in full once grew
	// to 270 KB and no longer fitted in a frame).
	rawItinerary []json.RawMessage
	rawDone      []json.RawMessage
	err          error
}

// NewRoutingSlip returns an empty slip to build with Step.
func NewRoutingSlip() *RoutingSlip { return &RoutingSlip{} }

// Step appends a stop that publishes to exchange with routingKey, named
// name (the routing key when name is empty), and returns the slip. A step
// without a routing key is remembered as an error that Start and Validate
// report, so that a chain of calls need not stop to check each one.
func (s *RoutingSlip) Step(name, exchange, routingKey string) *RoutingSlip {
	if name == "" {
		name = routingKey
	}
	if routingKey == "" && s.err == nil {
		s.err = fmt.Errorf("%w: step %d (%q) has no routing key", ErrInvalidSlip, len(s.itinerary)+len(s.done), name)
	}
	s.itinerary = append(s.itinerary, SlipStep{Name: name, Exchange: exchange, RoutingKey: routingKey})
	return s
}

// Validate says what is wrong with a slip built by hand: a step without a
// routing key, or no step at all.
func (s *RoutingSlip) Validate() error {
	if s.err != nil {
		return s.err
	}
	if len(s.itinerary) == 0 {
		return fmt.Errorf("%w: the itinerary is empty", ErrInvalidSlip)
	}
	return nil
}

// Advance returns a copy of the slip with its current step moved to done,
// stamped at. A finished slip is returned as an unchanged copy.
func (s *RoutingSlip) Advance(at time.Time) *RoutingSlip {
	out := s.clone()
	if len(out.itinerary) == 0 {
		return out
	}
	step := out.itinerary[0]
	step.At = at
	out.done = append(out.done, step)
	out.itinerary = out.itinerary[1:]
	if out.rawItinerary != nil {
		// The step now done gains its time, so it is written afresh.
		out.rawDone = append(out.rawDone, nil)
		out.rawItinerary = out.rawItinerary[1:]
	}
	return out
}

func (s *RoutingSlip) clone() *RoutingSlip {
	return &RoutingSlip{
		itinerary:    append([]SlipStep(nil), s.itinerary...),
		done:         append([]SlipStep(nil), s.done...),
		rawItinerary: append([]json.RawMessage(nil), s.rawItinerary...),
		rawDone:      append([]json.RawMessage(nil), s.rawDone...),
		err:          s.err,
	}
}

// forgetRaw drops what the slip remembers of how its steps arrived: for a
// slip whose steps were changed (resolved against a pipeline).
func (s *RoutingSlip) forgetRaw() { s.rawItinerary, s.rawDone = nil, nil }

// Done is the steps completed so far, in order (a copy).
func (s *RoutingSlip) Done() []SlipStep { return append([]SlipStep(nil), s.done...) }

// Itinerary is the steps still to run, the current one first (a copy).
func (s *RoutingSlip) Itinerary() []SlipStep { return append([]SlipStep(nil), s.itinerary...) }

// NextStep is the step the message is at or going to, and false when the
// slip is finished.
func (s *RoutingSlip) NextStep() (SlipStep, bool) {
	if len(s.itinerary) == 0 {
		return SlipStep{}, false
	}
	return s.itinerary[0], true
}

// Finished reports whether every step has run.
func (s *RoutingSlip) Finished() bool { return len(s.itinerary) == 0 }

// String renders the slip for a person reading a log or a dead-letter
// queue: "RoutingSlip[done: validate -> charge | next: ship]", with "-" for
// an empty side.
func (s *RoutingSlip) String() string {
	return "RoutingSlip[done: " + slipNames(s.done) + " | next: " + slipNames(s.itinerary) + "]"
}

func slipNames(steps []SlipStep) string {
	if len(steps) == 0 {
		return "-"
	}
	names := make([]string, len(steps))
	for i, st := range steps {
		names[i] = st.Name
	}
	return strings.Join(names, " -> ")
}

// slipWire is the acemq-routing-slip JSON shape of docs/wire.md.
type slipWire struct {
	Itinerary []slipWireStep `json:"itinerary"`
	Done      []slipWireStep `json:"done"`
}

type slipWireStep struct {
	Name       string `json:"name"`
	Exchange   string `json:"exchange"`
	RoutingKey string `json:"routing_key"`
	At         *int64 `json:"at,omitempty"`
}

// MarshalJSON writes the slip as the acemq-routing-slip header carries it,
// `at` in epoch milliseconds on the done steps (0 for a step whose time is
// not known, one that was read from x-acemq-route). A step of a slip read
// from a message is written back exactly as it arrived, unless it changed.
func (s *RoutingSlip) MarshalJSON() ([]byte, error) {
	w := slipWireRaw{Itinerary: make([]json.RawMessage, len(s.itinerary)), Done: make([]json.RawMessage, len(s.done))}
	for i, st := range s.itinerary {
		if raw := rawAt(s.rawItinerary, i); raw != nil {
			w.Itinerary[i] = raw
			continue
		}
		b, err := json.Marshal(slipWireStep{Name: st.Name, Exchange: st.Exchange, RoutingKey: st.RoutingKey})
		if err != nil {
			return nil, err
		}
		w.Itinerary[i] = b
	}
	for i, st := range s.done {
		if raw := rawAt(s.rawDone, i); raw != nil {
			w.Done[i] = raw
			continue
		}
		// A step read from x-acemq-route has no finishing time; 0 says so.
		var at int64
		if !st.At.IsZero() {
			at = st.At.UnixMilli()
		}
		b, err := json.Marshal(slipWireStep{Name: st.Name, Exchange: st.Exchange, RoutingKey: st.RoutingKey, At: &at})
		if err != nil {
			return nil, err
		}
		w.Done[i] = b
	}
	return json.Marshal(w)
}

// slipWireRaw is slipWire with each step already encoded.
type slipWireRaw struct {
	Itinerary []json.RawMessage `json:"itinerary"`
	Done      []json.RawMessage `json:"done"`
}

func rawAt(raw []json.RawMessage, i int) json.RawMessage {
	if i < len(raw) {
		return raw[i]
	}
	return nil
}

// UnmarshalJSON reads the acemq-routing-slip JSON any AceMQ library
// writes. A step without a routing key, or done without `at`, is refused
// with an error matching ErrInvalidSlip.
func (s *RoutingSlip) UnmarshalJSON(data []byte) error {
	var raw slipWireRaw
	if err := json.Unmarshal(data, &raw); err != nil {
		return fmt.Errorf("%w: %v", ErrInvalidSlip, err)
	}
	w := slipWire{Itinerary: make([]slipWireStep, len(raw.Itinerary)), Done: make([]slipWireStep, len(raw.Done))}
	for i, r := range raw.Itinerary {
		if err := json.Unmarshal(r, &w.Itinerary[i]); err != nil {
			return fmt.Errorf("%w: itinerary step %d: %v", ErrInvalidSlip, i, err)
		}
	}
	for i, r := range raw.Done {
		if err := json.Unmarshal(r, &w.Done[i]); err != nil {
			return fmt.Errorf("%w: done step %d: %v", ErrInvalidSlip, i, err)
		}
	}
	out := RoutingSlip{
		itinerary: make([]SlipStep, len(w.Itinerary)), done: make([]SlipStep, len(w.Done)),
		rawItinerary: raw.Itinerary, rawDone: raw.Done,
	}
	for i, st := range w.Itinerary {
		if st.RoutingKey == "" {
			return fmt.Errorf("%w: itinerary step %d (%q) has no routing key", ErrInvalidSlip, i, st.Name)
		}
		out.itinerary[i] = SlipStep{Name: slipName(st), Exchange: st.Exchange, RoutingKey: st.RoutingKey}
	}
	for i, st := range w.Done {
		if st.At == nil {
			return fmt.Errorf("%w: done step %d (%q) has no time", ErrInvalidSlip, i, st.Name)
		}
		out.done[i] = SlipStep{Name: slipName(st), Exchange: st.Exchange, RoutingKey: st.RoutingKey}
		if *st.At != 0 {
			out.done[i].At = time.UnixMilli(*st.At)
		}
	}
	*s = out
	return nil
}

// slipName falls back to the routing key for a step another library wrote
// without a name, as Step does.
func slipName(st slipWireStep) string {
	if st.Name != "" {
		return st.Name
	}
	return st.RoutingKey
}

// Start publishes payload to the slip's first step with the slip in the
// acemq-routing-slip header and a new run id, and returns the run id. It
// is the caller's own publish: opts are publish options (broker.Mandatory,
// broker.Type, a broker.RunID of the caller's choosing, ...) and publish's
// defaults apply. A slip that does not Validate is refused.
func (s *RoutingSlip) Start(ctx context.Context, conn *broker.Conn, payload any, opts ...broker.PublishOption) (string, error) {
	if err := s.Validate(); err != nil {
		return "", fmt.Errorf("start slip: %w", err)
	}
	if conn == nil {
		return "", fmt.Errorf("start slip: %w: nil connection", broker.ErrInvalidOption)
	}
	header, err := json.Marshal(s)
	if err != nil {
		return "", fmt.Errorf("start slip: %w", err)
	}
	first := s.itinerary[0]
	all := append([]broker.PublishOption{
		broker.ToExchange(first.Exchange), broker.To(first.RoutingKey),
		broker.Header(broker.HeaderRoutingSlip, string(header)), broker.RunID(broker.NewID()),
	}, opts...)
	runID, err := slipSend(ctx, conn, payload, all)
	if err != nil {
		return "", fmt.Errorf("start slip at %q: %w", first.Name, err)
	}
	return runID, nil
}
