package broker_test

import (
	"context"
	"encoding/json"
	"log/slog"
	"regexp"
	"sync/atomic"
	"testing"
	"time"

	amqp "github.com/rabbitmq/amqp091-go"
	"github.com/stretchr/testify/require"

	"github.com/acemq/acemq-flow/broker"
	"github.com/acemq/acemq-flow/broker/rabbitmq"
	"github.com/acemq/acemq-flow/broker/transport"
	"github.com/acemq/acemq-flow/internal/brokertest"
	"github.com/acemq/acemq-flow/internal/testenv"
)

// counting is a log handler that counts the records with one message, or
// every record at level and above when msg is "".
type counting struct {
	slog.Handler
	msg   string
	level slog.Level
	n     *atomic.Int32
}

func (c counting) Handle(ctx context.Context, r slog.Record) error {
	if r.Message == c.msg || c.msg == "" && r.Level >= c.level {
		c.n.Add(1)
	}
	return c.Handler.Handle(ctx, r)
}

func (c counting) WithAttrs(attrs []slog.Attr) slog.Handler {
	return counting{Handler: c.Handler.WithAttrs(attrs), msg: c.msg, level: c.level, n: c.n}
}

func (c counting) WithGroup(name string) slog.Handler {
	return counting{Handler: c.Handler.WithGroup(name), msg: c.msg, level: c.level, n: c.n}
}

// foreign is another AceMQ member on the same broker, declaring and
// consuming a consumer queue exactly as the contract says (docs/wire.md,
// "Queues a consumer owns"): a plain amqp091-go client on RabbitMQ, a bare
// transport on the loopback, which speaks no AMQP.
type foreign struct {
	t     *testing.T
	plain *amqp.Channel
	tr    transport.Transport
}

func newForeign(t *testing.T, h *brokertest.Harness) foreign {
	if h.Rabbit {
		return foreign{t: t, plain: h.Plain()}
	}
	return foreign{t: t, tr: h.Open(broker.Config{}).Transport()}
}

// contractArgs are the arguments of Q, and of nothing else, in the
// contract.
func contractArgs(q string) map[string]any {
	return map[string]any{"x-queue-type": "quorum", "x-dead-letter-exchange": "", "x-dead-letter-routing-key": q + broker.DeadLetterSuffix}
}

// declare declares q, q.dlq and q.parked: durable quorum queues, q with
// the contract's dead-letter arguments and nothing more.
func (f foreign) declare(q string) error {
	f.t.Helper()
	queues := []struct {
		name string
		args map[string]any
	}{
		{q, contractArgs(q)},
		{q + broker.DeadLetterSuffix, map[string]any{"x-queue-type": "quorum"}},
		{q + broker.ParkedSuffix, map[string]any{"x-queue-type": "quorum"}},
	}
	for _, d := range queues {
		var err error
		if f.plain != nil {
			_, err = f.plain.QueueDeclare(d.name, true, false, false, false, d.args)
		} else {
			err = f.tr.Declare(brokertest.Ctx(f.t), transport.Topology{Queues: []transport.Queue{{Name: d.name, Durable: true, Args: d.args}}})
		}
		if err != nil {
			return err
		}
	}
	return nil
}

// consume consumes q and hands over the message id of every delivery,
// acknowledged, until the returned function cancels it.
func (f foreign) consume(q string) (<-chan string, func()) {
	f.t.Helper()
	ids := make(chan string, 16)
	if f.plain != nil {
		tag := testenv.Name(f.t, "foreign")
		deliveries, err := f.plain.Consume(q, tag, false, false, false, false, nil)
		require.NoError(f.t, err)
		go func() {
			for d := range deliveries {
				ids <- d.MessageId
				_ = d.Ack(false)
			}
		}()
		return ids, func() { require.NoError(f.t, f.plain.Cancel(tag, false)) }
	}
	sub, err := f.tr.Consume(brokertest.Ctx(f.t), q, transport.ConsumeOptions{Prefetch: 1})
	require.NoError(f.t, err)
	go func() {
		for d := range sub.Deliveries() {
			ids <- d.MessageID
			_ = d.Settler.Ack()
		}
	}()
	return ids, func() { require.NoError(f.t, sub.Cancel(brokertest.Ctx(f.t))) }
}

// A member of another language declares a consumer queue after a Go
// consumer did, as the contract says: the declaration is equivalent (no
// PRECONDITION_FAILED), and the other member consumes from it.
func TestForeignMemberDeclaresAfterGoConsumer(t *testing.T) {
	brokertest.Each(t, func(t *testing.T, h *brokertest.Harness) {
		ctx := brokertest.Ctx(t)
		q := h.Queue("go-first")
		conn := h.Open(broker.Config{})
		handler, seen := brokertest.Recorder(func(*broker.Message) broker.Ack { return broker.Accept() })
		k, err := conn.Consume(ctx, q, handler)
		require.NoError(t, err)
		require.NoError(t, conn.Publish(ctx, "x", broker.To(q), broker.MessageID("to-go")))
		require.Equal(t, "to-go", brokertest.Next(t, seen, 5*time.Second).Msg.ID)

		other := newForeign(t, h)
		require.NoError(t, other.declare(q), "the Go consumer's queue has the contract's arguments and no others")
		ids, cancel := other.consume(q)
		defer cancel()
		require.NoError(t, k.Cancel(ctx))
		require.NoError(t, conn.Publish(ctx, "x", broker.To(q), broker.MessageID("to-foreign")))
		require.Equal(t, "to-foreign", brokertest.Next(t, ids, 5*time.Second))
	})
}

