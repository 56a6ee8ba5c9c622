package patterns_test

import (
	"context"
	"fmt"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/acemq/acemq-flow/broker"
	"github.com/acemq/acemq-flow/broker/rabbitmq"
	"github.com/acemq/acemq-flow/broker/transport"
	"github.com/acemq/acemq-flow/internal/brokertest"
	"github.com/acemq/acemq-flow/internal/testenv"
	"github.com/acemq/acemq-flow/patterns"
)

func TestStreamRetentionArgs(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		age  time.Duration
		want string
	}{
		{time.Second, "1s"},
		{90 * time.Second, "90s"},
		{time.Minute, "1m"},
		{90 * time.Minute, "90m"},
		{time.Hour, "1h"},
		{36 * time.Hour, "36h"},
		{24 * time.Hour, "1D"},
		{7 * 24 * time.Hour, "7D"},
		{61 * time.Second, "61s"},
		{25 * time.Hour, "25h"},
	} {
		args, err := patterns.StreamRetention{MaxAge: tc.age}.Args()
		require.NoError(t, err)
		require.Equal(t, tc.want, args["x-max-age"], "max age %s", tc.age)
	}
	args, err := patterns.StreamRetention{MaxAge: 7 * 24 * time.Hour, MaxBytes: 10 << 30}.Args()
	require.NoError(t, err)
	require.Equal(t, broker.Table{"x-queue-type": "stream", "x-max-age": "7D", "x-max-length-bytes": int64(10737418240)}, args,
		"no segment size unless asked for")
	args, err = patterns.StreamRetention{SegmentBytes: 100 << 20}.Args()
	require.NoError(t, err)
	require.Equal(t, broker.Table{"x-queue-type": "stream", "x-stream-max-segment-size-bytes": int64(104857600)}, args)
	args, err = patterns.StreamRetention{}.Args()
	require.NoError(t, err)
	require.Equal(t, broker.Table{"x-queue-type": "stream"}, args)

	for _, bad := range []patterns.StreamRetention{{MaxAge: 1500 * time.Millisecond}, {MaxAge: -time.Second}, {MaxBytes: -1}, {SegmentBytes: -1}} {
		_, err := bad.Args()
		require.ErrorIs(t, err, broker.ErrInvalidOption, "%+v", bad)
	}
}

func TestStreamOffsetArgs(t *testing.T) {
	t.Parallel()
	at := time.Date(2025, 11, 30, 8, 0, 0, 0, time.UTC)
	for _, tc := range []struct {
		o    patterns.StreamOffset
		arg  any
		text string
	}{
		{patterns.StreamFirst(), "first", "first"},
		{patterns.StreamNext(), "next", "next"},
		{patterns.StreamOffset{}, "next", "next"},
		{patterns.StreamLast(), "last", "last"},
		{patterns.StreamAt(4211), int64(4211), "at 4211"},
		{patterns.StreamSince(at), at, "since 2025-11-30T08:00:00Z"},
	} {
		arg, err := tc.o.Arg()
		require.NoError(t, err)
		require.Equal(t, tc.arg, arg)
		require.Equal(t, tc.text, tc.o.String())
	}
	_, err := patterns.StreamAt(-1).Arg()
	require.ErrorIs(t, err, broker.ErrInvalidOption)
}

func TestStreamsRefusedOnLoopback(t *testing.T) {
	t.Parallel()
	ctx := brokertest.Ctx(t)
	conn, err := broker.Open(ctx, "memory://")
	require.NoError(t, err)
	defer conn.Close(context.Background())
	err = patterns.DeclareStream(ctx, conn, "events", patterns.StreamRetention{MaxAge: time.Hour})
	require.ErrorIs(t, err, transport.ErrNotSupported)
	err = patterns.DeclareStream(ctx, conn.Transport(), "events", patterns.StreamRetention{})
	require.ErrorIs(t, err, transport.ErrNotSupported, "a transport is accepted too")
	_, err = patterns.ReadStream(ctx, conn, "events", patterns.StreamFirst(), streamAccept)
	require.ErrorIs(t, err, transport.ErrNotSupported)
	require.ErrorContains(t, err, "stream")
}

func streamAccept(context.Context, *broker.Message) broker.Ack { return broker.Accept() }

