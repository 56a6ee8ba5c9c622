package transporttest

import (
	"fmt"
	"slices"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/acemq/acemq-flow/broker/transport"
	"github.com/acemq/acemq-flow/internal/testenv"
)

var settleTests = map[string]func(*testing.T, suite){
	"GetOnEmptyQueueReturnsNil": func(t *testing.T, s suite) {
		tr := s.connect(t)
		q := queue(t, tr, "empty", nil)
		d, err := tr.Get(ctx(t), q)
		require.NoError(t, err)
		require.Nil(t, d)
	},
	"AckRemoves": func(t *testing.T, s suite) {
		tr := s.connect(t)
		q := queue(t, tr, "ack", nil)
		publish(t, tr, "", q, "m")
		worker := s.connect(t)
		sub := consume(t, worker, q, 1)
		require.NoError(t, receive(t, sub, arrival).Ack())
		// Closing would requeue the message had the ack not removed it.
		require.NoError(t, worker.Close(ctx(t)))
		watch := consume(t, tr, q, 1)
		nothing(t, watch)
		require.Equal(t, 0, ready(t, tr, q))
	},
	"NackRequeueRedelivers": func(t *testing.T, s suite) {
		tr := s.connect(t)
		q := queue(t, tr, "requeue", nil)
		publish(t, tr, "", q, "m")
		d := get(t, tr, q)
		require.False(t, d.Redelivered)
		require.NoError(t, d.Nack(true))
		again := get(t, tr, q)
		require.True(t, again.Redelivered)
		require.Equal(t, "m", again.MessageID)
		require.NoError(t, again.Ack())
	},
	"NackWithoutDeadLetterExchangeDrops": func(t *testing.T, s suite) {
		tr := s.connect(t)
		q := queue(t, tr, "nack-drop", nil)
		publish(t, tr, "", q, "m")
		require.NoError(t, get(t, tr, q).Nack(false))
		watch := consume(t, tr, q, 1)
		nothing(t, watch)
	},
	"RequeueRestoresOriginalPositionInAClassicQueue": func(t *testing.T, s suite) {
		// Whether rejected or returned by a closing connection, a message
		// goes back to its place: the queue stays in publish order.
		requeueOrder(t, s, transport.Queue{Name: "requeue-classic"},
			[]string{"m0 redelivered", "m2 redelivered", "m3 redelivered", "m4 redelivered", "m5", "m6"})
	},
	"RequeueGoesToTheTailOfAQuorumQueue": func(t *testing.T, s suite) {
		// A rejected message goes behind everything ready, in the order of
		// the rejections; one returned by a closing connection is served
		// first, in the order they were delivered.
		requeueOrder(t, s, transport.Queue{Name: "requeue-quorum", Durable: true, Args: transport.Table{"x-queue-type": "quorum"}},
			[]string{"m0 redelivered", "m3 redelivered", "m5", "m4 redelivered", "m2 redelivered", "m6"})
	},
	"SettlingInAnyOrderSettlesEachDeliveryAlone": func(t *testing.T, s suite) {
		// Deliveries acked from several goroutines in any order while
		// others are still held, then the held ones rejected with requeue:
		// an ack that took a held delivery with it (a multiple ack over one
		// not acked) would lose it, or make its reject fail.
		const n, hold = 120, 10
		tr := s.connect(t)
		q := queue(t, tr, "any-order", nil)
		for i := range n {
			publish(t, tr, "", q, fmt.Sprintf("m%03d", i))
		}
		sub := consume(t, tr, q, n)
		held := make([]*transport.Delivery, 0, n)
		for range n {
			held = append(held, receive(t, sub, arrival))
		}
		var rejected []string
		var acks [4][]*transport.Delivery
		for i, d := range held {
			if i%(n/hold) == 3 {
				rejected = append(rejected, d.MessageID)
				continue
			}
			acks[i%len(acks)] = append(acks[i%len(acks)], d)
		}
		var wg sync.WaitGroup
		for g := range acks {
			wg.Go(func() {
				// Each goroutine acks its share backwards, so that acks
				// arrive out of tag order.
				for _, d := range slices.Backward(acks[g]) {
					assert.NoError(t, d.Ack())
				}
			})
		}
		wg.Wait()
		for _, d := range held {
			if slices.Contains(rejected, d.MessageID) {
				require.NoError(t, d.Nack(true))
			}
		}
		var again []string
		for range hold {
			d := receive(t, sub, arrival)
			require.True(t, d.Redelivered, "%s", d.MessageID)
			again = append(again, d.MessageID)
			require.NoError(t, d.Ack())
		}
		require.ElementsMatch(t, rejected, again)
		// Nothing acked comes back: the next delivery is a new message.
		publish(t, tr, "", q, "last")
		require.Equal(t, "last", receive(t, sub, arrival).MessageID)
	},
	"SettlingTwiceIsRefused": func(t *testing.T, s suite) {
		tr := s.connect(t)
		q := queue(t, tr, "twice", nil)
		publish(t, tr, "", q, "m1")
		publish(t, tr, "", q, "m2")
		d := get(t, tr, q)
		require.NoError(t, d.Ack())
		require.ErrorIs(t, d.Ack(), transport.ErrAlreadySettled)
		require.ErrorIs(t, d.Nack(true), transport.ErrAlreadySettled)

		sub := consume(t, tr, q, 1)
		c := receive(t, sub, arrival)
		require.NoError(t, c.Nack(false))
		require.ErrorIs(t, c.Ack(), transport.ErrAlreadySettled)
		require.ErrorIs(t, c.Nack(false), transport.ErrAlreadySettled)
	},
}

