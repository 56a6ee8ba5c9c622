package workflows_test

import (
	"bytes"
	"context"
	"log/slog"
	"regexp"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/acemq/acemq-flow/broker"
	"github.com/acemq/acemq-flow/broker/transport"
	"github.com/acemq/acemq-flow/internal/testenv"
	"github.com/acemq/acemq-flow/workflows"
)

// requireDemoOutcome asserts what the demo printed: orders 1 and 4 done on
// their first attempt, order 2 retried twice and done on its third, order 3
// given up into the .dlq with its reason, read back from there.
func requireDemoOutcome(t *testing.T, out, queue string) {
	t.Helper()
	dlq := regexp.QuoteMeta(queue + ".dlq")
	for _, pattern := range []string{
		`published order 1: alice, 2 x coffee beans`,
		`order 1, attempt 1: done`,
		`order 4, attempt 1: done`,
		`order 2, attempt 1: failed \(order 2: payment gateway timed out\): retrying in 1s`,
		`order 2, attempt 2: failed \(order 2: payment gateway timed out\): retrying in 1s`,
		`order 2, attempt 3: done`,
		`order 3, attempt 1: failed for good \(fatal: order 3: quantity must be at least 1, got 0\): giving up into ` + dlq,
		dlq + ` holds order 3: x-acemq-error="fatal: order 3: quantity must be at least 1, got 0", x-acemq-queue="` + regexp.QuoteMeta(queue) + `"`,
		`summary: 3 orders done, 1 dead-lettered`,
	} {
		require.Regexp(t, pattern, out)
	}
	require.NotContains(t, out, "order 1, attempt 2")
	require.NotContains(t, out, "order 3, attempt 2")
	require.NotContains(t, out, "order 2, attempt 4")
	require.Less(t, strings.Index(out, "order 2, attempt 2"), strings.Index(out, "order 2, attempt 3"))
}

// open connects with cfg, the library's logs going to the test's log, and
// closes the connection when the test ends.
func open(t *testing.T, cfg broker.Config, url string) *broker.Conn {
	t.Helper()
	cfg.Logger = slog.New(slog.NewTextHandler(t.Output(), nil))
	conn, err := cfg.Open(t.Context(), url)
	require.NoError(t, err)
	t.Cleanup(func() { require.NoError(t, conn.Close(context.Background())) })
	return conn
}

func TestDemoOnLoopback(t *testing.T) {
	t.Parallel()
	ctx := t.Context()
	conn := open(t, broker.Config{}, "memory://")

	var out bytes.Buffer
	require.NoError(t, workflows.Demo(ctx, conn, &out))
	t.Log("\n" + out.String())
	require.Contains(t, out.String(), "acemq-flow demo on memory://")
	requireDemoOutcome(t, out.String(), workflows.DefaultDemoQueue)

	for _, q := range []string{workflows.DefaultDemoQueue, workflows.DefaultDemoQueue + ".dlq", workflows.DefaultDemoQueue + ".parked"} {
		_, err := conn.Transport().Inspect(ctx, q)
		require.True(t, transport.IsCode(err, transport.NotFound), "queue %s should have been deleted: %v", q, err)
	}
}

func TestDemoRunsTwiceOnOneConnection(t *testing.T) {
	t.Parallel()
	ctx := t.Context()
	conn := open(t, broker.Config{}, "memory://")

	cfg := workflows.DemoConfig{Queue: "demo-twice.orders"}
	for range 2 {
		var out bytes.Buffer
		require.NoError(t, cfg.Run(ctx, conn, &out))
		requireDemoOutcome(t, out.String(), cfg.Queue)
	}
}

func TestDemoOnRabbitMQ(t *testing.T) {
	t.Parallel()
	url := testenv.RabbitURL(t)
	ctx := t.Context()
	ladder := testenv.Name(t, "ladder")
	t.Cleanup(func() { deleteLadder(t, url, ladder) })
	conn := open(t, broker.Config{Ladder: ladder}, url)

	cfg := workflows.DemoConfig{Queue: testenv.Name(t, "orders")}
	var out bytes.Buffer
	require.NoError(t, cfg.Run(ctx, conn, &out))
	t.Log("\n" + out.String())
	require.NotContains(t, out.String(), "guest:guest", "the password must not be printed")
	requireDemoOutcome(t, out.String(), cfg.Queue)

	for _, q := range []string{cfg.Queue, cfg.Queue + ".dlq", cfg.Queue + ".parked"} {
		_, err := conn.Transport().Inspect(ctx, q)
		require.True(t, transport.IsCode(err, transport.NotFound), "queue %s should have been deleted: %v", q, err)
	}
}

// deleteLadder removes a test's own scheduler ladder from the broker,
// through a connection of its own (the test's is closed by then).
func deleteLadder(t *testing.T, url, name string) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	conn, err := broker.Config{Logger: slog.New(slog.NewTextHandler(t.Output(), nil))}.Open(ctx, url)
	require.NoError(t, err)
	defer func() { require.NoError(t, conn.Close(ctx)) }()
	topo := broker.LadderTopology(name)
	for _, q := range topo.Queues {
		_, err := conn.Transport().DeleteQueue(ctx, q.Name)
		require.NoError(t, err)
	}
	for _, e := range topo.Exchanges {
		require.NoError(t, conn.Transport().DeleteExchange(ctx, e.Name))
	}
}

func TestDemoRefusesBadInput(t *testing.T) {
	t.Parallel()
	ctx := t.Context()
	conn := open(t, broker.Config{}, "memory://")

	require.ErrorContains(t, workflows.DemoConfig{Timeout: -time.Second}.Run(ctx, conn, &bytes.Buffer{}), "timeout")
	require.ErrorContains(t, workflows.Demo(ctx, nil, &bytes.Buffer{}), "nil connection")
	require.ErrorContains(t, workflows.Demo(ctx, conn, nil), "nil output writer")
}

func TestDemoGivesUpAtItsTimeout(t *testing.T) {
	t.Parallel()
	ctx := t.Context()
	conn := open(t, broker.Config{}, "memory://")

	// Order 2's retries take about two seconds: a 300 ms budget ends
	// the run with order 2 unsettled, and the queues are still removed.
	cfg := workflows.DemoConfig{Queue: "demo-timeout.orders", Timeout: 300 * time.Millisecond}
	err := cfg.Run(ctx, conn, &bytes.Buffer{})
	require.ErrorIs(t, err, context.DeadlineExceeded)
	require.ErrorContains(t, err, "still unsettled")
	_, err = conn.Transport().Inspect(ctx, cfg.Queue)
	require.True(t, transport.IsCode(err, transport.NotFound), "the queue should have been deleted: %v", err)
}