// streamDeclare declares a stream of the test's own, deleted when it ends.
func streamDeclare(h *brokertest.Harness, prefix string) string {
	h.T.Helper()
	name := testenv.Name(h.T, prefix)
	h.DeleteLater(name)
	require.NoError(h.T, patterns.DeclareStream(brokertest.Ctx(h.T), h.Admin, name, patterns.StreamRetention{MaxAge: time.Hour, MaxBytes: 1 << 30}))
	return name
}

// streamFill appends n messages {"n": from..from+n-1} to the stream.
func streamFill(h *brokertest.Harness, conn *broker.Conn, stream string, from, n int) {
	h.T.Helper()
	ctx := brokertest.Ctx(h.T)
	for i := from; i < from+n; i++ {
		require.NoError(h.T, conn.Publish(ctx, map[string]int{"n": i}, broker.To(stream), broker.Mandatory()))
	}
}

// streamRead is what a stream handler saw: the offset and the payload's n.
type streamRead struct{ offset, n int64 }

// streamRecorder records every message read, then answers with ack.
func streamRecorder(t *testing.T) (broker.Handler, <-chan streamRead) {
	ch := make(chan streamRead, 10000)
	return func(_ context.Context, m *broker.Message) broker.Ack {
		off, ok := patterns.StreamOffsetOf(m)
		if !ok {
			t.Errorf("message %s has no stream offset", m.ID)
		}
		v, err := broker.Decode[map[string]int64](m)
		if err != nil {
			t.Errorf("decode: %v", err)
		}
		ch <- streamRead{offset: off, n: v["n"]}
		return broker.Accept()
	}, ch
}

func TestStreamDeclareIsIdempotent(t *testing.T) {
	brokertest.OnRabbit(t, func(t *testing.T, h *brokertest.Harness) {
		ctx := brokertest.Ctx(t)
		name := streamDeclare(h, "stream-declare")
		require.NoError(t, patterns.DeclareStream(ctx, h.Admin.Transport(), name, patterns.StreamRetention{MaxAge: time.Hour, MaxBytes: 1 << 30}),
			"the same declaration again, through the transport")
		err := patterns.DeclareStream(ctx, h.Admin, name, patterns.StreamRetention{MaxAge: 2 * time.Hour})
		require.True(t, transport.IsCode(err, transport.PreconditionFailed), "other retention: %v", err)
	})
}

func TestStreamProjectionFromFirst(t *testing.T) {
	brokertest.OnRabbit(t, func(t *testing.T, h *brokertest.Harness) {
		ctx := brokertest.Ctx(t)
		conn := h.Open(broker.Config{})
		stream := streamDeclare(h, "stream-first")
		streamFill(h, conn, stream, 0, 100)
		handler, got := streamRecorder(t)
		reader, err := patterns.ReadStream(ctx, conn, stream, patterns.StreamFirst(), handler, broker.Tag("projection-1"))
		require.NoError(t, err)
		for i := range int64(100) {
			r := brokertest.Next(t, got, 10*time.Second)
			require.Equal(t, streamRead{offset: i, n: i}, r, "every message, in order, offsets from 0")
		}
		require.NoError(t, reader.Cancel(ctx))

		again, got2 := streamRecorder(t)
		_, err = patterns.ReadStream(ctx, conn, stream, patterns.StreamFirst(), again, broker.Tag("projection-2"))
		require.NoError(t, err)
		require.Equal(t, streamRead{offset: 0, n: 0}, brokertest.Next(t, got2, 10*time.Second), "reading removed nothing")
	})
}

func TestStreamResumeFromCheckpoint(t *testing.T) {
	brokertest.OnRabbit(t, func(t *testing.T, h *brokertest.Harness) {
		ctx := brokertest.Ctx(t)
		conn := h.Open(broker.Config{})
		stream := streamDeclare(h, "stream-resume")
		streamFill(h, conn, stream, 0, 100)

		var saved int64 = -1
		reached := make(chan struct{})
		first, err := patterns.ReadStream(ctx, conn, stream, patterns.StreamFirst(), func(_ context.Context, m *broker.Message) broker.Ack {
			off, _ := patterns.StreamOffsetOf(m)
			if off < 50 {
				saved = off
				if off == 49 {
					close(reached)
				}
			}
			return broker.Accept()
		})
		require.NoError(t, err)
		brokertest.Next(t, reached, 10*time.Second)
		require.NoError(t, first.Cancel(ctx))
		require.Equal(t, int64(49), saved)

		handler, got := streamRecorder(t)
		_, err = patterns.ReadStream(ctx, conn, stream, patterns.StreamAt(saved+1), handler)
		require.NoError(t, err)
		for i := int64(50); i < 100; i++ {
			require.Equal(t, streamRead{offset: i, n: i}, brokertest.Next(t, got, 10*time.Second), "only the rest")
		}
		streamFill(h, conn, stream, 100, 1)
		require.Equal(t, streamRead{offset: 100, n: 100}, brokertest.Next(t, got, 10*time.Second), "and then what arrives")
	})
}

