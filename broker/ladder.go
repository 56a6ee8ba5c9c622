package broker

import (
	"slices"
	"time"
)

// DefaultLadder is the name of the scheduler ladder every AceMQ library
// shares: its exchange, and the prefix of its queues.
const DefaultLadder = "acemq.schedule"

// Rung is one queue of the ladder: every message in it waits TTL.
type Rung struct {
	Suffix string
	TTL    time.Duration
}

// rungs are the ladder's queues, longest first (docs/wire.md). Unexported
// so that nothing can change the contract's ladder under a running
// control consumer; LadderRungs hands out a copy.
var rungs = [...]Rung{
	{".1h", time.Hour},
	{".10m", 10 * time.Minute},
	{".1m", time.Minute},
	{".10s", 10 * time.Second},
	{".1s", time.Second},
}

// ShortestRung is the TTL of the ladder's smallest rung: the accuracy of
// every delay the ladder carries.
const ShortestRung = time.Second

// LadderRungs returns the ladder's rungs, longest first (a copy).
func LadderRungs() []Rung { return slices.Clone(rungs[:]) }

// DueSuffix names the ladder's control queue.
const DueSuffix = ".due"

// LadderTopology is the ladder named name (DefaultLadder for the contract's
// own names): a direct exchange, a quorum queue per rung whose uniform TTL
// dead-letters into the control queue (at-least-once, so an expiring message
// cannot be lost between rung and control queue), and the control queue.
// Every queue is bound to the exchange under its own name.
func LadderTopology(name string) Topology {
	t := Topology{Exchanges: []Exchange{{Name: name, Kind: "direct", Durable: true}}}
	for _, r := range rungs {
		q := QuorumQueue(name+r.Suffix, Table{
			"x-message-ttl":             r.TTL.Milliseconds(),
			"x-dead-letter-exchange":    name,
			"x-dead-letter-routing-key": name + DueSuffix,
			"x-dead-letter-strategy":    "at-least-once",
			"x-overflow":                "reject-publish",
		})
		t.Queues = append(t.Queues, q)
	}
	t.Queues = append(t.Queues, QuorumQueue(name+DueSuffix, nil))
	for _, q := range t.Queues {
		t.Bindings = append(t.Bindings, Binding{Queue: q.Name, Exchange: name, Key: q.Name})
	}
	return t
}

// DueMillis is due as the schedule headers carry it: whole milliseconds
// since the epoch, rounded up, so that nothing that waits for it is
// released before due (rounded down, a message would be up to a
// millisecond early).
func DueMillis(due time.Time) int64 {
	ms := due.UnixMilli()
	if due.After(time.UnixMilli(ms)) {
		ms++
	}
	return ms
}

// RungFor is the queue suffix a message with remaining time to wait goes
// into: the largest rung that does not overshoot, the one-second rung for
// less than a second, and the control queue when it is already due. A
// message is therefore never delivered early, and at most about a second
// late.
func RungFor(remaining time.Duration) string {
	if remaining <= 0 {
		return DueSuffix
	}
	for _, r := range rungs {
		if r.TTL <= remaining {
			return r.Suffix
		}
	}
	return rungs[len(rungs)-1].Suffix
}
