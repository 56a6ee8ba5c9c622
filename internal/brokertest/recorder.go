package brokertest

import (
	"context"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/acemq/acemq-flow/broker"
)

// Seen is what a handler observed of one delivery.
type Seen struct {
	Msg *broker.Message
	// Payload is the body decoded as a JSON object (nil when it is not one).
	Payload map[string]any
}

// Recorder is a handler that records every message on the returned channel
// and then answers with decide.
func Recorder(decide func(m *broker.Message) broker.Ack) (broker.Handler, <-chan Seen) {
	ch := make(chan Seen, 1024)
	return func(ctx context.Context, m *broker.Message) broker.Ack {
		var p map[string]any
		_ = m.Decode(&p)
		ch <- Seen{Msg: m, Payload: p}
		return decide(m)
	}, ch
}

// Sink consumes queue on conn, without retries unless opts say otherwise,
// accepts every message and records it on the returned channel.
func (h *Harness) Sink(conn *broker.Conn, queue string, opts ...broker.ConsumeOption) <-chan Seen {
	h.T.Helper()
	handler, ch := Recorder(func(*broker.Message) broker.Ack { return broker.Accept() })
	_, err := conn.Consume(Ctx(h.T), queue, handler, append([]broker.ConsumeOption{broker.WithRetry(broker.NoRetry())}, opts...)...)
	require.NoError(h.T, err)
	return ch
}

// Next waits for the next value on ch: a recorded delivery, or whatever
// else a test hands over on a channel.
func Next[T any](t testing.TB, ch <-chan T, within time.Duration) T {
	t.Helper()
	select {
	case v := <-ch:
		return v
	case <-time.After(within):
		t.Fatalf("no delivery within %s", within)
		var zero T
		return zero
	}
}

// Nothing asserts that nothing arrives on ch within the given time.
func Nothing[T any](t testing.TB, ch <-chan T, within time.Duration) {
	t.Helper()
	select {
	case v := <-ch:
		switch v := any(v).(type) {
		case Seen:
			t.Fatalf("unexpected delivery %s attempt %d", v.Msg.ID, v.Msg.Attempt)
		case *broker.Message:
			t.Fatalf("unexpected delivery %s attempt %d", v.ID, v.Attempt)
		default:
			t.Fatalf("unexpected %v", v)
		}
	case <-time.After(within):
	}
}
