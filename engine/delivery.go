package engine

import (
	"fmt"

	"github.com/acemq/acemq-flow/broker"
	"github.com/acemq/acemq-flow/broker/transport"
	"github.com/acemq/acemq-flow/engine/journal"
	"github.com/acemq/acemq-flow/patterns"
)

// delivery is one delivery of a run's message as the engine reads it: its
// engine headers decoded once, for the handler, its BeforeSettle function,
// its settle hook and the journal events they build.
type delivery struct {
	m *broker.Message
	// route is the run's steps and pos the index of the one the message
	// is addressed to; slip is the routing slip the run travels as (nil
	// for a declared pipeline).
	route []string
	pos   int
	slip  *patterns.RoutingSlip
	// wire is the route as the message carried it, when route reads steps
	// the flow renamed by their new names (flow.migrate); nil otherwise.
	wire []string
	// replays is how many times the run was replayed (acemq-replay-count).
	replays int
	// returns is how many times the broker took the message back unsettled
	// (x-delivery-count).
	returns int64
	// state is the run's compensation state (acemq-flow-run) on a step's
	// message; comp the compensation's state (acemq-flow-compensation) on a
	// compensation's.
	state runState
	comp  compState
	// held says the message was held back on the ladder (acemq-flow-due);
	// outbox that its run was started in a transaction (acemq-flow-started).
	held, outbox bool
	// branch is the branch of a fork the message is on (acemq-flow-branch),
	// nil on the run's own route.
	branch *branchRef
	// parent is the run a child run returns to (acemq-flow-parent); child
	// what a child run came to, on the message that resumes its parent
	// (acemq-flow-child).
	parent *parentRef
	child  *childResult
	// hold is on the timer of a held branch (acemq-flow-hold).
	hold *holdRef
	// signal is on a message back at a WaitFor (acemq-flow-signal).
	signal *signalRef
	// err says why the message cannot be a run's at all (its run id,
	// route or state unreadable): it is given up as it is.
	err error
}

// readStep reads a step's message.
func readStep(m *broker.Message) delivery {
	d := readCommon(m)
	var err error
	if d.route, d.pos, d.slip, err = position(m); err != nil {
		d.err = err
		return d
	}
	if d.err != nil {
		return d
	}
	if _, err := readJSONHeader(m.Headers, HeaderRun, &d.state); err != nil {
		d.err = err
		return d
	}
	var b branchRef
	if found, err := readJSONHeader(m.Headers, HeaderBranch, &b); err != nil {
		d.err = err
	} else if found {
		d.branch = &b
	}
	var p parentRef
	if found, err := readJSONHeader(m.Headers, HeaderParent, &p); err != nil {
		d.err = err
	} else if found {
		d.parent = &p
	}
	var c childResult
	if found, err := readJSONHeader(m.Headers, HeaderChild, &c); err != nil {
		d.err = err
	} else if found {
		d.child = &c
	}
	var hr holdRef
	if found, err := readJSONHeader(m.Headers, HeaderHold, &hr); err != nil {
		d.err = err
	} else if found {
		d.hold = &hr
	}
	var sr signalRef
	if found, err := readJSONHeader(m.Headers, HeaderSignal, &sr); err != nil {
		d.err = err
	} else if found {
		d.signal = &sr
	}
	return d
}

// at is where the delivery is in its run, for keys that must differ
// between its steps: the replay and the position, and on a branch the
// join and the branch.
func (d *delivery) at() string {
	if d.branch != nil {
		return fmt.Sprintf("%d/%s/%d/%d", d.replays, d.branch.Join, d.branch.Branch, d.pos)
	}
	return fmt.Sprintf("%d/%d", d.replays, d.pos)
}

// stage is the delivery's stage in its run's journal (journal.Seq): its
// position's, or on a branch its fork's.
func (d *delivery) stage() int {
	if d.branch != nil {
		return d.branch.At + 1
	}
	return d.pos + 1
}

// readCompensation reads a compensation's message, which must carry its
// state.
func readCompensation(m *broker.Message) delivery {
	d := readCommon(m)
	if d.err != nil {
		return d
	}
	found, err := readJSONHeader(m.Headers, HeaderCompensation, &d.comp)
	switch {
	case err != nil:
		d.err = err
	case !found:
		d.err = fmt.Errorf("no %s header", HeaderCompensation)
	}
	return d
}

// readCommon reads what every message of a run carries.
func readCommon(m *broker.Message) delivery {
	d := delivery{m: m, replays: replays(m.Headers)}
	d.returns, _ = transport.Int(m.Headers[headerDeliveryCount])
	_, d.held = m.Headers[HeaderDue]
	_, d.outbox = m.Headers[HeaderStarted]
	if m.RunID == "" || !journal.Text(m.RunID) {
		d.err = fmt.Errorf("the message carries no %s that is UTF-8 text", broker.HeaderRunID)
	}
	return d
}

// headerDeliveryCount is how many times a quorum queue took a message back
// unsettled, on each of its redeliveries.
const headerDeliveryCount = "x-delivery-count"

// step is the name of the step the message is addressed to ("" when its
// route could not be read).
// wireRoute is the route as the run writes it on: as its message carried
// it (flow.migrate).
func (d *delivery) wireRoute() []string {
	if d.wire != nil {
		return d.wire
	}
	return d.route
}

// named is the name the run's message gives the step it is at, which is
// step unless the flow renamed it (flow.migrate).
func (d *delivery) named(step string) string {
	if d.wire != nil && d.pos >= 0 && d.pos < len(d.wire) {
		return d.wire[d.pos]
	}
	return step
}

func (d *delivery) step() string {
	if d.pos < 0 || d.pos >= len(d.route) {
		return ""
	}
	return d.route[d.pos]
}
