package rabbitmq

import (
	"context"
	"sync"
	"sync/atomic"
)

// gate holds publishers back while the broker asks them to pause
// (connection.blocked, channel.flow).
type gate struct {
	mu sync.Mutex // serialises set
	// open is closed while the gate is open. Read without mu: every
	// publish waits on two gates, and a lock there is contended by every
	// publishing goroutine.
	open atomic.Pointer[chan struct{}]
}

func newGate() *gate {
	g := &gate{}
	open := make(chan struct{})
	close(open)
	g.open.Store(&open)
	return g
}

// set closes the gate when shut is true and opens it otherwise.
func (g *gate) set(shut bool) {
	g.mu.Lock()
	defer g.mu.Unlock()
	open := *g.open.Load()
	select {
	case <-open:
		if shut {
			next := make(chan struct{})
			g.open.Store(&next)
		}
	default:
		if !shut {
			close(open)
		}
	}
}

// wait returns nil once the gate is open or abort is closed (the caller then
// finds out why), and ctx's error if ctx ends first.
func (g *gate) wait(ctx context.Context, abort <-chan struct{}) error {
	open := *g.open.Load()
	select {
	case <-open:
		// An open gate wins over an expired ctx, so that a timeout is not
		// reported as the broker blocking the connection.
		return nil
	default:
	}
	select {
	case <-open:
		return nil
	case <-abort:
		return nil
	case <-ctx.Done():
		return ctx.Err()
	}
}
