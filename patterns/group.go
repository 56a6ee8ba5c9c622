package patterns

import (
	"context"
	"errors"
	"fmt"
	"sync"

	"github.com/acemq/acemq-flow/broker"
)

// ConsumerGroup is several consumers of one queue, each with its own
// channel and prefetch, started and stopped together. Reach for one over
// broker.Concurrency when one channel's prefetch is the limit, or for a
// fair share against consumers in other processes (the broker round-robins
// between consumers, not between handlers).
type ConsumerGroup struct {
	conn    *broker.Conn
	queue   string
	members []*broker.Consumer

	closeOnce sync.Once
	closeErr  error
}

// NewConsumerGroup starts size consumers of queue, each handling with h and
// each given opts (Prefetch, WithRetry, WithCodec, ... apply per member).
// ctx bounds the start. If a member will not start, the ones already
// running are stopped before the error is returned: a half-started group
// would hold messages nothing handles. It refuses a size below 1 and a nil
// handler (broker.ErrInvalidOption).
func NewConsumerGroup(ctx context.Context, conn *broker.Conn, queue string, size int, h broker.Handler, opts ...broker.ConsumeOption) (*ConsumerGroup, error) {
	if conn == nil || h == nil || size < 1 {
		return nil, fmt.Errorf("%w: consumer group of %q: need a connection, a handler and a size of at least 1 (got %d)", broker.ErrInvalidOption, queue, size)
	}
	g := &ConsumerGroup{conn: conn, queue: queue, members: make([]*broker.Consumer, 0, size)}
	for i := range size {
		k, err := conn.Consume(ctx, queue, h, opts...)
		if err != nil {
			startErr := fmt.Errorf("consumer group of %q: member %d of %d did not start: %w", queue, i+1, size, err)
			// ctx may be what ran out; the stop gets a deadline of its own.
			return nil, errors.Join(startErr, g.stop(context.WithoutCancel(ctx)))
		}
		g.members = append(g.members, k)
	}
	return g, nil
}

// Queue is the queue the group consumes.
func (g *ConsumerGroup) Queue() string { return g.queue }

// Size is the number of members.
func (g *ConsumerGroup) Size() int { return len(g.members) }

// Wait blocks until every member has stopped and its handlers returned
// (after Close, or once the connection closes), or ctx ends.
func (g *ConsumerGroup) Wait(ctx context.Context) error {
	for i, k := range g.members {
		select {
		case <-k.Done():
		case <-ctx.Done():
			return fmt.Errorf("consumer group of %q: waiting for member %d: %w", g.queue, i+1, ctx.Err())
		}
	}
	return nil
}

// Close stops every member at once: each stops taking deliveries, lets its
// in-flight handlers finish and settles them. One deadline bounds the whole
// group, not each member: ctx's, or the connection's CloseTimeout when ctx
// has none. Every member is stopped even when one refuses; the refusals are
// returned together afterwards. Idempotent.
func (g *ConsumerGroup) Close(ctx context.Context) error {
	g.closeOnce.Do(func() { g.closeErr = g.stop(ctx) })
	return g.closeErr
}

// stop cancels every member concurrently under one deadline.
func (g *ConsumerGroup) stop(ctx context.Context) error {
	if _, ok := ctx.Deadline(); !ok {
		var cancel context.CancelFunc
		ctx, cancel = context.WithTimeout(ctx, g.conn.Config().CloseTimeout)
		defer cancel()
	}
	errs := make([]error, len(g.members))
	var wg sync.WaitGroup
	for i, k := range g.members {
		wg.Go(func() {
			if err := k.Cancel(ctx); err != nil {
				errs[i] = fmt.Errorf("consumer group of %q: member %d: %w", g.queue, i+1, err)
			}
		})
	}
	wg.Wait()
	return errors.Join(errs...)
}
