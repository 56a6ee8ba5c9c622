package patterns_test

import (
	"encoding/json"
	"fmt"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/acemq/acemq-flow/broker"
	"github.com/acemq/acemq-flow/broker/transport"
	"github.com/acemq/acemq-flow/internal/brokertest"
	"github.com/acemq/acemq-flow/patterns"
)

// replayFirstSeen is the x-acemq-first-seen every seeded dead letter has.
var replayFirstSeen = time.UnixMilli(1764489600123)

// replaySeed puts n dead letters of queue q on q.dlq, in order, as a
// consumer giving up on attempt 5 would have left them: {"n": i}, id m-i,
// correlation c-i, run run-i.
func replaySeed(h *brokertest.Harness, conn *broker.Conn, q string, n int) {
	h.T.Helper()
	ctx := brokertest.Ctx(h.T)
	for i := range n {
		out, err := conn.Prepare(ctx, map[string]int{"n": i}, broker.To(q+broker.DeadLetterSuffix), broker.Mandatory(),
			broker.MessageID(fmt.Sprintf("m-%d", i)), broker.CorrelationID(fmt.Sprintf("c-%d", i)),
			broker.RunID(fmt.Sprintf("run-%d", i)), broker.FirstSeen(replayFirstSeen), broker.Header("tenant", "acme"))
		require.NoError(h.T, err)
		out.Message.Headers[broker.HeaderAttempt] = int64(5)
		out.Message.Headers[broker.HeaderError] = fmt.Sprintf("timeout talking to the bank (%d)", i)
		out.Message.Headers[broker.HeaderQueue] = q
		require.NoError(h.T, conn.Send(ctx, out))
	}
}

// replayN is a seeded message's n.
func replayN(t *testing.T, body []byte) int {
	t.Helper()
	var v map[string]int
	require.NoError(t, json.Unmarshal(body, &v))
	return v["n"]
}

func replayEveryFourth(_ broker.Envelope, body []byte) bool {
	var v map[string]int
	return json.Unmarshal(body, &v) == nil && v["n"]%4 == 0
}

// TestReplayInStages: 2,000 dead letters, a filter selecting one in four, a
// first pass limited to 300 and a second that drains the rest.
func TestReplayInStages(t *testing.T) {
	brokertest.OnRabbit(t, func(t *testing.T, h *brokertest.Harness) {
		ctx := brokertest.Ctx(t)
		conn := h.Open(broker.Config{})
		q := h.Queue("replay")
		dlq := q + broker.DeadLetterSuffix
		require.NoError(t, conn.Declare(ctx, broker.ConsumerTopology(q)))
		replaySeed(h, conn, q, 2000)
		before := time.Now().Add(-time.Second)

		var mu sync.Mutex
		calls := 0
		var last patterns.ReplayResult
		res, err := patterns.Replay(ctx, conn, dlq, patterns.ReplayFilter(replayEveryFourth), patterns.ReplayLimit(300),
			patterns.ReplayProgress(func(r patterns.ReplayResult) {
				mu.Lock()
				calls++
				last = r
				mu.Unlock()
			}))
		require.NoError(t, err)
		require.Equal(t, patterns.ReplayResult{Moved: 300, Skipped: 897, Reason: patterns.ReplayReasonLimit}, res)
		require.Equal(t, "moved 300, skipped 897 (limit)", res.String())
		require.Equal(t, 300+897, calls, "progress after every message")
		require.Equal(t, patterns.ReplayResult{Moved: 300, Skipped: 897}, last)
		h.WaitDepth(q, 300, 10*time.Second)
		h.WaitDepth(dlq, 1700, 10*time.Second)

		res, err = patterns.Replay(ctx, conn, dlq, patterns.ReplayFilter(replayEveryFourth))
		require.NoError(t, err)
		require.Equal(t, "moved 200, skipped 1500 (drained)", res.String())

		replayed := h.Drain(q)
		require.Len(t, replayed, 500)
		seen := map[int]bool{}
		for _, d := range replayed {
			n := replayN(t, d.Body)
			require.Zero(t, n%4)
			seen[n] = true
			require.Equal(t, fmt.Sprintf("m-%d", n), d.MessageID, "identity untouched")
			require.Equal(t, fmt.Sprintf("c-%d", n), d.CorrelationID)
			require.Equal(t, fmt.Sprintf("run-%d", n), d.Headers[broker.HeaderRunID])
			require.Equal(t, replayFirstSeen.UnixMilli(), d.Headers[broker.HeaderFirstSeen])
			require.Equal(t, int64(1), d.Headers[broker.HeaderAttempt], "back on attempt 1")
			require.NotContains(t, d.Headers, broker.HeaderError, "x-acemq-error cleared")
			require.Equal(t, dlq, d.Headers[broker.HeaderReplayedFrom])
			require.Equal(t, int64(1), d.Headers[broker.HeaderReplayCount])
			at, ok := transport.Int(d.Headers[broker.HeaderReplayedAt])
			require.True(t, ok)
			require.WithinRange(t, time.UnixMilli(at), before, time.Now())
			require.Equal(t, "acme", d.Headers["tenant"])
		}
		require.Len(t, seen, 500, "each selected message exactly once")

		declined := h.Drain(dlq)
		require.Len(t, declined, 1500)
		prev := -1
		for _, d := range declined {
			n := replayN(t, d.Body)
			require.NotZero(t, n%4)
			require.Greater(t, n, prev, "declined messages keep their order in the dead-letter queue")
			prev = n
			require.Equal(t, int64(5), d.Headers[broker.HeaderAttempt], "declined ones untouched")
			require.NotContains(t, d.Headers, broker.HeaderReplayCount)
		}
	})
}

