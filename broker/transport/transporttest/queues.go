package transporttest

import (
	"regexp"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/acemq/acemq-flow/broker/transport"
	"github.com/acemq/acemq-flow/internal/testenv"
)

var queueTests = map[string]func(*testing.T, suite){
	"ExclusiveQueueBelongsToItsConnection": func(t *testing.T, s suite) {
		tr := s.connect(t)
		owner := s.connect(t)
		q := transport.Queue{Name: testenv.Name(t, "exclusive"), Exclusive: true, AutoDelete: true}
		forget(t, tr, transport.Topology{Queues: []transport.Queue{q}})
		require.NoError(t, owner.Declare(ctx(t), transport.Topology{Queues: []transport.Queue{q}}))
		publish(t, tr, "", q.Name, "anyone may publish")
		require.Equal(t, 1, ready(t, owner, q.Name))

		err := tr.Declare(ctx(t), transport.Topology{Queues: []transport.Queue{q}})
		require.True(t, transport.IsCode(err, transport.ResourceLocked), "declare: want 405, got %v", err)
		_, err = tr.Consume(ctx(t), q.Name, transport.ConsumeOptions{Prefetch: 1})
		require.True(t, transport.IsCode(err, transport.ResourceLocked), "consume: want 405, got %v", err)
		_, err = tr.Get(ctx(t), q.Name)
		require.True(t, transport.IsCode(err, transport.ResourceLocked), "get: want 405, got %v", err)

		require.NoError(t, owner.Close(ctx(t)))
		gone(t, tr, q.Name)
	},
	"AutoDeleteQueueGoesWithLastConsumer": func(t *testing.T, s suite) {
		tr := s.connect(t)
		q := transport.Queue{Name: testenv.Name(t, "auto-delete"), AutoDelete: true}
		declare(t, tr, transport.Topology{Queues: []transport.Queue{q}})
		a, b := consume(t, tr, q.Name, 1), consume(t, tr, q.Name, 1)
		require.NoError(t, a.Cancel(ctx(t)))
		st, err := tr.Inspect(ctx(t), q.Name)
		require.NoError(t, err, "the queue stays while it has a consumer")
		require.Equal(t, 1, st.Consumers)
		require.NoError(t, b.Cancel(ctx(t)))
		gone(t, tr, q.Name)
	},
	"RedeclareWithOtherPropertiesFails": func(t *testing.T, s suite) {
		tr := s.connect(t)
		q := transport.Queue{Name: testenv.Name(t, "redeclare"), Durable: true, Args: transport.Table{"x-message-ttl": int64(60000)}}
		declare(t, tr, transport.Topology{Queues: []transport.Queue{q}})
		same := q
		same.Args = transport.Table{"x-message-ttl": int32(60000), "x-unchecked-argument": "anything"}
		require.NoError(t, tr.Declare(ctx(t), transport.Topology{Queues: []transport.Queue{same}}),
			"an integer of another width with the same value, and an argument RabbitMQ does not check, are equivalent")

		for name, other := range map[string]transport.Queue{
			"other ttl":     {Name: q.Name, Durable: true, Args: transport.Table{"x-message-ttl": int64(1000)}},
			"ttl left out":  {Name: q.Name, Durable: true},
			"added dlx":     {Name: q.Name, Durable: true, Args: transport.Table{"x-message-ttl": int64(60000), "x-dead-letter-exchange": ""}},
			"not durable":   {Name: q.Name, Args: q.Args},
			"auto-delete":   {Name: q.Name, Durable: true, AutoDelete: true, Args: q.Args},
			"quorum (type)": {Name: q.Name, Durable: true, Args: transport.Table{"x-message-ttl": int64(60000), "x-queue-type": "quorum"}},
		} {
			err := tr.Declare(ctx(t), transport.Topology{Queues: []transport.Queue{other}})
			require.True(t, transport.IsCode(err, transport.PreconditionFailed), "%s: want 406, got %v", name, err)
		}
		classic := q
		classic.Args = transport.Table{"x-message-ttl": int64(60000), "x-queue-type": "classic"}
		require.NoError(t, tr.Declare(ctx(t), transport.Topology{Queues: []transport.Queue{classic}}),
			"a queue declared without a type is classic")

		ex := exchange(t, tr, "redeclare", transport.Direct)
		err := tr.Declare(ctx(t), transport.Topology{Exchanges: []transport.Exchange{{Name: ex, Kind: transport.Fanout}}})
		require.True(t, transport.IsCode(err, transport.PreconditionFailed), "exchange kind: want 406, got %v", err)
		err = tr.Declare(ctx(t), transport.Topology{Exchanges: []transport.Exchange{{Name: ex, Kind: transport.Direct, Durable: true}}})
		require.True(t, transport.IsCode(err, transport.PreconditionFailed), "exchange durable: want 406, got %v", err)

		publish(t, tr, "", q.Name, "the transport still works")
		require.Equal(t, 1, ready(t, tr, q.Name))
	},
	"DeliveryLimitIsComparedOnRedeclare": func(t *testing.T, s suite) {
		// broker.Conn.Declare reads the refusal of a declaration that
		// leaves out the limit a queue has, in any integer width, to
		// declare a queue of an earlier version as it exists; the others
		// it must not mistake for it.
		tr := s.connect(t)
		refused := func(t *testing.T, q transport.Queue, received, current string) {
			t.Helper()
			err := tr.Declare(ctx(t), transport.Topology{Queues: []transport.Queue{q}})
			var ae *transport.AMQPError
			require.ErrorAs(t, err, &ae)
			require.Equal(t, transport.PreconditionFailed, ae.Code, "want 406, got %v", err)
			require.Regexp(t, "^"+regexp.QuoteMeta("PRECONDITION_FAILED - inequivalent arg 'x-delivery-limit' for queue '"+q.Name+"' in vhost '")+
				"[^']*"+regexp.QuoteMeta("': received "+received+" but current is "+current)+"$", ae.Reason)
		}
		quorum := func(limit any) transport.Table {
			args := transport.Table{"x-queue-type": "quorum"}
			if limit != nil {
				args["x-delivery-limit"] = limit
			}
			return args
		}

		unlimited := transport.Queue{Name: testenv.Name(t, "delivery-limit"), Durable: true, Args: quorum(nil)}
		declare(t, tr, transport.Topology{Queues: []transport.Queue{unlimited}})
		refused(t, transport.Queue{Name: unlimited.Name, Durable: true, Args: quorum(int64(20))}, "the value '20' of type 'long'", "none")

		for limit, typ := range map[any]string{
			int8(7): "byte", uint8(7): "unsignedbyte", int16(7): "short", uint16(7): "unsignedshort",
			int32(7): "signedint", uint32(7): "unsignedint", int64(7): "long",
		} {
			q := transport.Queue{Name: testenv.Name(t, "delivery-limit"), Durable: true, Args: quorum(limit)}
			declare(t, tr, transport.Topology{Queues: []transport.Queue{q}})
			refused(t, transport.Queue{Name: q.Name, Durable: true, Args: quorum(nil)}, "none", "the value '7' of type '"+typ+"'")
			refused(t, transport.Queue{Name: q.Name, Durable: true, Args: quorum(int64(5))}, "'5'", "'7'")
			require.NoError(t, tr.Declare(ctx(t), transport.Topology{Queues: []transport.Queue{{Name: q.Name, Durable: true,
				Args: quorum(int64(7))}}}), "the same limit in another width (%s)", typ)
		}
	},
	"InvalidQueueArgumentsAreRefused": func(t *testing.T, s suite) {
		tr := s.connect(t)
		for name, args := range map[string]transport.Table{
			"ttl as string":    {"x-message-ttl": "1000"},
			"negative ttl":     {"x-message-ttl": int64(-1)},
			"routing key only": {"x-dead-letter-routing-key": "k"},
			"unknown overflow": {"x-overflow": "explode"},
			"unknown type":     {"x-queue-type": "nope"},
		} {
			q := transport.Queue{Name: testenv.Name(t, "invalid-args"), Args: args}
			forget(t, tr, transport.Topology{Queues: []transport.Queue{q}})
			err := tr.Declare(ctx(t), transport.Topology{Queues: []transport.Queue{q}})
			require.True(t, transport.IsCode(err, transport.PreconditionFailed), "%s: want 406, got %v", name, err)
		}
		q := transport.Queue{Name: testenv.Name(t, "invalid-args"), Args: transport.Table{"strings": []string{"a"}}}
		forget(t, tr, transport.Topology{Queues: []transport.Queue{q}})
		require.ErrorIs(t, tr.Declare(ctx(t), transport.Topology{Queues: []transport.Queue{q}}), transport.ErrInvalidHeader)
	},
	"QuorumQueue": func(t *testing.T, s suite) {
		tr := s.connect(t)
		quorum := transport.Table{"x-queue-type": "quorum"}
		q := transport.Queue{Name: testenv.Name(t, "quorum"), Durable: true, Args: quorum}
		declare(t, tr, transport.Topology{Queues: []transport.Queue{q}})
		publish(t, tr, "", q.Name, "m")
		d := get(t, tr, q.Name)
		require.Equal(t, "m", string(d.Body))
		require.NoError(t, d.Ack())

		for name, bad := range map[string]transport.Queue{
			"exclusive":   {Name: testenv.Name(t, "quorum"), Durable: true, Exclusive: true, Args: quorum},
			"not durable": {Name: testenv.Name(t, "quorum"), Args: quorum},
			"auto-delete": {Name: testenv.Name(t, "quorum"), Durable: true, AutoDelete: true, Args: quorum},
		} {
			forget(t, tr, transport.Topology{Queues: []transport.Queue{bad}})
			err := tr.Declare(ctx(t), transport.Topology{Queues: []transport.Queue{bad}})
			require.True(t, transport.IsCode(err, transport.PreconditionFailed), "%s quorum queue: want 406, got %v", name, err)
		}
	},
	"Inspect": func(t *testing.T, s suite) {
		tr := s.connect(t)
		q := queue(t, tr, "inspect", nil)
		publish(t, tr, "", q, "m1")
		publish(t, tr, "", q, "m2")
		st, err := tr.Inspect(ctx(t), q)
		require.NoError(t, err)
		require.Equal(t, transport.QueueState{Name: q, Messages: 2, Consumers: 0}, st)
		sub := consume(t, tr, q, 1)
		receive(t, sub, arrival)
		st, err = tr.Inspect(ctx(t), q)
		require.NoError(t, err)
		require.Equal(t, transport.QueueState{Name: q, Messages: 1, Consumers: 1}, st, "an unsettled delivery is not ready")

		_, err = tr.Inspect(ctx(t), testenv.Name(t, "no-such-queue"))
		require.True(t, transport.IsCode(err, transport.NotFound), "want 404, got %v", err)
		_, err = tr.Inspect(ctx(t), q)
		require.NoError(t, err, "the transport still works after a 404")
	},
	"PurgeAndDeleteCount": func(t *testing.T, s suite) {
		tr := s.connect(t)
		q := queue(t, tr, "purge", nil)
		for range 3 {
			publish(t, tr, "", q, "m")
		}
		n, err := tr.Purge(ctx(t), q)
		require.NoError(t, err)
		require.Equal(t, 3, n)
		require.Equal(t, 0, ready(t, tr, q))
		publish(t, tr, "", q, "m")
		publish(t, tr, "", q, "m")
		n, err = tr.DeleteQueue(ctx(t), q)
		require.NoError(t, err)
		require.Equal(t, 2, n)
		_, err = tr.Inspect(ctx(t), q)
		require.True(t, transport.IsCode(err, transport.NotFound), "want 404, got %v", err)
		n, err = tr.DeleteQueue(ctx(t), q)
		require.NoError(t, err, "deleting a missing queue is not an error")
		require.Zero(t, n)
		require.NoError(t, tr.DeleteExchange(ctx(t), testenv.Name(t, "no-such-exchange")), "nor is deleting a missing exchange")
	},
}
