package testenv

import (
	"crypto/tls"
	"io"
	"net"
	"sync"
	"testing"
	"time"
)

// Proxy forwards TCP connections from an address of its own to a target,
// standing in for a broker node a test can take away (Stop) and bring back
// (Start) without touching the broker. With a tls.Config it terminates TLS,
// like a node's amqps listener.
type Proxy struct {
	tb     testing.TB
	target string
	tls    *tls.Config
	addr   string

	mu    sync.Mutex
	ln    net.Listener
	conns map[net.Conn]struct{}
	wg    sync.WaitGroup
}

// StartProxy listens on a free port of 127.0.0.1 and forwards every
// connection to target; tlsCfg (nil: plain TCP) makes it a TLS listener.
// The test's cleanup stops it.
func StartProxy(tb testing.TB, target string, tlsCfg *tls.Config) *Proxy {
	tb.Helper()
	p := &Proxy{tb: tb, target: target, tls: tlsCfg, addr: "127.0.0.1:0", conns: map[net.Conn]struct{}{}}
	p.Start()
	tb.Cleanup(p.Stop)
	return p
}

// Addr is the proxy's host:port, the same after a Stop and Start.
func (p *Proxy) Addr() string {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.addr
}

// Start listens again, on the same address, after Stop.
func (p *Proxy) Start() {
	p.tb.Helper()
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.ln != nil {
		return
	}
	var (
		ln  net.Listener
		err error
	)
	// The port of a listener just closed can take a moment to be free.
	for deadline := time.Now().Add(5 * time.Second); ; {
		if ln, err = net.Listen("tcp", p.addr); err == nil || time.Now().After(deadline) {
			break
		}
		time.Sleep(50 * time.Millisecond)
	}
	if err != nil {
		p.tb.Fatalf("proxy: listen on %s: %v", p.addr, err)
	}
	p.addr = ln.Addr().String()
	if p.tls != nil {
		ln = tls.NewListener(ln, p.tls)
	}
	p.ln = ln
	p.wg.Go(func() { p.accept(ln) })
}

// Stop closes the listener and every connection through it, as a node
// that went down would, and waits for its goroutines to end.
func (p *Proxy) Stop() {
	p.mu.Lock()
	ln := p.ln
	p.ln = nil
	for c := range p.conns {
		c.Close()
	}
	p.mu.Unlock()
	if ln != nil {
		ln.Close()
	}
	p.wg.Wait()
}

func (p *Proxy) accept(ln net.Listener) {
	for {
		c, err := ln.Accept()
		if err != nil {
			return
		}
		up, err := net.DialTimeout("tcp", p.target, 5*time.Second)
		if err != nil {
			c.Close()
			continue
		}
		p.mu.Lock()
		if p.ln != ln {
			p.mu.Unlock()
			c.Close()
			up.Close()
			return
		}
		p.conns[c] = struct{}{}
		p.conns[up] = struct{}{}
		p.mu.Unlock()
		var once sync.Once
		done := func() {
			once.Do(func() {
				c.Close()
				up.Close()
				p.mu.Lock()
				delete(p.conns, c)
				delete(p.conns, up)
				p.mu.Unlock()
			})
		}
		p.wg.Go(func() {
			_, _ = io.Copy(up, c)
			done()
		})
		p.wg.Go(func() {
			_, _ = io.Copy(c, up)
			done()
		})
	}
}