// TestReplayDiscard: a discarding pass takes out exactly the messages its
// filter accepts, copies them nowhere, and leaves the rest in their order;
// combined with a destination it is refused.
func TestReplayDiscard(t *testing.T) {
	brokertest.Each(t, func(t *testing.T, h *brokertest.Harness) {
		ctx := brokertest.Ctx(t)
		conn := h.Open(broker.Config{})
		q := h.Queue("discard")
		dlq := q + broker.DeadLetterSuffix
		require.NoError(t, conn.Declare(ctx, broker.ConsumerTopology(q)))
		replaySeed(h, conn, q, 40)
		res, err := patterns.Replay(ctx, conn, dlq, patterns.ReplayDiscard(), patterns.ReplayFilter(replayEveryFourth))
		require.NoError(t, err)
		require.Equal(t, patterns.ReplayResult{Discarded: 10, Skipped: 30, Reason: patterns.ReplayReasonDrained}, res)
		require.Equal(t, "discarded 10, skipped 30 (drained)", res.String())
		require.Zero(t, h.Depth(q), "nothing was copied back")
		left := h.Drain(dlq)
		require.Len(t, left, 30)
		prev := -1
		for _, d := range left {
			n := replayN(t, d.Body)
			require.NotZero(t, n%4, "a discarded message is gone")
			require.Greater(t, n, prev, "the rest keep their order")
			prev = n
		}
		_, err = patterns.Replay(ctx, conn, dlq, patterns.ReplayDiscard(), patterns.ReplayTo("", q))
		require.ErrorIs(t, err, broker.ErrInvalidOption)
	})
}

// TestReplayToUnboundDestinationLosesNothing: nothing is bound to the
// destination, so the first copy is returned; the replay stops with
// ErrReplayFailed and every message is still in the dead-letter queue.
func TestReplayToUnboundDestinationLosesNothing(t *testing.T) {
	brokertest.Each(t, func(t *testing.T, h *brokertest.Harness) {
		ctx := brokertest.Ctx(t)
		conn := h.Open(broker.Config{})
		q := h.Queue("replay-unbound")
		dlq := q + broker.DeadLetterSuffix
		require.NoError(t, conn.Declare(ctx, broker.ConsumerTopology(q)))
		exchange := h.Exchange("replay-nowhere")
		replaySeed(h, conn, q, 50)

		res, err := patterns.Replay(ctx, conn, dlq, patterns.ReplayTo(exchange, "orders.new"))
		require.ErrorIs(t, err, patterns.ErrReplayFailed)
		require.ErrorIs(t, err, broker.ErrUnroutable)
		require.Zero(t, res.Moved)
		require.Empty(t, res.Reason)
		h.WaitDepth(dlq, 50, 10*time.Second)
		left := h.Drain(dlq)
		require.Len(t, left, 50, "nothing lost")
		for i, d := range left {
			require.Equal(t, i, replayN(t, d.Body), "and still in order")
		}
	})
}

