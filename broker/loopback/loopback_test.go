package loopback_test

import (
	"context"
	"fmt"
	"math/rand/v2"
	"slices"
	"strconv"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
	"go.uber.org/goleak"

	"github.com/acemq/acemq-flow/broker/loopback"
	"github.com/acemq/acemq-flow/broker/transport"
	"github.com/acemq/acemq-flow/broker/transport/transporttest"
)

func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

func TestConformance(t *testing.T) {
	b := loopback.New()
	t.Cleanup(b.Close)
	transporttest.Run(t, func(*testing.T) transport.Transport { return b.Connect() })
}

// connect opens a connection to b that is closed when the test ends.
func connect(t *testing.T, b *loopback.Broker) transport.Transport {
	t.Helper()
	c := b.Connect()
	t.Cleanup(func() { require.NoError(t, c.Close(context.Background())) })
	return c
}

func declareQueue(t *testing.T, tr transport.Transport, q transport.Queue) {
	t.Helper()
	require.NoError(t, tr.Declare(t.Context(), transport.Topology{Queues: []transport.Queue{q}}))
}

func publish(t *testing.T, tr transport.Transport, queue string, msg transport.Message) {
	t.Helper()
	require.NoError(t, tr.Publish(t.Context(), transport.Publishing{RoutingKey: queue, Message: msg}))
}

func receive(t *testing.T, sub transport.Subscription) *transport.Delivery {
	t.Helper()
	select {
	case d, ok := <-sub.Deliveries():
		require.True(t, ok, "deliveries closed")
		return d
	case <-time.After(5 * time.Second):
		require.FailNow(t, "no delivery")
		return nil
	}
}

func TestStreamsAreRefused(t *testing.T) {
	t.Parallel()
	b := loopback.New()
	t.Cleanup(b.Close)
	tr := connect(t, b)
	err := tr.Declare(t.Context(), transport.Topology{Queues: []transport.Queue{
		{Name: "events", Durable: true, Args: transport.Table{"x-queue-type": "stream"}},
	}})
	require.ErrorIs(t, err, transport.ErrNotSupported)
	require.ErrorContains(t, err, "does not implement streams")
	_, err = tr.Inspect(t.Context(), "events")
	require.True(t, transport.IsCode(err, transport.NotFound))
}

func TestStreamConsumeArgumentsAreRefused(t *testing.T) {
	t.Parallel()
	b := loopback.New()
	t.Cleanup(b.Close)
	tr := connect(t, b)
	declareQueue(t, tr, transport.Queue{Name: "q"})
	for _, args := range []transport.Table{
		{"x-stream-offset": "first"},
		{"x-stream-offset": int64(42)},
		{"x-stream-offset": time.Now()},
		{"x-stream-filter": "eu"},
		{"x-priority": int64(1), "x-stream-match-unfiltered": true},
	} {
		for _, queue := range []string{"q", "no-such-stream"} {
			_, err := tr.Consume(t.Context(), queue, transport.ConsumeOptions{Prefetch: 1, Args: args})
			require.ErrorIs(t, err, transport.ErrNotSupported, "%s %v", queue, args)
			require.ErrorContains(t, err, "does not implement streams")
		}
	}
	st, err := tr.Inspect(t.Context(), "q")
	require.NoError(t, err)
	require.Zero(t, st.Consumers)
	_, err = tr.Consume(t.Context(), "q", transport.ConsumeOptions{Prefetch: 1, Args: transport.Table{"x-priority": int64(1)}})
	require.NoError(t, err, "other consume arguments are accepted")
}

