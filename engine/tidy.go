package engine

import (
	"context"
	"log/slog"
	"sync"
	"time"

	"github.com/acemq/acemq-flow/broker"
	"github.com/acemq/acemq-flow/patterns"
)

// How the tidier paces its passes: it gathers what else is asked for in
// tidyGather before a pass, so that one pass over a queue serves every run
// asked for meanwhile; a pass that failed is tried again after tidyRetry.
const (
	tidyGather = time.Second
	tidyRetry  = 5 * time.Second
)

// tidier takes out of dead-letter queues, in the background, the messages
// of runs whose compensation has them since (a hold that ended without a
// replay, a run given up where its handler did not expect it): a
// dead-letter queue holds what needs a person, and nothing else. It is the
// worker's, and stops with it; what it had not done by then stays where it
// is, harmless (a replay of it is refused: its run is compensated).
type tidier struct {
	conn *broker.Conn
	log  *slog.Logger

	mu   sync.Mutex
	want map[string]map[string]struct{} // queue -> run ids
	wake chan struct{}
}

func newTidier(conn *broker.Conn, log *slog.Logger) *tidier {
	return &tidier{conn: conn, log: log, want: map[string]map[string]struct{}{}, wake: make(chan struct{}, 1)}
}

// add asks for the messages of run runID to be taken out of queue.
func (t *tidier) add(queue, runID string) {
	t.mu.Lock()
	runs := t.want[queue]
	if runs == nil {
		runs = map[string]struct{}{}
		t.want[queue] = runs
	}
	runs[runID] = struct{}{}
	t.mu.Unlock()
	select {
	case t.wake <- struct{}{}:
	default:
	}
}

// run makes passes as they are asked for, until ctx ends.
func (t *tidier) run(ctx context.Context) {
	var retry <-chan time.Time
	for {
		select {
		case <-ctx.Done():
			t.abandon()
			return
		case <-t.wake:
		case <-retry:
		}
		retry = nil
		select {
		case <-ctx.Done():
			t.abandon()
			return
		case <-time.After(tidyGather):
		}
		t.mu.Lock()
		want := t.want
		t.want = map[string]map[string]struct{}{}
		t.mu.Unlock()
		for queue, runs := range want {
			if !t.pass(ctx, queue, runs) {
				for id := range runs {
					t.add(queue, id)
				}
				retry = time.After(tidyRetry)
			}
		}
		if retry != nil {
			// A failed pass re-added its runs, which woke the loop: wait
			// for the retry instead.
			select {
			case <-t.wake:
			default:
			}
		}
	}
}

// pass takes the runs' messages out of queue in one pass; false when it
// failed and is to be tried again.
func (t *tidier) pass(ctx context.Context, queue string, runs map[string]struct{}) bool {
	res, err := patterns.Replay(ctx, t.conn, queue, patterns.ReplayDiscard(),
		patterns.ReplayFilter(func(env broker.Envelope, _ []byte) bool {
			_, ok := runs[env.RunID]
			return ok
		}))
	if err != nil {
		if ctx.Err() == nil {
			t.log.Warn("could not take compensated runs' messages out of a dead-letter queue; trying again",
				slog.String("queue", queue), slog.Int("runs", len(runs)), slog.Any("error", err))
		}
		return false
	}
	t.log.Debug("compensated runs' messages taken out of a dead-letter queue", slog.String("queue", queue),
		slog.Int("runs", len(runs)), slog.Int("messages", res.Discarded))
	return true
}

// abandon says what is left undone as the worker stops.
func (t *tidier) abandon() {
	t.mu.Lock()
	defer t.mu.Unlock()
	for queue, runs := range t.want {
		t.log.Info("the messages of compensated runs stay in a dead-letter queue: the worker stopped first; a replay of them is refused, and they can be deleted",
			slog.String("queue", queue), slog.Int("runs", len(runs)))
	}
}
