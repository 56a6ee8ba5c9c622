package rabbitmq

import (
	"context"
	"sync"
)

// gate holds publishers back while the broker asks them to pause
// (connection.blocked, channel.flow).
type gate struct {
	mu   sync.Mutex
	open chan struct{} // closed while the gate is open
}

func newGate() *gate {
	g := &gate{open: make(chan struct{})}
	close(g.open)
	return g
}

// set closes the gate when shut is true and opens it otherwise.
func (g *gate) set(shut bool) {
	g.mu.Lock()
	defer g.mu.Unlock()
	select {
	case <-g.open:
		if shut {
			g.open = make(chan struct{})
		}
	default:
		if !shut {
			close(g.open)
		}
	}
}

// wait returns nil once the gate is open or abort is closed (the caller then
// finds out why), and ctx's error if ctx ends first.
func (g *gate) wait(ctx context.Context, abort <-chan struct{}) error {
	g.mu.Lock()
	open := g.open
	g.mu.Unlock()
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
