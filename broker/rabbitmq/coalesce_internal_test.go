package rabbitmq

import (
	"bytes"
	"errors"
	"io"
	"net"
	"sync"
	"testing"

	"github.com/stretchr/testify/require"
)

// tcpPair is a connected pair of loopback TCP connections: the client end
// wrapped in a coalescingConn, and the server end.
func tcpPair(t *testing.T) (*coalescingConn, net.Conn) {
	t.Helper()
	l, err := net.Listen("tcp", "127.0.0.1:0")
	require.NoError(t, err)
	defer l.Close()
	accepted := make(chan net.Conn, 1)
	go func() {
		c, _ := l.Accept()
		accepted <- c
	}()
	c, err := net.Dial("tcp", l.Addr().String())
	require.NoError(t, err)
	s := <-accepted
	require.NotNil(t, s)
	t.Cleanup(func() { _ = s.Close() })
	return newCoalescingConn(c), s
}

func TestCoalescingConnWritesEverythingInOrder(t *testing.T) {
	t.Parallel()
	cc, peer := tcpPair(t)
	// Four writers, each its own 200 numbered records: the peer must get
	// every record whole, each writer's in the order it wrote them.
	const writers, records = 4, 200
	var wg sync.WaitGroup
	for w := range writers {
		wg.Go(func() {
			for i := range records {
				rec := bytes.Repeat([]byte{byte(w)}, 100)
				rec[1] = byte(i)
				_, err := cc.Write(rec)
				require.NoError(t, err)
			}
		})
	}
	got := make([]byte, writers*records*100)
	read := make(chan error, 1)
	go func() {
		_, err := io.ReadFull(peer, got)
		read <- err
	}()
	wg.Wait()
	require.NoError(t, <-read)
	next := make([]int, writers)
	for off := 0; off < len(got); off += 100 {
		rec := got[off : off+100]
		w := int(rec[0])
		require.Less(t, w, writers)
		require.Equal(t, byte(next[w]), rec[1], "writer %d's record at %d", w, off)
		next[w]++
	}
	require.Equal(t, []int{records, records, records, records}, next)
	require.NoError(t, cc.Close())
}

func TestCoalescingConnReadsInSmallPieces(t *testing.T) {
	t.Parallel()
	cc, peer := tcpPair(t)
	defer cc.Close()
	sent := make([]byte, 3*readSize+123)
	for i := range sent {
		sent[i] = byte(i * 7)
	}
	go func() {
		_, _ = peer.Write(sent)
		_ = peer.Close()
	}()
	// amqp091 reads through a 4 KiB buffer.
	got, err := io.ReadAll(struct{ io.Reader }{cc})
	require.NoError(t, err)
	require.Equal(t, sent, got)
}

func TestCoalescingConnCloseWritesWhatIsGathered(t *testing.T) {
	t.Parallel()
	cc, peer := tcpPair(t)
	msg := bytes.Repeat([]byte("connection.close-ok "), 1000)
	_, err := cc.Write(msg)
	require.NoError(t, err)
	require.NoError(t, cc.Close())
	got, err := io.ReadAll(peer)
	require.NoError(t, err)
	require.Equal(t, msg, got)
	_, err = cc.Write([]byte("late"))
	require.ErrorIs(t, err, net.ErrClosed)
}

// failingConn is a socket whose writes fail; closed is closed by Close.
type failingConn struct {
	net.Conn
	closeOnce sync.Once
	closed    chan struct{}
}

var errBoom = errors.New("connection reset by peer")

func (c *failingConn) Write([]byte) (int, error) { return 0, errBoom }

func (c *failingConn) Close() error {
	c.closeOnce.Do(func() { close(c.closed) })
	return nil
}

func TestCoalescingConnFailedWriteFailsLaterWritesAndClosesTheSocket(t *testing.T) {
	t.Parallel()
	fc := &failingConn{closed: make(chan struct{})}
	cc := newCoalescingConn(fc)
	// Gathered: the failure is the flusher's to find.
	n, err := cc.Write([]byte("basic.publish"))
	require.NoError(t, err)
	require.Equal(t, 13, n)
	// The socket is closed, so that amqp091's reader sees the end.
	<-fc.closed
	_, err = cc.Write([]byte("basic.ack"))
	require.ErrorIs(t, err, errBoom)
	require.NoError(t, cc.Close())
}
