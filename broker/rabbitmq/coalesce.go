package rabbitmq

import (
	"net"
	"runtime"
	"sync"
	"time"
)

// Bounds of a coalescingConn.
const (
	// maxPending is how many bytes writes may gather before a write waits
	// for the socket: what a broker that stops reading (connection.blocked)
	// holds in memory, on top of the kernel's buffers.
	maxPending = 1 << 20
	// maxKept is the largest buffer kept for the next writes once written:
	// a larger one (a big message's) is left to the garbage collector.
	maxKept = 64 << 10
	// readSize is how much one read from the socket may take: amqp091
	// reads through a buffer of 4 KiB, a few deliveries' worth.
	readSize = 64 << 10
	// closeFlushGrace bounds how long Close waits for gathered bytes to
	// reach the socket (a connection.close-ok, say) before closing it.
	closeFlushGrace = time.Second
)

// coalescingConn is a connection that reads from its socket in large
// pieces and whose writes are gathered and written to the socket by a
// flusher goroutine. amqp091 reads the socket through a buffer of 4 KiB, a
// read syscall for every few deliveries; through a coalescingConn one read
// takes whatever the socket holds, up to readSize. amqp091 writes and flushes every frame
// it sends (a publish, an ack, a heartbeat) with a write syscall of its own,
// holding its connection's lock meanwhile; through a coalescingConn, Write
// copies the bytes and returns, and whatever other goroutines write while
// one write syscall is on its way goes out together in the next. Under
// load that is one syscall, for the client, and one read, for the broker,
// for many messages instead of one each.
//
// A write the socket refuses fails every later Write and closes the
// socket, so that amqp091's reader sees the connection end and shuts it
// down: a publish written but never sent is then never confirmed, and an
// ack never sent makes the broker redeliver, as when the bytes were lost
// on the network. The flusher runs only while there are bytes to write.
type coalescingConn struct {
	net.Conn

	// The read side: rbuf[rpos:rend] was read and not yet handed out. Only
	// amqp091's reader goroutine reads.
	rbuf       []byte
	rpos, rend int

	mu sync.Mutex
	// room is signalled whenever pending is taken by the flusher, and when
	// err is set.
	room    *sync.Cond
	pending []byte
	spare   []byte
	// flushed is non-nil while a flusher runs, and closed when it ends.
	flushed chan struct{}
	// err is the first write error, or net.ErrClosed after Close: every
	// Write from then on returns it.
	err error
}

func newCoalescingConn(c net.Conn) *coalescingConn {
	cc := &coalescingConn{Conn: c}
	cc.room = sync.NewCond(&cc.mu)
	return cc
}

// Read hands out what the last read from the socket took, reading again
// (as much as the socket holds, up to readSize) once it is all handed out.
func (c *coalescingConn) Read(p []byte) (int, error) {
	if c.rpos == c.rend {
		if len(p) >= readSize {
			return c.Conn.Read(p)
		}
		if c.rbuf == nil {
			c.rbuf = make([]byte, readSize)
		}
		n, err := c.Conn.Read(c.rbuf)
		c.rpos, c.rend = 0, n
		if n == 0 {
			return 0, err
		}
		// An error with data comes back on the next read of the socket.
	}
	n := copy(p, c.rbuf[c.rpos:c.rend])
	c.rpos += n
	return n, nil
}

// Write gathers p for the flusher, starting one if none runs, and returns
// len(p). It waits while maxPending bytes are gathered already, and fails
// once a write failed or the connection was closed.
func (c *coalescingConn) Write(p []byte) (int, error) {
	c.mu.Lock()
	defer c.mu.Unlock()
	for c.err == nil && len(c.pending) >= maxPending {
		c.room.Wait()
	}
	if c.err != nil {
		return 0, c.err
	}
	c.pending = append(c.pending, p...)
	if c.flushed == nil {
		c.flushed = make(chan struct{})
		go c.flush(c.flushed)
	}
	return len(p), nil
}

// flush writes what was gathered until nothing is left, then ends.
func (c *coalescingConn) flush(done chan struct{}) {
	defer close(done)
	// Let the goroutines that are about to write (publishers the broker
	// just confirmed, a consumer's next ack) write first: they go out in
	// the same syscall.
	runtime.Gosched()
	c.mu.Lock()
	defer c.mu.Unlock()
	for len(c.pending) > 0 && c.err == nil {
		out := c.pending
		c.pending, c.spare = c.spare[:0], nil
		c.room.Broadcast()
		c.mu.Unlock()
		_, err := c.Conn.Write(out)
		c.mu.Lock()
		if cap(out) <= maxKept {
			c.spare = out[:0]
		}
		if err != nil && c.err == nil {
			c.err = err
			c.room.Broadcast()
			// The reader then sees the end of the connection.
			_ = c.Conn.Close()
		}
	}
	c.pending = c.pending[:0]
	c.flushed = nil
}

// Close writes what is gathered, waiting at most closeFlushGrace, then
// closes the socket and waits for the flusher to end.
func (c *coalescingConn) Close() error {
	c.mu.Lock()
	flushed := c.flushed
	c.mu.Unlock()
	if flushed != nil {
		t := time.NewTimer(closeFlushGrace)
		select {
		case <-flushed:
		case <-t.C:
		}
		t.Stop()
	}
	c.mu.Lock()
	if c.err == nil {
		c.err = net.ErrClosed
	}
	c.room.Broadcast()
	flushed = c.flushed
	c.mu.Unlock()
	err := c.Conn.Close()
	if flushed != nil {
		<-flushed
	}
	return err
}