// TestRequeueOrderAtScale requeues many messages in a random order, some
// by nack and some by closing the connection, around a ring buffer that has
// wrapped.
func TestRequeueOrderAtScale(t *testing.T) {
	t.Parallel()
	for _, quorum := range []bool{false, true} {
		t.Run(map[bool]string{false: "classic", true: "quorum"}[quorum], func(t *testing.T) {
			t.Parallel()
			b := loopback.New()
			t.Cleanup(b.Close)
			tr := connect(t, b)
			q := transport.Queue{Name: "q"}
			if quorum {
				q = transport.Queue{Name: "q", Durable: true, Args: transport.Table{"x-queue-type": "quorum"}}
			}
			declareQueue(t, tr, q)
			// Sized so that the ring buffer wraps without growing.
			const first, skipped, total, taken = 100, 60, 180, 100
			for i := range first {
				publish(t, tr, "q", transport.Message{MessageID: fmt.Sprint(i)})
			}
			for range skipped {
				d, err := tr.Get(t.Context(), "q")
				require.NoError(t, err)
				require.NoError(t, d.Ack())
			}
			for i := first; i < total; i++ {
				publish(t, tr, "q", transport.Message{MessageID: fmt.Sprint(i)})
			}
			worker := b.Connect()
			var held []*transport.Delivery
			for range taken {
				d, err := worker.Get(t.Context(), "q")
				require.NoError(t, err)
				held = append(held, d)
			}
			rng := rand.New(rand.NewPCG(1, 2))
			rng.Shuffle(len(held), func(i, j int) { held[i], held[j] = held[j], held[i] })
			var nacked, closed []string
			for i, d := range held {
				switch i % 3 {
				case 0:
					require.NoError(t, d.Ack())
				case 1:
					require.NoError(t, d.Nack(true))
					nacked = append(nacked, d.MessageID)
				default:
					closed = append(closed, d.MessageID)
				}
			}
			require.NoError(t, worker.Close(t.Context()))

			byNumber := func(ids []string) []string {
				return slices.SortedFunc(slices.Values(ids), func(a, b string) int {
					x, _ := strconv.Atoi(a)
					y, _ := strconv.Atoi(b)
					return x - y
				})
			}
			var untouched []string
			for i := skipped + taken; i < total; i++ {
				untouched = append(untouched, fmt.Sprint(i))
			}
			var want []string
			if quorum {
				// Returned by the close first, in delivery order; then what
				// was ready; then the nacked, in the order of the nacks.
				want = slices.Concat(byNumber(closed), untouched, nacked)
			} else {
				want = byNumber(slices.Concat(nacked, closed, untouched))
			}
			var got []string
			for {
				d, err := tr.Get(t.Context(), "q")
				require.NoError(t, err)
				if d == nil {
					break
				}
				got = append(got, d.MessageID)
				require.NoError(t, d.Ack())
			}
			require.Equal(t, want, got)
		})
	}
}

func TestNamedBrokersAreShared(t *testing.T) {
	t.Parallel()
	name := fmt.Sprintf("shared-%d", time.Now().UnixNano())
	b := loopback.Named(name)
	t.Cleanup(b.Close)
	require.Same(t, b, loopback.Named(name))
	require.Equal(t, "memory://"+name, b.Name())

	a, c := connect(t, b), connect(t, loopback.Named(name))
	require.Equal(t, "memory://"+name, a.Name())
	declareQueue(t, a, transport.Queue{Name: "q"})
	publish(t, c, "q", transport.Message{Body: []byte("m")})
	st, err := a.Inspect(t.Context(), "q")
	require.NoError(t, err)
	require.Equal(t, 1, st.Messages)

	other := loopback.New()
	t.Cleanup(other.Close)
	require.NotEqual(t, b.Name(), other.Name())
	_, err = connect(t, other).Inspect(t.Context(), "q")
	require.True(t, transport.IsCode(err, transport.NotFound), "New brokers are isolated")

	b.Close()
	require.NotSame(t, b, loopback.Named(name), "a closed named broker is replaced")
	loopback.Named(name).Close()
}

func TestMixedTTLQueueBlocksAtTheHead(t *testing.T) {
	t.Parallel()
	b := loopback.New()
	t.Cleanup(b.Close)
	tr := connect(t, b)
	declareQueue(t, tr, transport.Queue{Name: "dlq"})
	declareQueue(t, tr, transport.Queue{Name: "rung", Args: transport.Table{"x-dead-letter-exchange": "", "x-dead-letter-routing-key": "dlq"}})
	publish(t, tr, "rung", transport.Message{MessageID: "long", Expiration: "300"})
	publish(t, tr, "rung", transport.Message{MessageID: "short", Expiration: "1"})
	sub, err := tr.Consume(t.Context(), "dlq", transport.ConsumeOptions{Prefetch: 2})
	require.NoError(t, err)
	select {
	case d := <-sub.Deliveries():
		require.FailNow(t, "expired behind the head", "got %s", d.MessageID)
	case <-time.After(150 * time.Millisecond):
	}
	st, err := tr.Inspect(t.Context(), "rung")
	require.NoError(t, err)
	require.Equal(t, 2, st.Messages, "the expired message waits behind the head")
	require.Equal(t, "long", receive(t, sub).MessageID)
	require.Equal(t, "short", receive(t, sub).MessageID)
}