// TestReplaySlowFilterDoesNotEndThePass: a filter slower than the pass's
// idle wait must not make it think the queue is drained while deliveries
// it has not read yet wait for it.
func TestReplaySlowFilterDoesNotEndThePass(t *testing.T) {
	brokertest.Each(t, func(t *testing.T, h *brokertest.Harness) {
		ctx := brokertest.Ctx(t)
		conn := h.Open(broker.Config{})
		q := h.Queue("replay-slow")
		require.NoError(t, conn.Declare(ctx, broker.ConsumerTopology(q)))
		const n = 50
		replaySeed(h, conn, q, n)
		h.WaitDepth(q+broker.DeadLetterSuffix, n, 10*time.Second)

		seen := 0
		res, err := patterns.Replay(ctx, conn, q+broker.DeadLetterSuffix, patterns.ReplayFilter(func(broker.Envelope, []byte) bool {
			// Every delivery is prefetched by now; each of the first
			// four takes longer than the idle wait.
			if seen++; seen <= 4 {
				time.Sleep(400 * time.Millisecond)
			}
			return true
		}))
		require.NoError(t, err)
		require.Equal(t, patterns.ReplayResult{Moved: n, Reason: patterns.ReplayReasonDrained}, res)
		require.Equal(t, n, h.Depth(q))
		require.Zero(t, h.Depth(q+broker.DeadLetterSuffix))
	})
}

// TestReplayBrokerDeadLetteredGoesBack: a message the broker dead-lettered
// itself (here: expired) has no x-acemq-queue; it goes back to the queue
// its x-first-death-queue names.
func TestReplayBrokerDeadLetteredGoesBack(t *testing.T) {
	brokertest.Each(t, func(t *testing.T, h *brokertest.Harness) {
		ctx := brokertest.Ctx(t)
		conn := h.Open(broker.Config{})
		q := h.Queue("replay-expired")
		require.NoError(t, conn.Declare(ctx, broker.ConsumerTopology(q)))
		require.NoError(t, conn.Publish(ctx, "stale", broker.To(q), broker.Expires(time.Millisecond), broker.MessageID("m-stale")))
		h.WaitDepth(q+broker.DeadLetterSuffix, 1, 10*time.Second)

		res, err := patterns.Replay(ctx, conn, q+broker.DeadLetterSuffix)
		require.NoError(t, err)
		require.Equal(t, 1, res.Moved)
		d := h.Get(q, 5*time.Second)
		require.Equal(t, "m-stale", d.MessageID)
		require.Equal(t, `"stale"`, string(d.Body))
	})
}

// TestReplayRestartFalse: the copy is exactly what was there, stamped.
func TestReplayRestartFalse(t *testing.T) {
	brokertest.Each(t, func(t *testing.T, h *brokertest.Harness) {
		ctx := brokertest.Ctx(t)
		conn := h.Open(broker.Config{})
		q := h.Queue("replay-audit")
		audit := h.Queue("replay-audit-copy")
		require.NoError(t, conn.Declare(ctx, broker.ConsumerTopology(q).Merge(broker.ConsumerTopology(audit))))
		replaySeed(h, conn, q, 3)

		res, err := patterns.Replay(ctx, conn, q+broker.DeadLetterSuffix, patterns.ReplayTo("", audit), patterns.ReplayRestart(false),
			patterns.ReplayInFlight(1))
		require.NoError(t, err)
		require.Equal(t, "moved 3, skipped 0 (drained)", res.String())
		res, err = patterns.Replay(ctx, conn, audit, patterns.ReplayTo("", q+broker.DeadLetterSuffix), patterns.ReplayRestart(false),
			patterns.ReplayInFlight(1))
		require.NoError(t, err)
		require.Equal(t, 3, res.Moved)
		for i, d := range h.Drain(q + broker.DeadLetterSuffix) {
			require.Equal(t, i, replayN(t, d.Body), "in flight 1 keeps the order")
			require.Equal(t, int64(5), d.Headers[broker.HeaderAttempt])
			require.Equal(t, fmt.Sprintf("timeout talking to the bank (%d)", i), d.Headers[broker.HeaderError])
			require.Equal(t, int64(2), d.Headers[broker.HeaderReplayCount], "replayed twice")
			require.Equal(t, audit, d.Headers[broker.HeaderReplayedFrom], "from the last queue it was taken from")
		}
	})
}

