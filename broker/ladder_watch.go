package broker

import (
	"context"
	"log/slog"
	"time"

	"github.com/acemq/acemq-flow/broker/transport"
)

// The rung watch: every watchInterval the control side looks at the head
// of each rung, and moves on a message that sat there stuckGrace past its
// due time. A message leaves its rung by its due time at the latest (it is
// put in a rung no longer than the time left), so one still there is one
// the broker did not expire: RabbitMQ 3.10 quorum queues were seen to keep
// a few messages of a rung for minutes after their TTL, ready and
// unexpired, until something touched the queue (make chaos, scenario 3;
// rabbitmq-server#10718 describes the same). Without the watch such a
// message is as good as lost to its run.
const (
	watchInterval = 5 * time.Second
	stuckGrace    = 5 * time.Second
	// watchBatch bounds the stuck messages one look moves per rung.
	watchBatch = 256
)

// watch runs until ctx ends, looking at the rungs every watchInterval.
func (l *ladder) watch(ctx context.Context) {
	t := time.NewTicker(watchInterval)
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		}
		for _, r := range rungs {
			if n := l.unstick(ctx, l.name+r.Suffix, time.Now()); n > 0 {
				l.conn.log.Warn("ladder: moved on messages the broker kept in a rung past their due time",
					slog.String("ladder", l.name), slog.String("rung", r.Suffix), slog.Int("messages", n))
			}
		}
	}
}

// unstick moves on the messages at the head of rung that are stuckGrace
// past due at now, and says how many it moved. It stops at the first head
// that is not: the rung's messages leave it in the order they came.
func (l *ladder) unstick(ctx context.Context, rung string, now time.Time) int {
	moved := 0
	for moved < watchBatch {
		if st, err := l.conn.transport.Inspect(ctx, rung); err != nil || st.Messages == 0 {
			return moved
		}
		d, err := l.conn.transport.Get(ctx, rung)
		if err != nil || d == nil {
			return moved
		}
		dueMs, ok := transport.Int(d.Headers[HeaderScheduleDueAt])
		if ok && now.Sub(time.UnixMilli(dueMs)) <= stuckGrace {
			// On time: put it back where it was, at the head.
			if err := d.Nack(true); err != nil {
				l.conn.log.Debug("ladder watch: put back", slog.String("rung", rung), slog.Any("error", err))
			}
			return moved
		}
		l.unstuck.Add(1)
		l.move(ctx, d)
		moved++
	}
	return moved
}