// A Go consumer declares a consumer queue another member declared as the
// contract says: it is the same declaration, so nothing is refused or
// tolerated (no warning), and the Go consumer consumes from it.
func TestGoConsumerDeclaresAfterForeignMember(t *testing.T) {
	brokertest.Each(t, func(t *testing.T, h *brokertest.Harness) {
		ctx := brokertest.Ctx(t)
		q := h.Queue("foreign-first")
		other := newForeign(t, h)
		require.NoError(t, other.declare(q))
		ids, cancel := other.consume(q)
		require.NoError(t, h.Admin.Publish(ctx, "x", broker.To(q), broker.MessageID("to-foreign")))
		require.Equal(t, "to-foreign", brokertest.Next(t, ids, 5*time.Second))
		cancel()

		var warnings atomic.Int32
		conn := h.Open(broker.Config{Logger: slog.New(counting{Handler: testenv.Logger(t).Handler(), level: slog.LevelWarn, n: &warnings})})
		seen := h.Sink(conn, q)
		require.NoError(t, conn.Publish(ctx, "x", broker.To(q), broker.MessageID("to-go")))
		require.Equal(t, "to-go", brokertest.Next(t, seen, 5*time.Second).Msg.ID)
		require.Zero(t, warnings.Load(), "declaring the contract's queue is no special case")
		require.NoError(t, other.declare(q), "and it still has the contract's arguments")
	})
}

// A consumer queue an earlier version of this library declared carries
// x-delivery-limit (20, as a long; any integer width here), which
// RabbitMQ refuses to see left out of a declaration. The new code declares
// it as it exists, warns once per queue, and consumes from it; the queue
// keeps its limit. Any other difference is still refused.
func TestConsumeKeepsAQueueOfAnEarlierVersion(t *testing.T) {
	brokertest.Each(t, func(t *testing.T, h *brokertest.Harness) {
		ctx := brokertest.Ctx(t)
		old := func(q string, limit any) broker.Topology {
			top := broker.ConsumerTopology(q)
			top.Queues[0].Args["x-delivery-limit"] = limit
			return top
		}
		var warned atomic.Int32
		logger := slog.New(counting{Handler: testenv.Logger(t).Handler(),
			msg: "queue exists with the x-delivery-limit of an earlier version; declared as it is", n: &warned})
		conn := h.Open(broker.Config{Logger: logger})

		for i, limit := range []any{int64(broker.DeliveryLimit), int16(7)} {
			q := h.Queue("earlier")
			require.NoError(t, h.Admin.Transport().Declare(ctx, old(q, limit)))
			seen := h.Sink(conn, q)
			require.NoError(t, conn.Publish(ctx, "x", broker.To(q), broker.MessageID("m")))
			require.Equal(t, "m", brokertest.Next(t, seen, 5*time.Second).Msg.ID)
			require.NoError(t, conn.Declare(ctx, broker.ConsumerTopology(q)), "declared again")
			require.Equal(t, int32(i+1), warned.Load(), "one warning per queue (limit %v)", limit)
			err := h.Admin.Transport().Declare(ctx, broker.ConsumerTopology(q))
			require.True(t, transport.IsCode(err, transport.PreconditionFailed), "the queue keeps its limit %v: want 406, got %v", limit, err)
		}

		q := h.Queue("earlier-elsewhere")
		elsewhere := old(q, int64(broker.DeliveryLimit))
		elsewhere.Queues[0].Args["x-dead-letter-routing-key"] = "elsewhere"
		require.NoError(t, h.Admin.Transport().Declare(ctx, elsewhere))
		_, err := conn.Consume(ctx, q, broker.Func(func(context.Context, *broker.Message) error { return nil }))
		require.True(t, transport.IsCode(err, transport.PreconditionFailed), "want 406, got %v", err)
		require.ErrorContains(t, err, "'x-dead-letter-routing-key'")
	})
}

