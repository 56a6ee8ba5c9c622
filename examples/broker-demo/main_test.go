package main

import (
	"bytes"
	"context"
	"regexp"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/acemq/acemq-flow/broker"
	"github.com/acemq/acemq-flow/broker/transport"
	"github.com/acemq/acemq-flow/internal/brokertest"
	"github.com/acemq/acemq-flow/internal/testenv"
)

// requireOutcome asserts what the example printed: orders 1 and 4 done on
// their first attempt, order 2 retried twice and done on its third, order
// 3 given up into the .dlq with its reason, read back from there.
func requireOutcome(t *testing.T, out, queue string) {
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

// requireDeleted fails the test if the queue, its .dlq or its .parked
// still exists.
func requireDeleted(t *testing.T, conn *broker.Conn, queue string) {
	t.Helper()
	for _, q := range []string{queue, queue + broker.DeadLetterSuffix, queue + broker.ParkedSuffix} {
		_, err := conn.Transport().Inspect(t.Context(), q)
		require.True(t, transport.IsCode(err, transport.NotFound), "queue %s should have been deleted: %v", q, err)
	}
}

// TestBrokerDemo runs the example twice on one connection, on the
// loopback and on RabbitMQ.
func TestBrokerDemo(t *testing.T) {
	brokertest.Each(t, func(t *testing.T, h *brokertest.Harness) {
		conn := h.Open(broker.Config{})
		q := testenv.Name(t, "orders")
		for range 2 {
			var out bytes.Buffer
			require.NoError(t, run(t.Context(), conn, q, &out))
			t.Log("\n" + out.String())
			require.NotContains(t, out.String(), "guest:guest", "the password must not be printed")
			requireOutcome(t, out.String(), q)
			requireDeleted(t, conn, q)
		}
	})
}

// TestBrokerDemoMain runs what main runs, on the embedded broker.
func TestBrokerDemoMain(t *testing.T) {
	t.Setenv("ACEMQ_URL", "")
	var out bytes.Buffer
	require.NoError(t, open(t.Context(), &out))
	requireOutcome(t, out.String(), queue)
}

// TestBrokerDemoGivesUpAtItsTimeout: order 2's retries take about two
// seconds; a context of 300 ms ends the run with order 2 unsettled, and the
// queues are still removed.
func TestBrokerDemoGivesUpAtItsTimeout(t *testing.T) {
	t.Parallel()
	conn, err := broker.Open(t.Context(), "memory://")
	require.NoError(t, err)
	t.Cleanup(func() { require.NoError(t, conn.Close(context.Background())) })
	ctx, cancel := context.WithTimeout(t.Context(), 300*time.Millisecond)
	defer cancel()
	err = run(ctx, conn, "timeout.orders", &bytes.Buffer{})
	require.ErrorIs(t, err, context.DeadlineExceeded)
	require.ErrorContains(t, err, "still unsettled")
	requireDeleted(t, conn, "timeout.orders")
}