func TestCloseRequeuesInOrder(t *testing.T) {
	t.Parallel()
	b := loopback.New()
	t.Cleanup(b.Close)
	tr := connect(t, b)
	declareQueue(t, tr, transport.Queue{Name: "q"})
	worker := b.Connect()
	sub, err := worker.Consume(t.Context(), "q", transport.ConsumeOptions{Prefetch: 2})
	require.NoError(t, err)
	for _, id := range []string{"m1", "m2", "m3"} {
		publish(t, tr, "q", transport.Message{MessageID: id})
	}
	d1 := receive(t, sub)
	receive(t, sub)
	require.NoError(t, worker.Close(t.Context()))
	require.ErrorIs(t, d1.Ack(), transport.ErrClosed)
	_, ok := <-sub.Deliveries()
	require.False(t, ok)
	require.ErrorIs(t, worker.Publish(t.Context(), transport.Publishing{RoutingKey: "q"}), transport.ErrClosed)

	for _, want := range []struct {
		id          string
		redelivered bool
	}{{"m1", true}, {"m2", true}, {"m3", false}} {
		d, err := tr.Get(t.Context(), "q")
		require.NoError(t, err)
		require.Equal(t, want.id, d.MessageID)
		require.Equal(t, want.redelivered, d.Redelivered)
		require.NoError(t, d.Ack())
	}
}

func TestDeleteQueueEndsSubscriptions(t *testing.T) {
	t.Parallel()
	b := loopback.New()
	t.Cleanup(b.Close)
	tr := connect(t, b)
	declareQueue(t, tr, transport.Queue{Name: "q"})
	publish(t, tr, "q", transport.Message{})
	sub, err := tr.Consume(t.Context(), "q", transport.ConsumeOptions{Prefetch: 1})
	require.NoError(t, err)
	d := receive(t, sub)
	n, err := tr.DeleteQueue(t.Context(), "q")
	require.NoError(t, err)
	require.Zero(t, n)
	_, ok := <-sub.Deliveries()
	require.False(t, ok)
	require.True(t, transport.IsCode(sub.Err(), transport.NotFound), "Err: %v", sub.Err())
	require.NoError(t, d.Ack(), "settling a delivery of a deleted queue does nothing")
}

func TestDeadLetterCycleIsDropped(t *testing.T) {
	t.Parallel()
	b := loopback.New()
	t.Cleanup(b.Close)
	tr := connect(t, b)
	for _, q := range [][2]string{{"a", "b"}, {"b", "a"}} {
		declareQueue(t, tr, transport.Queue{Name: q[0], Args: transport.Table{
			"x-message-ttl": 10, "x-dead-letter-exchange": "", "x-dead-letter-routing-key": q[1],
		}})
	}
	publish(t, tr, "a", transport.Message{})
	require.Eventually(t, func() bool {
		a, errA := tr.Inspect(t.Context(), "a")
		b, errB := tr.Inspect(t.Context(), "b")
		return errA == nil && errB == nil && a.Messages+b.Messages == 0
	}, 5*time.Second, 5*time.Millisecond, "a message expiring around a loop is dropped")
}

func TestRejectedCycleIsKept(t *testing.T) {
	t.Parallel()
	b := loopback.New()
	t.Cleanup(b.Close)
	tr := connect(t, b)
	declareQueue(t, tr, transport.Queue{Name: "q", Args: transport.Table{"x-dead-letter-exchange": "", "x-dead-letter-routing-key": "q"}})
	publish(t, tr, "q", transport.Message{MessageID: "m"})
	for i := 1; i <= 3; i++ {
		d, err := tr.Get(t.Context(), "q")
		require.NoError(t, err)
		require.NotNil(t, d, "rejection %d", i)
		if i > 1 {
			death := d.Headers["x-death"].([]any)[0].(transport.Table)
			require.Equal(t, int64(i-1), death["count"])
		}
		require.NoError(t, d.Nack(false))
	}
}