func TestReplayRefusals(t *testing.T) {
	brokertest.Each(t, func(t *testing.T, h *brokertest.Harness) {
		ctx := brokertest.Ctx(t)
		conn := h.Open(broker.Config{})
		q := h.Queue("replay-refuse")
		dlq := q + broker.DeadLetterSuffix
		require.NoError(t, conn.Declare(ctx, broker.ConsumerTopology(q)))

		_, err := patterns.Replay(ctx, conn, dlq, patterns.ReplayTo("", ""))
		require.ErrorIs(t, err, broker.ErrInvalidOption, "the default exchange with no routing key would loop")
		_, err = patterns.Replay(ctx, conn, dlq, patterns.ReplayTo("", dlq))
		require.ErrorIs(t, err, broker.ErrInvalidOption, "and so would the queue itself")
		_, err = patterns.Replay(ctx, conn, dlq, patterns.ReplayLimit(-1))
		require.ErrorIs(t, err, broker.ErrInvalidOption)
		_, err = patterns.Replay(ctx, conn, q+".missing")
		require.True(t, transport.IsCode(err, transport.NotFound), "%v", err)

		replaySeed(h, conn, q, 2)
		res, err := patterns.Replay(ctx, conn, dlq, patterns.ReplayDeadline(time.Now()))
		require.NoError(t, err)
		require.Equal(t, "moved 0, skipped 0 (deadline)", res.String())

		require.NoError(t, conn.Publish(ctx, map[string]int{"n": 2}, broker.To(dlq), broker.MessageID("no-origin")))
		res, err = patterns.Replay(ctx, conn, dlq)
		require.ErrorIs(t, err, patterns.ErrReplayFailed, "a message with no x-acemq-queue has nowhere to go back to")
		require.ErrorContains(t, err, "no-origin")
		require.Equal(t, 2, res.Moved, "the ones before it were moved")
		h.WaitDepth(dlq, 1, 10*time.Second)
		h.WaitDepth(q, 2, 10*time.Second)
	})
}

// TestReplayWritesFirstSeenOfForeignMessage: a dead letter without
// x-acemq-first-seen (its publisher knew nothing of AceMQ) is replayed
// carrying the first-seen worked out for it, its timestamp property or the
// moment the replay read it (docs/wire.md, "Reading and writing these
// headers"), so the consumer's MaxAge measures from there.
func TestReplayWritesFirstSeenOfForeignMessage(t *testing.T) {
	brokertest.Each(t, func(t *testing.T, h *brokertest.Harness) {
		ctx := brokertest.Ctx(t)
		conn := h.Open(broker.Config{})
		q := h.Queue("replay-foreign")
		dlq := q + broker.DeadLetterSuffix
		require.NoError(t, conn.Declare(ctx, broker.ConsumerTopology(q)))
		stamp := time.Now().Add(-time.Hour).Truncate(time.Second)
		for id, ts := range map[string]time.Time{"stamped": stamp, "bare": {}} {
			require.NoError(t, conn.Transport().Publish(ctx, transport.Publishing{RoutingKey: dlq, Mandatory: true,
				Message: transport.Message{MessageID: id, Timestamp: ts, Body: []byte("x"),
					Headers: transport.Table{broker.HeaderQueue: q}}}))
		}
		before := time.Now().UnixMilli()

		res, err := patterns.Replay(ctx, conn, dlq)
		require.NoError(t, err)
		require.Equal(t, 2, res.Moved)
		h.WaitDepth(q, 2, 10*time.Second)
		firstSeen := map[string]int64{}
		for _, d := range h.Drain(q) {
			ms, ok := transport.Int(d.Headers[broker.HeaderFirstSeen])
			require.True(t, ok, "%s carries no %s: %v", d.MessageID, broker.HeaderFirstSeen, d.Headers)
			firstSeen[d.MessageID] = ms
		}
		require.Equal(t, stamp.UnixMilli(), firstSeen["stamped"], "first seen at its timestamp property")
		require.GreaterOrEqual(t, firstSeen["bare"], before, "first seen when the replay read it")
		require.LessOrEqual(t, firstSeen["bare"], time.Now().UnixMilli())
	})
}
