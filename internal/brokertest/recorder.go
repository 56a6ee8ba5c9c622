package brokertest

import (
	"context"
	"testing"
	"time"

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

// Next waits for the next recorded delivery.
func Next(t testing.TB, ch <-chan Seen, within time.Duration) Seen {
	t.Helper()
	select {
	case s := <-ch:
		return s
	case <-time.After(within):
		t.Fatalf("no delivery within %s", within)
		return Seen{}
	}
}

// Nothing asserts that no delivery is recorded within the given time.
func Nothing(t testing.TB, ch <-chan Seen, within time.Duration) {
	t.Helper()
	select {
	case s := <-ch:
		t.Fatalf("unexpected delivery %s attempt %d", s.Msg.ID, s.Msg.Attempt)
	case <-time.After(within):
	}
}
