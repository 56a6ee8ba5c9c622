package persistence

import (
	"context"
	"sync"
	"time"
)

// groupTimeout bounds one batch of a group. A batch runs for every caller
// in it, so it does not end with the context of the one that runs it.
const groupTimeout = 30 * time.Second

// group writes the requests that arrive while its batch is being written
// as the next batch, one at a time: one round trip for all of them (group
// commit). Under load a batch holds what arrived during one round trip;
// alone, a request is written at once.
type group[R any] struct {
	mu sync.Mutex
	// open is the batch gathering requests while the one before it runs;
	// busy says a batch runs.
	open *groupBatch[R]
	busy bool
}

// groupBatch is requests written together; done is closed once they are.
type groupBatch[R any] struct {
	reqs []R
	turn chan struct{}
	done chan struct{}
}

// do writes r with whatever requests gather meanwhile and returns once
// write has written it (write leaves each request's result in it); ctx
// ending first gives up the wait, not the write.
func (g *group[R]) do(ctx context.Context, r R, write func(context.Context, []R)) error {
	g.mu.Lock()
	if b := g.open; b != nil {
		b.reqs = append(b.reqs, r)
		g.mu.Unlock()
		select {
		case <-b.done:
			return nil
		case <-ctx.Done():
			return ctx.Err()
		}
	}
	b := &groupBatch[R]{reqs: []R{r}, turn: make(chan struct{}), done: make(chan struct{})}
	g.open = b
	if !g.busy {
		g.busy = true
		close(b.turn)
	}
	g.mu.Unlock()
	// The batch before this one is bounded by groupTimeout.
	<-b.turn
	g.mu.Lock()
	g.open = nil
	reqs := b.reqs
	g.mu.Unlock()
	wctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), groupTimeout)
	write(wctx, reqs)
	cancel()
	close(b.done)
	g.mu.Lock()
	if next := g.open; next != nil {
		close(next.turn)
	} else {
		g.busy = false
	}
	g.mu.Unlock()
	return nil
}
