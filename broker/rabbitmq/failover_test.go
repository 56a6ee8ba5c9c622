package rabbitmq_test

import (
	"bytes"
	"errors"
	"fmt"
	"net/url"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/acemq/acemq-flow/broker/rabbitmq"
	"github.com/acemq/acemq-flow/broker/transport"
	"github.com/acemq/acemq-flow/internal/testenv"
)

// withNodes returns raw with its host replaced by a list of nodes.
func withNodes(tb testing.TB, raw string, nodes ...string) string {
	tb.Helper()
	u, err := url.Parse(raw)
	require.NoError(tb, err)
	u.Host = strings.Join(nodes, ",")
	return u.String()
}

// rabbitAddr is the host:port of the test broker.
func rabbitAddr(tb testing.TB) string {
	tb.Helper()
	u, err := url.Parse(testenv.RabbitURL(tb))
	require.NoError(tb, err)
	if u.Port() == "" {
		return u.Host + ":5672"
	}
	return u.Host
}

// logBuffer keeps what a transport logged, and writes it to the test's log.
type logBuffer struct {
	tb  testing.TB
	mu  sync.Mutex
	buf bytes.Buffer
}

func (b *logBuffer) Write(p []byte) (int, error) {
	b.tb.Log(strings.TrimSuffix(string(p), "\n"))
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.buf.Write(p)
}

func (b *logBuffer) String() string {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.buf.String()
}

// A node list whose first node refuses connections: Dial says so and
// connects to the next.
func TestNodeListSkipsANodeThatRefuses(t *testing.T) {
	t.Parallel()
	real := rabbitAddr(t)
	logs := &logBuffer{tb: t}
	tr, err := rabbitmq.Dial(ctx(t), withNodes(t, testenv.RabbitURL(t), "127.0.0.1:1", real), rabbitmq.Config{Logger: slogTo(logs)})
	require.NoError(t, err)
	t.Cleanup(func() { require.NoError(t, tr.Close(ctx(t))) })
	require.Equal(t, real, tr.Node())
	require.Equal(t, []string{"127.0.0.1:1", real}, tr.Nodes())
	require.Equal(t, "amqp://guest@127.0.0.1:1,"+real+"/", tr.Name())
	require.Contains(t, logs.String(), `msg="rabbitmq could not connect to a node; trying the next" transport=amqp://guest@127.0.0.1:1,`+real+"/ node=127.0.0.1:1 next="+real)
	require.Contains(t, logs.String(), `msg="rabbitmq connected" transport=amqp://guest@127.0.0.1:1,`+real+"/ node="+real)
	require.NotContains(t, logs.String(), "guest:guest")
}

// No node answers: one error per node, each naming its node, none the
// password.
func TestNodeListNoneAnswers(t *testing.T) {
	t.Parallel()
	_, err := rabbitmq.Dial(ctx(t), "amqp://guest:s3cr3t@127.0.0.1:1,127.0.0.1:2/", rabbitmq.Config{Logger: logger(t)})
	var ne *rabbitmq.NodesError
	require.ErrorAs(t, err, &ne)
	require.Len(t, ne.Errs, 2)
	require.ErrorContains(t, ne.Errs[0], "rabbitmq: dial amqp://guest@127.0.0.1:1/: ")
	require.ErrorContains(t, ne.Errs[1], "rabbitmq: dial amqp://guest@127.0.0.1:2/: ")
	require.ErrorContains(t, err, "rabbitmq: no node of amqp://guest@127.0.0.1:1,127.0.0.1:2/ accepted a connection: ")
	require.NotContains(t, err.Error(), "s3cr3t")
}