func TestStreamSince(t *testing.T) {
	brokertest.OnRabbit(t, func(t *testing.T, h *brokertest.Harness) {
		ctx := brokertest.Ctx(t)
		conn := h.Open(broker.Config{})
		stream := streamDeclare(h, "stream-since")
		written := time.Now()
		streamFill(h, conn, stream, 0, 20)
		// The broker stamps chunks with its own clock and resolves a
		// timestamp to whole seconds: the first 20 are written two seconds
		// before since and the rest a second after it, so that a broker
		// whose clock is up to a second off ours still tells them apart.
		since := written.Truncate(time.Second).Add(2 * time.Second)
		time.Sleep(time.Until(since.Add(time.Second)))
		streamFill(h, conn, stream, 20, 20)

		handler, got := streamRecorder(t)
		_, err := patterns.ReadStream(ctx, conn, stream, patterns.StreamSince(since), handler)
		require.NoError(t, err)
		for i := int64(20); i < 40; i++ {
			require.Equal(t, streamRead{offset: i, n: i}, brokertest.Next(t, got, 10*time.Second), "from the first message at or after t")
		}
	})
}

// TestStreamReaderSurvivesClosedConnections: the connection is closed under
// the reader twice; the reader resumes from its own position, so it reads
// every message and reads again at most what was in flight.
func TestStreamReaderSurvivesClosedConnections(t *testing.T) {
	brokertest.OnRabbit(t, func(t *testing.T, h *brokertest.Harness) {
		ctx := brokertest.Ctx(t)
		const total = 1000
		conn := h.Open(broker.Config{})
		stream := streamDeclare(h, "stream-reconnect")
		streamFill(h, conn, stream, 0, total)

		var mu sync.Mutex
		seen := map[int64]int{}
		pause := map[int64]chan struct{}{300: make(chan struct{}), 600: make(chan struct{})}
		paused := make(chan int64, 2)
		all := make(chan struct{})
		_, err := patterns.ReadStream(ctx, conn, stream, patterns.StreamFirst(), func(_ context.Context, m *broker.Message) broker.Ack {
			off, _ := patterns.StreamOffsetOf(m)
			mu.Lock()
			seen[off]++
			first := seen[off] == 1
			done := len(seen) == total && first
			mu.Unlock()
			if release, ok := pause[off]; ok && first {
				paused <- off
				<-release
			}
			if done {
				close(all)
			}
			return broker.Accept()
		})
		require.NoError(t, err)
		rt := conn.Transport().(*rabbitmq.Transport)
		for range 2 {
			off := brokertest.Next(t, paused, 20*time.Second)
			// Closed while a message is in the handler and the prefetch
			// window is full.
			testenv.CloseConnection(t, rt.LocalAddr())
			close(pause[off])
		}
		brokertest.Next(t, all, 60*time.Second)

		mu.Lock()
		defer mu.Unlock()
		again := 0
		for off := range int64(total) {
			require.Positive(t, seen[off], "offset %d was never read", off)
			again += seen[off] - 1
		}
		t.Logf("read again after two reconnects: %d", again)
		require.LessOrEqual(t, again, 2*patterns.DefaultStreamPrefetch, "at most what was in flight is read again, not the stream from the start")
	})
}

func ExampleStreamRetention_Args() {
	args, _ := patterns.StreamRetention{MaxAge: 7 * 24 * time.Hour, MaxBytes: 10 << 30}.Args()
	fmt.Println(args["x-max-age"], args["x-max-length-bytes"])
	args, _ = patterns.StreamRetention{MaxAge: 36 * time.Hour}.Args()
	fmt.Println(args["x-max-age"])
	args, _ = patterns.StreamRetention{MaxAge: 90 * time.Second}.Args()
	fmt.Println(args["x-max-age"])
	// Output:
	// 7D 10737418240
	// 36h
	// 90s
}
