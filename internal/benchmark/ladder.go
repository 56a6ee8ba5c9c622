package benchmark

import (
	"context"
	"encoding/json"
	"fmt"
	"time"

	"github.com/acemq/acemq-flow/broker"
	"github.com/acemq/acemq-flow/patterns"
)

// LadderPublishers is how many goroutines schedule the ladder figure's
// messages.
const LadderPublishers = 16

// ladderPayload is a delayed message: when it is due, in Unix nanoseconds.
type ladderPayload struct {
	Due int64 `json:"due"`
}

// Ladder measures how late delayed messages arrive through the scheduler
// ladder (arrival minus due time; never early by design, and at most about
// a second late without a backlog) against one queue whose fixed TTL
// dead-letters to the destination, the plain way to delay by one fixed
// time. N/5 messages are scheduled evenly over LadderDelay, each due
// between half and one and a half LadderDelay later; the baseline's
// messages all wait LadderDelay.
func Ladder(ctx context.Context, cfg Config) ([]Result, error) {
	cfg, err := cfg.withDefaults()
	if err != nil {
		return nil, err
	}
	cfg.step("ladder: delayed messages through the scheduler ladder")
	lad, err := LadderLateness(ctx, cfg)
	if err != nil {
		return nil, err
	}
	cfg.step("ladder: delayed messages through a TTL queue")
	ttl, err := TTLLateness(ctx, cfg)
	if err != nil {
		return nil, err
	}
	baseline := fmt.Sprintf("%s TTL queue", cfg.LadderDelay)
	note := fmt.Sprintf("arrival minus due time, delays from %s to %s; %s: one queue whose TTL dead-letters to the destination",
		cfg.LadderDelay/2, cfg.LadderDelay*3/2, baseline)
	return []Result{
		figure("ladder", "ladder lateness p50", "ms", LowerIsBetter, Millis(lad.Percentile(0.50)), lad).withCPU(lad).
			compare(baseline, Millis(ttl.Percentile(0.50)), ttl, true).noted(note),
		figure("ladder", "ladder lateness p99", "ms", LowerIsBetter, Millis(lad.Percentile(0.99)), lad).
			compare(baseline, Millis(ttl.Percentile(0.99)), ttl, false),
	}, nil
}

// ladderCount is how many messages the ladder figures delay.
func ladderCount(cfg Config) int { return max(1, cfg.N/5) }

// LadderLateness schedules N/5 messages on a ladder of its own (delays as
// Ladder says) and measures how late each reaches its destination.
func LadderLateness(ctx context.Context, cfg Config) (_ Measurement, err error) {
	cfg, s, err := newScope(ctx, cfg)
	if err != nil {
		return Measurement{}, err
	}
	defer s.close(ctx, &err)
	conn, err := s.open(ctx)
	if err != nil {
		return Measurement{}, err
	}
	sched := patterns.NewScheduler(conn)
	if err := sched.Start(ctx); err != nil {
		return Measurement{}, fmt.Errorf("start the ladder: %w", err)
	}
	dest, err := s.consumerQueue(ctx, "delayed")
	if err != nil {
		return Measurement{}, err
	}
	n := ladderCount(cfg)
	return lateness(ctx, s, conn, dest, n, cfg.LadderDelay, "delayed messages through the ladder",
		func(ctx context.Context, i int) error {
			delay := cfg.LadderDelay/2 + time.Duration(int64(cfg.LadderDelay)*int64((i*7919)%n)/int64(n))
			due := time.Now().Add(delay)
			if err := sched.At(ctx, due, ladderPayload{Due: due.UnixNano()}, broker.To(dest)); err != nil {
				return fmt.Errorf("schedule: %w", err)
			}
			return nil
		})
}

// TTLLateness sends N/5 messages, as LadderLateness schedules them, into
// a quorum queue whose TTL of LadderDelay dead-letters them (at least
// once, as the ladder's rungs do) to the destination, and measures how
// late each arrives.
func TTLLateness(ctx context.Context, cfg Config) (_ Measurement, err error) {
	cfg, s, err := newScope(ctx, cfg)
	if err != nil {
		return Measurement{}, err
	}
	defer s.close(ctx, &err)
	conn, err := s.open(ctx)
	if err != nil {
		return Measurement{}, err
	}
	dest, err := s.consumerQueue(ctx, "delayed")
	if err != nil {
		return Measurement{}, err
	}
	wait := s.cfg.name("ttl")
	s.deleteQueues(wait)
	top := broker.Topology{Queues: []broker.Queue{broker.QuorumQueue(wait, broker.Table{
		"x-message-ttl":             cfg.LadderDelay.Milliseconds(),
		"x-dead-letter-exchange":    "",
		"x-dead-letter-routing-key": dest,
		"x-dead-letter-strategy":    "at-least-once",
		"x-overflow":                "reject-publish",
	})}}
	if err := conn.Declare(ctx, top); err != nil {
		return Measurement{}, fmt.Errorf("declare %s: %w", wait, err)
	}
	return lateness(ctx, s, conn, dest, ladderCount(cfg), cfg.LadderDelay, "delayed messages through a TTL queue",
		func(ctx context.Context, _ int) error {
			// The broker counts the TTL from the whole millisecond it
			// received the message in, which is this one or later.
			due := time.Now().Truncate(time.Millisecond).Add(cfg.LadderDelay)
			if err := conn.Publish(ctx, ladderPayload{Due: due.UnixNano()}, broker.To(wait), broker.Mandatory()); err != nil {
				return fmt.Errorf("publish: %w", err)
			}
			return nil
		})
}

// lateness consumes dest and calls send for each of n messages, evenly
// over spread, measuring how late each arrives at dest after the due time
// it carries.
func lateness(ctx context.Context, s *scope, conn *broker.Conn, dest string, n int, spread time.Duration, what string,
	send func(ctx context.Context, i int) error) (Measurement, error) {
	lat, cd := newLatencies(n), newCountdown(n)
	k, err := conn.Consume(ctx, dest, broker.Func(func(_ context.Context, m *broker.Message) error {
		var p ladderPayload
		if err := json.Unmarshal(m.Body, &p); err != nil {
			return broker.Fatal(fmt.Errorf("decode: %w", err))
		}
		lat.add(time.Since(time.Unix(0, p.Due)))
		cd.add()
		return nil
	}), broker.Prefetch(CorePrefetch), broker.Concurrency(4), broker.WithRetry(broker.NoRetry()))
	if err != nil {
		return Measurement{}, fmt.Errorf("consume %s: %w", dest, err)
	}
	s.closing("stop consuming "+dest, k.Cancel)
	start := time.Now()
	return measureCounted(ctx, n, n, LadderPublishers, cd, lat, what, func(ctx context.Context, i int) error {
		// Evenly over spread: message i leaves at start + i*spread/n.
		if err := waitUntil(ctx, start.Add(time.Duration(int64(spread)*int64(i)/int64(n)))); err != nil {
			return err
		}
		return send(ctx, i)
	})
}

// waitUntil returns at t, or with ctx's error when it ends first.
func waitUntil(ctx context.Context, t time.Time) error {
	d := time.Until(t)
	if d <= 0 {
		return nil
	}
	tm := time.NewTimer(d)
	defer tm.Stop()
	select {
	case <-tm.C:
		return nil
	case <-ctx.Done():
		return ctx.Err()
	}
}