// requeueOrder declares q (its Name a prefix for testenv.Name), publishes
// m0 to m5 to it, takes m0 to m4 on a second connection (by basic.get, and
// by a consumer cancelled once they arrived), acks m1, rejects m4 then m2
// with requeue, closes that connection (m0 and m3 go back), publishes m6,
// and requires that the queue then yields want.
func requeueOrder(t *testing.T, s suite, q transport.Queue, want []string) {
	for _, byConsumer := range []bool{false, true} {
		t.Run(map[bool]string{false: "Get", true: "Consume"}[byConsumer], func(t *testing.T) {
			tr := s.connect(t)
			q := q
			q.Name = testenv.Name(t, q.Name)
			declare(t, tr, transport.Topology{Queues: []transport.Queue{q}})
			for i := range 6 {
				publish(t, tr, "", q.Name, fmt.Sprint("m", i))
			}
			worker := s.connect(t)
			taken := take(t, worker, q.Name, 5, byConsumer)
			for i, d := range taken {
				require.Equal(t, fmt.Sprint("m", i), d.MessageID)
			}
			require.NoError(t, taken[1].Ack())
			require.NoError(t, taken[4].Nack(true))
			require.NoError(t, taken[2].Nack(true))
			require.NoError(t, worker.Close(ctx(t)))
			// Publish only once everything is back, so that m6 is behind.
			waitReady(t, tr, q.Name, 5)
			publish(t, tr, "", q.Name, "m6")
			require.Equal(t, want, drain(t, tr, q.Name, 6))
		})
	}
}

// take receives n messages from q and leaves them unsettled: by basic.get,
// or with a subscription cancelled once they arrived (so that nothing is
// delivered to it again).
func take(t *testing.T, tr transport.Transport, q string, n int, byConsumer bool) []*transport.Delivery {
	t.Helper()
	out := make([]*transport.Delivery, 0, n)
	if !byConsumer {
		for range n {
			out = append(out, get(t, tr, q))
		}
		return out
	}
	sub := consume(t, tr, q, n)
	for range n {
		out = append(out, receive(t, sub, arrival))
	}
	require.NoError(t, sub.Cancel(ctx(t)))
	return out
}

// waitReady waits until q has n messages ready: settlements reach a broker
// asynchronously.
func waitReady(t *testing.T, tr transport.Transport, q string, n int) {
	t.Helper()
	require.Eventually(t, func() bool {
		st, err := tr.Inspect(ctx(t), q)
		return err == nil && st.Messages == n
	}, arrival, 10*time.Millisecond, "queue %q never had %d messages ready", q, n)
}

// drain waits until q has n messages ready, then fetches and acks them
// all, and returns their message IDs in order, each followed by
// " redelivered" when it was.
func drain(t *testing.T, tr transport.Transport, q string, n int) []string {
	t.Helper()
	waitReady(t, tr, q, n)
	var out []string
	for {
		d, err := tr.Get(ctx(t), q)
		require.NoError(t, err)
		if d == nil {
			return out
		}
		id := d.MessageID
		if d.Redelivered {
			id += " redelivered"
		}
		out = append(out, id)
		require.NoError(t, d.Ack())
	}
}
