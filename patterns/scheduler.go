package patterns

import (
	"context"
	"fmt"
	"sync/atomic"
	"time"

	"github.com/acemq/acemq-flow/broker"
)

// Scheduler delivers messages later with no plugin and no scheduler
// process: on the connection's scheduler ladder of uniform-TTL queues
// (docs/wire.md), a message is never delivered early and, with a running
// control consumer and no backlog, at most about a second late.
//
// The payload is encoded once, when it is scheduled, and carried as bytes;
// its content type is put back on the message finally delivered and
// nothing of the ladder's headers reaches the handler. A due message whose
// destination nothing is bound to yet goes round the one-second rung until
// something is.
type Scheduler struct {
	conn      *broker.Conn
	scheduled atomic.Int64
}

// SchedulerStats counts what a scheduler and its connection's ladder did.
type SchedulerStats struct {
	// Scheduled is messages handed to this scheduler and accepted by the
	// ladder.
	Scheduled int64
	// Delivered is messages the connection's ladder delivered to their
	// destination; Hops is times it moved one between rungs (Hops /
	// Delivered is the average). Both count everything this connection's
	// control consumer moved, retries included, since the ladder is one.
	Delivered int64
	Hops      int64
	// Malformed is messages found in the control queue without the
	// schedule headers and dropped: not zero only when something other
	// than a scheduler publishes into the ladder.
	Malformed int64
}

// NewScheduler returns a scheduler publishing through conn. It does not
// start the ladder's control consumer (Start does), so scheduling on one
// process and delivering from another works.
func NewScheduler(conn *broker.Conn) *Scheduler { return &Scheduler{conn: conn} }

// In schedules payload for delivery after d on the connection's clock (at
// once when d <= 0), to the destination dest names (broker.To,
// broker.ToExchange) with any other publish options. It returns once the
// ladder has confirmed the message.
func (s *Scheduler) In(ctx context.Context, d time.Duration, payload any, dest ...broker.PublishOption) error {
	now := time.Now()
	if s.conn != nil {
		now = s.conn.Clock().Now()
	}
	return s.At(ctx, now.Add(d), payload, dest...)
}

// At schedules payload for delivery at t (at once when t has passed); see
// In. A zero t, almost certainly a mistake, is refused with an error
// matching broker.ErrInvalidOption.
func (s *Scheduler) At(ctx context.Context, t time.Time, payload any, dest ...broker.PublishOption) error {
	if s.conn == nil {
		return fmt.Errorf("schedule: %w: nil connection", broker.ErrInvalidOption)
	}
	if t.IsZero() {
		return fmt.Errorf("schedule: %w: zero time", broker.ErrInvalidOption)
	}
	out, err := s.conn.Prepare(ctx, payload, dest...)
	if err != nil {
		return fmt.Errorf("schedule: %w", err)
	}
	if err := s.conn.Schedule(ctx, t, out); err != nil {
		return fmt.Errorf("schedule for %s: %w", t.Format(time.RFC3339), err)
	}
	s.scheduled.Add(1)
	return nil
}

// Declare declares the ladder's exchange and queues without starting a
// consumer, for a deployment that applies its topology up front.
func (s *Scheduler) Declare(ctx context.Context) error {
	if s.conn == nil {
		return fmt.Errorf("declare scheduler: %w: nil connection", broker.ErrInvalidOption)
	}
	return s.conn.DeclareLadder(ctx)
}

// Start declares the ladder and starts the connection's control consumer,
// which moves due messages on to their destinations until the connection
// closes. Idempotent.
func (s *Scheduler) Start(ctx context.Context) error {
	if s.conn == nil {
		return fmt.Errorf("start scheduler: %w: nil connection", broker.ErrInvalidOption)
	}
	return s.conn.RunLadder(ctx)
}

// Stats reports the scheduler's counters.
func (s *Scheduler) Stats() SchedulerStats {
	st := SchedulerStats{Scheduled: s.scheduled.Load()}
	if s.conn != nil {
		ls := s.conn.LadderStats()
		st.Delivered, st.Hops, st.Malformed = ls.Delivered, ls.Hops, ls.Malformed
	}
	return st
}