// The node a transport is on goes away: it redials the next node of its
// list, declares its topology there, resumes its subscription on the same
// Deliveries channel and refuses to settle a delivery of the lost
// connection; a publish confirms on the new node. When that node goes
// too, it comes back to the first.
func TestFailoverToTheNextNode(t *testing.T) {
	t.Parallel()
	real := rabbitAddr(t)
	// Two "nodes" of one broker: proxies the test can take away.
	p1 := testenv.StartProxy(t, real, nil)
	p2 := testenv.StartProxy(t, real, nil)
	logs := &logBuffer{tb: t}
	tr, err := rabbitmq.Dial(ctx(t), withNodes(t, testenv.RabbitURL(t), p1.Addr(), p2.Addr()), rabbitmq.Config{
		Logger: slogTo(logs), ReconnectMin: 50 * time.Millisecond, ReconnectMax: 500 * time.Millisecond,
	})
	require.NoError(t, err)
	t.Cleanup(func() { require.NoError(t, tr.Close(ctx(t))) })
	require.Equal(t, p1.Addr(), tr.Node())

	q := queue(t, tr, "failover")
	excl := testenv.Name(t, "failover-exclusive")
	require.NoError(t, tr.Declare(ctx(t), transport.Topology{Queues: []transport.Queue{{Name: excl, Exclusive: true, AutoDelete: true}}}))
	sub, err := tr.Consume(ctx(t), q, transport.ConsumeOptions{Prefetch: 10})
	require.NoError(t, err)
	t.Cleanup(func() { require.NoError(t, sub.Cancel(ctx(t))) })

	publish(t, tr, "", q, "before")
	held := receive(t, sub)
	require.Equal(t, "before", held.MessageID)

	for round, move := range []struct {
		stop, start *testenv.Proxy
	}{{stop: p1}, {stop: p2, start: p1}} {
		if move.start != nil {
			move.start.Start()
		}
		from := move.stop.Addr()
		move.stop.Stop()
		var to string
		require.Eventually(t, func() bool {
			to = tr.Node()
			return to != "" && to != from
		}, 10*time.Second, 5*time.Millisecond, "round %d: no connection to another node", round)
		t.Logf("round %d: %s -> %s", round, from, to)
		// The new session is in use a moment before its line is logged.
		reconnected := fmt.Sprintf(`msg="rabbitmq reconnected" transport=%s node=%s `, tr.Name(), to)
		require.Eventually(t, func() bool { return strings.Contains(logs.String(), reconnected) },
			5*time.Second, 5*time.Millisecond, "round %d: no %s", round, reconnected)
		require.Contains(t, logs.String(), "previous="+from)

		require.ErrorIs(t, held.Ack(), transport.ErrStaleDelivery, "a delivery of the lost connection")
		held = receive(t, sub)
		require.Equal(t, "before", held.MessageID, "redelivered on the new node's connection")
		require.True(t, held.Redelivered)
		_, err = tr.Inspect(ctx(t), excl)
		require.NoError(t, err, "the exclusive queue was declared again")
	}
	require.NoError(t, held.Ack())
	publish(t, tr, "", q, "after")
	d := receive(t, sub)
	require.Equal(t, "after", d.MessageID)
	require.NoError(t, d.Ack())
	require.NoError(t, sub.Err())
	_, err = tr.DeleteQueue(ctx(t), excl)
	require.NoError(t, err)
}

// A publish waiting while every node is away fails once its context ends,
// and never reports success.
func TestPublishWhileEveryNodeIsAway(t *testing.T) {
	t.Parallel()
	p := testenv.StartProxy(t, rabbitAddr(t), nil)
	tr, err := rabbitmq.Dial(ctx(t), withNodes(t, testenv.RabbitURL(t), p.Addr()), rabbitmq.Config{
		Logger: logger(t), ReconnectMin: 50 * time.Millisecond, ReconnectMax: 200 * time.Millisecond,
	})
	require.NoError(t, err)
	t.Cleanup(func() { require.NoError(t, tr.Close(ctx(t))) })
	q := queue(t, tr, "away")
	p.Stop()
	require.Eventually(t, func() bool { return tr.Node() == "" }, 10*time.Second, 5*time.Millisecond)
	c, cancel := contextWithTimeout(t, 300*time.Millisecond)
	defer cancel()
	err = tr.Publish(c, transport.Publishing{RoutingKey: q, Message: transport.Message{MessageID: "while-away"}})
	require.Error(t, err)
	require.True(t, errors.Is(err, c.Err()), "%v", err)
	p.Start()
	require.Eventually(t, func() bool { return tr.Node() == p.Addr() }, 10*time.Second, 5*time.Millisecond)
	publish(t, tr, "", q, "back")
}