func TestAlternateExchange(t *testing.T) {
	t.Parallel()
	b := loopback.New()
	t.Cleanup(b.Close)
	tr := connect(t, b)
	require.NoError(t, tr.Declare(t.Context(), transport.Topology{
		Exchanges: []transport.Exchange{
			{Name: "main", Kind: transport.Direct, Args: transport.Table{"alternate-exchange": "unrouted"}},
			{Name: "unrouted", Kind: transport.Fanout},
		},
		Queues:   []transport.Queue{{Name: "lost"}},
		Bindings: []transport.Binding{{Exchange: "unrouted", Queue: "lost"}},
	}))
	require.NoError(t, tr.Publish(t.Context(), transport.Publishing{Exchange: "main", RoutingKey: "k", Mandatory: true}))
	st, err := tr.Inspect(t.Context(), "lost")
	require.NoError(t, err)
	require.Equal(t, 1, st.Messages)
}

func TestSingleActiveConsumer(t *testing.T) {
	t.Parallel()
	b := loopback.New()
	t.Cleanup(b.Close)
	tr := connect(t, b)
	declareQueue(t, tr, transport.Queue{Name: "q", Args: transport.Table{"x-single-active-consumer": true}})
	first, err := tr.Consume(t.Context(), "q", transport.ConsumeOptions{Prefetch: 10})
	require.NoError(t, err)
	second, err := tr.Consume(t.Context(), "q", transport.ConsumeOptions{Prefetch: 10})
	require.NoError(t, err)
	publish(t, tr, "q", transport.Message{MessageID: "m1"})
	publish(t, tr, "q", transport.Message{MessageID: "m2"})
	require.Equal(t, "m1", receive(t, first).MessageID)
	require.Equal(t, "m2", receive(t, first).MessageID)
	require.NoError(t, first.Cancel(t.Context()))
	publish(t, tr, "q", transport.Message{MessageID: "m3"})
	require.Equal(t, "m3", receive(t, second).MessageID)
}

func TestUnsupportedArgumentsAreRefused(t *testing.T) {
	t.Parallel()
	b := loopback.New()
	t.Cleanup(b.Close)
	tr := connect(t, b)
	for _, args := range []transport.Table{{"x-expires": 1000}, {"x-max-priority": 5}} {
		err := tr.Declare(t.Context(), transport.Topology{Queues: []transport.Queue{{Name: "q", Args: args}}})
		require.ErrorIs(t, err, transport.ErrNotSupported)
	}
	err := tr.Declare(t.Context(), transport.Topology{Exchanges: []transport.Exchange{{Name: "h", Kind: transport.Headers}}})
	require.ErrorIs(t, err, transport.ErrNotSupported)
}

func TestClosedBroker(t *testing.T) {
	t.Parallel()
	b := loopback.New()
	tr := b.Connect()
	b.Close()
	b.Close()
	_, err := tr.Inspect(t.Context(), "q")
	require.ErrorIs(t, err, transport.ErrClosed)
	_, err = b.Connect().Get(t.Context(), "q")
	require.ErrorIs(t, err, transport.ErrClosed)
	require.NoError(t, tr.Close(t.Context()))
}

func TestManyMessages(t *testing.T) {
	t.Parallel()
	b := loopback.New()
	t.Cleanup(b.Close)
	tr := connect(t, b)
	declareQueue(t, tr, transport.Queue{Name: "q", Durable: true, Args: transport.Table{"x-queue-type": "quorum"}})
	const total, consumers, publishers = 20000, 4, 4
	var acked atomic.Int64
	var wg sync.WaitGroup
	for range consumers {
		sub, err := tr.Consume(t.Context(), "q", transport.ConsumeOptions{Prefetch: 50})
		require.NoError(t, err)
		wg.Go(func() {
			for d := range sub.Deliveries() {
				if err := d.Ack(); err != nil {
					t.Errorf("ack: %v", err)
				}
				acked.Add(1)
			}
		})
	}
	var pub sync.WaitGroup
	for p := range publishers {
		pub.Go(func() {
			for i := range total / publishers {
				err := tr.Publish(t.Context(), transport.Publishing{RoutingKey: "q",
					Message: transport.Message{MessageID: fmt.Sprint(p, "-", i), Headers: transport.Table{"n": i}}})
				if err != nil {
					t.Errorf("publish: %v", err)
					return
				}
			}
		})
	}
	pub.Wait()
	require.Eventually(t, func() bool { return acked.Load() == total }, 10*time.Second, 5*time.Millisecond)
	require.NoError(t, tr.Close(t.Context()))
	wg.Wait()
	st, err := connect(t, b).Inspect(t.Context(), "q")
	require.NoError(t, err)
	require.Zero(t, st.Messages)
}
