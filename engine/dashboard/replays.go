package dashboard

import (
	"context"
	"crypto/rand"
	"errors"
	"fmt"
	"sync"
	"time"

	"github.com/acemq/acemq-flow/engine"
)

// keptReplays is how many finished group replays the dashboard keeps, for
// their pages.
const keptReplays = 20

// errClosed: a group replay asked for once the dashboard was closed.
var errClosed = errors.New("the dashboard is closing")

// groupReplay is one group replay, carried out in the background by
// engine.ReplayBulk: one pass over the group's dead-letter queue, however
// many runs. Its page polls it until it is done.
type groupReplay struct {
	ID    string
	Group group
	// Runs are the runs asked for, as the confirm page listed them.
	Runs    []string
	Started time.Time
	done    chan struct{}

	mu sync.Mutex
	// counts are the counts so far; res and err what it came to, once
	// done is closed.
	counts replayCounts
	res    engine.BulkResult
	err    error
	ended  time.Time
}

// replayCounts are a group replay's counts while it runs.
type replayCounts struct {
	Replayed, NotFound, NotFailed int
	// Chosen says the runs were looked up and their messages are being
	// moved.
	Chosen bool
}

// Done is how many of the runs asked for were decided.
func (c replayCounts) Done() int { return c.Replayed + c.NotFound + c.NotFailed }

// progress keeps the counts of r (not its lists, which the replay goes on
// changing).
func (g *groupReplay) progress(r engine.BulkResult) {
	g.mu.Lock()
	g.counts = replayCounts{Replayed: len(r.Replayed), NotFound: len(r.NotFound), NotFailed: len(r.NotFailed), Chosen: g.counts.Chosen}
	g.mu.Unlock()
}

// chosen marks the runs looked up.
func (g *groupReplay) chosen(r engine.BulkResult) {
	g.progress(r)
	g.mu.Lock()
	g.counts.Chosen = true
	g.mu.Unlock()
}

// snapshot is the replay's counts and, once it is done, what it came to.
func (g *groupReplay) snapshot() (counts replayCounts, res engine.BulkResult, err error, ended time.Time, finished bool) {
	select {
	case <-g.done:
		finished = true
	default:
	}
	g.mu.Lock()
	defer g.mu.Unlock()
	return g.counts, g.res, g.err, g.ended, finished
}

// replays are a dashboard's group replays: at most one running (two
// passes over one dead-letter queue would hand each other's messages
// back), and the last keptReplays finished.
type replays struct {
	ctx    context.Context
	cancel context.CancelFunc
	wg     sync.WaitGroup

	mu      sync.Mutex
	closed  bool
	running *groupReplay
	byID    map[string]*groupReplay
	// order is the finished replays, oldest first.
	order []string
}

func newReplays() *replays {
	ctx, cancel := context.WithCancel(context.Background())
	return &replays{ctx: ctx, cancel: cancel, byID: map[string]*groupReplay{}}
}

// start starts replaying runs of g with eng in the background, bounded by
// timeout, and returns the replay. One already running is returned
// instead, with started false.
func (rs *replays) start(eng *engine.Engine, g group, runs []string, timeout time.Duration, finished func(*groupReplay)) (*groupReplay, bool, error) {
	rs.mu.Lock()
	defer rs.mu.Unlock()
	if rs.closed {
		return nil, false, errClosed
	}
	if rs.running != nil {
		return rs.running, false, nil
	}
	gr := &groupReplay{ID: rand.Text(), Group: g, Runs: runs, Started: time.Now(), done: make(chan struct{})}
	rs.running, rs.byID[gr.ID] = gr, gr
	rs.wg.Go(func() {
		ctx, cancel := context.WithTimeout(rs.ctx, timeout)
		defer cancel()
		res, err := eng.ReplayBulk(ctx, engine.BulkReplay{RunIDs: runs, Selected: gr.chosen, Progress: gr.progress})
		gr.mu.Lock()
		gr.res, gr.err, gr.ended = res, err, time.Now()
		gr.counts = replayCounts{Replayed: len(res.Replayed), NotFound: len(res.NotFound), NotFailed: len(res.NotFailed), Chosen: true}
		gr.mu.Unlock()
		close(gr.done)
		rs.finish(gr)
		finished(gr)
	})
	return gr, true, nil
}

// finish moves gr from running to the finished ones, forgetting the
// oldest beyond keptReplays.
func (rs *replays) finish(gr *groupReplay) {
	rs.mu.Lock()
	defer rs.mu.Unlock()
	rs.running = nil
	rs.order = append(rs.order, gr.ID)
	if len(rs.order) > keptReplays {
		delete(rs.byID, rs.order[0])
		rs.order = rs.order[1:]
	}
}

// get is the replay of that id, running or kept.
func (rs *replays) get(id string) (*groupReplay, bool) {
	rs.mu.Lock()
	defer rs.mu.Unlock()
	gr, ok := rs.byID[id]
	return gr, ok
}

// current is the replay running, if any.
func (rs *replays) current() *groupReplay {
	rs.mu.Lock()
	defer rs.mu.Unlock()
	return rs.running
}

// close refuses new replays, stops the running one and waits for it until
// ctx ends.
func (rs *replays) close(ctx context.Context) error {
	rs.mu.Lock()
	rs.closed = true
	rs.mu.Unlock()
	rs.cancel()
	done := make(chan struct{})
	// Ends with the replay, which stops between two messages now that its
	// context is cancelled, also when ctx ends first.
	go func() {
		rs.wg.Wait()
		close(done)
	}()
	select {
	case <-done:
		return nil
	case <-ctx.Done():
		return fmt.Errorf("dashboard: close: a group replay is still stopping: %w", ctx.Err())
	}
}