// A message no amqp091-go reader can read (a header array of 10,000
// elements, published by a plain client) makes the consumer's connection
// drop every time it is delivered. The operator's delivery-limit policy
// (DeliveryLimitPolicy, here for this queue alone) ends that in Q.dlq after
// a bounded number of reconnects, and the message queued behind it,
// delivered with it every time until then, is handled rather than
// dead-lettered with it.
func TestUnreadableMessageEndsInDeadLetterQueue(t *testing.T) {
	brokertest.OnRabbit(t, func(t *testing.T, h *brokertest.Harness) {
		ctx := brokertest.Ctx(t)
		var reconnects atomic.Int32
		logger := slog.New(counting{Handler: testenv.Logger(t).Handler(), msg: "rabbitmq reconnected", n: &reconnects})
		conn := h.Open(broker.Config{Logger: logger,
			RabbitMQ: rabbitmq.Config{ReconnectMin: 10 * time.Millisecond, ReconnectMax: 100 * time.Millisecond}})
		q := h.Queue("unreadable")
		testenv.SetPolicy(t, h.URL, q, "^"+regexp.QuoteMeta(q)+"$", "queues", policyDefinition(t))
		h.Declare(q)

		plain := h.Plain()
		route := make([]any, 10_000)
		for i := range route {
			route[i] = "step"
		}
		require.NoError(t, plain.PublishWithContext(ctx, "", q, false, false, amqp.Publishing{
			MessageId: "poison", DeliveryMode: amqp.Persistent, Headers: amqp.Table{"x-acemq-route": route}}))
		require.NoError(t, plain.PublishWithContext(ctx, "", q, false, false, amqp.Publishing{
			MessageId: "behind", DeliveryMode: amqp.Persistent, ContentType: "application/json", Body: []byte(`"ok"`)}))
		h.WaitDepth(q, 2, 10*time.Second)

		handler, seen := brokertest.Recorder(func(*broker.Message) broker.Ack { return broker.Accept() })
		_, err := conn.Consume(ctx, q, handler)
		require.NoError(t, err)

		got := brokertest.Next(t, seen, 50*time.Second)
		require.Equal(t, "behind", got.Msg.ID)
		h.WaitDepth(q+broker.DeadLetterSuffix, 1, 10*time.Second)
		h.WaitDepth(q, 0, 10*time.Second)
		n := reconnects.Load()
		t.Logf("the unreadable message cost %d reconnects", n)
		require.LessOrEqual(t, n, int32(broker.DeliveryLimit+2), "bounded by the delivery limit")
		brokertest.Nothing(t, seen, 200*time.Millisecond)
	})
}

// policyDefinition is DeliveryLimitPolicy's definition as rabbitmqctl
// takes it.
func policyDefinition(t *testing.T) string {
	b, err := json.Marshal(broker.DeliveryLimitPolicy(broker.DefaultLadder).Definition)
	require.NoError(t, err)
	return string(b)
}

// DeliveryLimitPolicy, set as docs/operations.md says, gives the limit to
// the consumer queues of its virtual host and to nothing else: not to
// Q.dlq and Q.parked, not to the ladder's queues, not to a stream. A
// message taken back more than 20 times leaves Q for Q.dlq; in Q.dlq it
// stays however often it is taken back.
func TestDeliveryLimitPolicy(t *testing.T) {
	t.Parallel()
	url := testenv.VHost(t)
	h := brokertest.New(t, url, true)
	ctx := brokertest.Ctx(t)
	p := broker.DeliveryLimitPolicy(h.Ladder)
	testenv.SetPolicy(t, url, p.Name, p.Pattern, p.ApplyTo, policyDefinition(t))

	q := h.Queue("limited")
	h.Declare(q)
	require.NoError(t, h.Admin.DeclareLadder(ctx))
	stream := h.Queue("stream")
	require.NoError(t, h.Admin.Declare(ctx, broker.Topology{Queues: []broker.Queue{
		{Name: stream, Durable: true, Args: broker.Table{"x-queue-type": "stream"}}}}))

	want := map[string]string{q: p.Name, q + broker.DeadLetterSuffix: "", q + broker.ParkedSuffix: "", stream: ""}
	for _, lq := range broker.LadderTopology(h.Ladder).Queues {
		want[lq.Name] = ""
	}
	require.Equal(t, want, testenv.QueuePolicies(t, url))

	// takeBack gets the message at the head of queue and nacks it back,
	// times times, polling: a message nacked back is on its way for a
	// moment.
	takeBack := func(queue string, times int) {
		t.Helper()
		for range times {
			var d *transport.Delivery
			require.Eventually(t, func() bool {
				var err error
				d, err = h.Admin.Transport().Get(ctx, queue)
				require.NoError(t, err)
				return d != nil
			}, 5*time.Second, 5*time.Millisecond, "nothing on %s", queue)
			require.NoError(t, d.Nack(true))
		}
	}
	dlq := q + broker.DeadLetterSuffix
	require.NoError(t, h.Admin.Publish(ctx, "x", broker.To(dlq), broker.MessageID("in-dlq")))
	takeBack(dlq, broker.DeliveryLimit+1)
	require.Equal(t, "in-dlq", h.Get(dlq, 5*time.Second).MessageID, "Q.dlq has no limit: it keeps the message")

	require.NoError(t, h.Admin.Publish(ctx, "x", broker.To(q), broker.MessageID("in-q")))
	takeBack(q, broker.DeliveryLimit+1)
	dead := h.Get(dlq, 5*time.Second)
	require.Equal(t, "in-q", dead.MessageID, "past the limit, Q dead-letters to Q.dlq")
	deaths, _ := dead.Headers["x-death"].([]any)
	require.NotEmpty(t, deaths)
	require.Equal(t, "delivery_limit", deaths[0].(transport.Table)["reason"])
	require.Zero(t, h.Depth(q))
}
