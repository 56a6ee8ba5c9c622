package transporttest

import (
	"context"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/acemq/acemq-flow/broker/transport"
	"github.com/acemq/acemq-flow/internal/testenv"
)

// Run runs the conformance suite. open must return a new connection to the
// same broker on every call; the suite closes each one it opens.
func Run(t *testing.T, open func(t *testing.T) transport.Transport) {
	s := suite{open: open}
	for _, group := range []map[string]func(*testing.T, suite){
		routingTests, messageTests, settleTests, consumeTests, queueTests, deadLetterTests, frameTests,
	} {
		for name, test := range group {
			t.Run(name, func(t *testing.T) {
				t.Parallel()
				test(t, s)
			})
		}
	}
}

// Bounds of the suite's waits: how long a delivery may take, and how long
// "nothing arrives" is watched.
const (
	arrival = 5 * time.Second
	quiet   = 200 * time.Millisecond
)

type suite struct {
	open func(t *testing.T) transport.Transport
}

// connect opens a connection that is closed when the test ends.
func (s suite) connect(t *testing.T) transport.Transport {
	t.Helper()
	tr := s.open(t)
	t.Cleanup(func() {
		ctx, cancel := cleanupContext()
		defer cancel()
		if err := tr.Close(ctx); err != nil {
			t.Errorf("close %s: %v", tr.Name(), err)
		}
	})
	return tr
}

func cleanupContext() (context.Context, context.CancelFunc) {
	return context.WithTimeout(context.Background(), 10*time.Second)
}

// ctx bounds one test's calls.
func ctx(t *testing.T) context.Context {
	c, cancel := context.WithTimeout(t.Context(), 20*time.Second)
	t.Cleanup(cancel)
	return c
}

// declare declares topo on tr and deletes its queues and exchanges through
// tr when the test ends, so tr must stay open until then.
func declare(t *testing.T, tr transport.Transport, topo transport.Topology) {
	t.Helper()
	forget(t, tr, topo)
	require.NoError(t, tr.Declare(ctx(t), topo))
}

// forget deletes topo's queues and exchanges through tr when the test ends.
func forget(t *testing.T, tr transport.Transport, topo transport.Topology) {
	t.Cleanup(func() {
		ctx, cancel := cleanupContext()
		defer cancel()
		for _, q := range topo.Queues {
			if _, err := tr.DeleteQueue(ctx, q.Name); err != nil {
				t.Errorf("delete queue %q: %v", q.Name, err)
			}
		}
		for _, e := range topo.Exchanges {
			if err := tr.DeleteExchange(ctx, e.Name); err != nil {
				t.Errorf("delete exchange %q: %v", e.Name, err)
			}
		}
	})
}

// queue declares a transient classic queue with args and returns its name.
func queue(t *testing.T, tr transport.Transport, prefix string, args transport.Table) string {
	t.Helper()
	name := testenv.Name(t, prefix)
	declare(t, tr, transport.Topology{Queues: []transport.Queue{{Name: name, Args: args}}})
	return name
}

// exchange declares a transient exchange of kind and returns its name.
func exchange(t *testing.T, tr transport.Transport, prefix, kind string) string {
	t.Helper()
	name := testenv.Name(t, prefix)
	declare(t, tr, transport.Topology{Exchanges: []transport.Exchange{{Name: name, Kind: kind}}})
	return name
}

func bind(t *testing.T, tr transport.Transport, ex, q, key string) {
	t.Helper()
	require.NoError(t, tr.Declare(ctx(t), transport.Topology{Bindings: []transport.Binding{{Exchange: ex, Queue: q, Key: key}}}))
}

// publish publishes a message with body to ex under key and requires the
// confirm.
func publish(t *testing.T, tr transport.Transport, ex, key, body string) {
	t.Helper()
	require.NoError(t, tr.Publish(ctx(t), transport.Publishing{
		Exchange: ex, RoutingKey: key, Message: transport.Message{MessageID: body, Body: []byte(body)},
	}))
}

// ready returns how many messages are ready in q.
func ready(t *testing.T, tr transport.Transport, q string) int {
	t.Helper()
	st, err := tr.Inspect(ctx(t), q)
	require.NoError(t, err)
	return st.Messages
}

func consume(t *testing.T, tr transport.Transport, q string, prefetch int) transport.Subscription {
	t.Helper()
	sub, err := tr.Consume(ctx(t), q, transport.ConsumeOptions{Prefetch: prefetch})
	require.NoError(t, err)
	return sub
}

// receive waits up to timeout for the next delivery of sub.
func receive(t *testing.T, sub transport.Subscription, timeout time.Duration) *transport.Delivery {
	t.Helper()
	select {
	case d, ok := <-sub.Deliveries():
		require.True(t, ok, "deliveries closed: %v", sub.Err())
		return d
	case <-time.After(timeout):
		require.FailNow(t, "no delivery", "nothing within %s", timeout)
		return nil
	}
}

// nothing requires that sub receives nothing for the quiet period.
func nothing(t *testing.T, sub transport.Subscription) {
	t.Helper()
	select {
	case d, ok := <-sub.Deliveries():
		if ok {
			require.FailNow(t, "unexpected delivery", "got %q", d.Body)
		}
	case <-time.After(quiet):
	}
}

// get polls q until a message is there, for settlements that reach a
// broker asynchronously.
func get(t *testing.T, tr transport.Transport, q string) *transport.Delivery {
	t.Helper()
	deadline := time.Now().Add(arrival)
	for {
		d, err := tr.Get(ctx(t), q)
		require.NoError(t, err)
		if d != nil {
			return d
		}
		require.True(t, time.Now().Before(deadline), "nothing in %q within %s", q, arrival)
		time.Sleep(10 * time.Millisecond)
	}
}

// gone waits until q no longer exists.
func gone(t *testing.T, tr transport.Transport, q string) {
	t.Helper()
	require.Eventually(t, func() bool {
		_, err := tr.Inspect(ctx(t), q)
		return transport.IsCode(err, transport.NotFound)
	}, arrival, 10*time.Millisecond, "queue %q still exists", q)
}
