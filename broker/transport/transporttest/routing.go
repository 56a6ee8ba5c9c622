package transporttest

import (
	"errors"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/acemq/acemq-flow/broker/transport"
	"github.com/acemq/acemq-flow/internal/testenv"
)

var routingTests = map[string]func(*testing.T, suite){
	"DefaultExchangeRoutesByQueueName": func(t *testing.T, s suite) {
		tr := s.connect(t)
		q := queue(t, tr, "default", nil)
		publish(t, tr, "", q, "m1")
		d := get(t, tr, q)
		require.Equal(t, "m1", string(d.Body))
		require.Equal(t, "", d.Exchange)
		require.Equal(t, q, d.RoutingKey)
		require.NoError(t, d.Ack())
	},
	"Direct": func(t *testing.T, s suite) {
		tr := s.connect(t)
		ex := exchange(t, tr, "direct", transport.Direct)
		q := queue(t, tr, "direct", nil)
		bind(t, tr, ex, q, "k1")
		bind(t, tr, ex, q, "k2")
		publish(t, tr, ex, "k1", "a")
		publish(t, tr, ex, "k2", "b")
		publish(t, tr, ex, "k3", "c")
		require.Equal(t, 2, ready(t, tr, q))
		d := get(t, tr, q)
		require.Equal(t, ex, d.Exchange)
		require.Equal(t, "k1", d.RoutingKey)
	},
	"Topic": func(t *testing.T, s suite) {
		tr := s.connect(t)
		ex := exchange(t, tr, "topic", transport.Topic)
		patterns := []string{"a.*", "a.#", "#", "*.b", "a.*.c"}
		queues := make([]string, len(patterns))
		for i, p := range patterns {
			queues[i] = queue(t, tr, "topic", nil)
			bind(t, tr, ex, queues[i], p)
		}
		for _, key := range []string{"a.b", "a", "a.b.c", "x.b", "x.y.z"} {
			publish(t, tr, ex, key, key)
		}
		want := map[string]int{"a.*": 1, "a.#": 3, "#": 5, "*.b": 2, "a.*.c": 1}
		for i, p := range patterns {
			require.Equal(t, want[p], ready(t, tr, queues[i]), "pattern %q", p)
		}
	},
	"Fanout": func(t *testing.T, s suite) {
		tr := s.connect(t)
		ex := exchange(t, tr, "fanout", transport.Fanout)
		q1, q2 := queue(t, tr, "fanout", nil), queue(t, tr, "fanout", nil)
		bind(t, tr, ex, q1, "")
		bind(t, tr, ex, q2, "ignored")
		publish(t, tr, ex, "anything", "m")
		require.Equal(t, 1, ready(t, tr, q1))
		require.Equal(t, 1, ready(t, tr, q2))
	},
	"MandatoryUnroutableIsReturned": func(t *testing.T, s suite) {
		tr := s.connect(t)
		ex := exchange(t, tr, "mandatory", transport.Direct)
		q := queue(t, tr, "mandatory", nil)
		bind(t, tr, ex, q, "bound")
		err := tr.Publish(ctx(t), transport.Publishing{Exchange: ex, RoutingKey: "unbound", Mandatory: true,
			Message: transport.Message{MessageID: "m", Body: []byte("m")}})
		require.ErrorIs(t, err, transport.ErrUnroutable)
		var ret *transport.ReturnedError
		require.ErrorAs(t, err, &ret)
		require.Equal(t, 312, ret.ReplyCode)
		require.Equal(t, "NO_ROUTE", ret.ReplyText)
		require.Equal(t, ex, ret.Exchange)
		require.Equal(t, "unbound", ret.RoutingKey)
		require.Equal(t, 0, ready(t, tr, q))

		err = tr.Publish(ctx(t), transport.Publishing{RoutingKey: testenv.Name(t, "no-such-queue"), Mandatory: true,
			Message: transport.Message{Body: []byte("m")}})
		require.ErrorIs(t, err, transport.ErrUnroutable)

		err = tr.Publish(ctx(t), transport.Publishing{Exchange: ex, RoutingKey: "bound", Mandatory: true,
			Message: transport.Message{Body: []byte("m")}})
		require.NoError(t, err)
		require.Equal(t, 1, ready(t, tr, q))
	},
	"NonMandatoryUnroutableIsDropped": func(t *testing.T, s suite) {
		tr := s.connect(t)
		ex := exchange(t, tr, "dropped", transport.Direct)
		q := queue(t, tr, "dropped", nil)
		bind(t, tr, ex, q, "bound")
		publish(t, tr, ex, "unbound", "m")
		require.Equal(t, 0, ready(t, tr, q))
	},
	"MissingExchangeIsNotFound": func(t *testing.T, s suite) {
		tr := s.connect(t)
		err := tr.Publish(ctx(t), transport.Publishing{Exchange: testenv.Name(t, "no-such-exchange"), RoutingKey: "k",
			Message: transport.Message{Body: []byte("m")}})
		require.Error(t, err)
		require.True(t, transport.IsCode(err, transport.NotFound), "want 404, got %v", err)
		q := queue(t, tr, "after-404", nil)
		publish(t, tr, "", q, "still works")
		require.Equal(t, 1, ready(t, tr, q))
	},
	"Unbind": func(t *testing.T, s suite) {
		tr := s.connect(t)
		ex := exchange(t, tr, "unbind", transport.Direct)
		q := queue(t, tr, "unbind", nil)
		bind(t, tr, ex, q, "k")
		publish(t, tr, ex, "k", "m1")
		require.NoError(t, tr.Unbind(ctx(t), transport.Binding{Exchange: ex, Queue: q, Key: "k"}))
		publish(t, tr, ex, "k", "m2")
		require.Equal(t, 1, ready(t, tr, q))
		// Unbinding what is not bound is not an error.
		require.NoError(t, tr.Unbind(ctx(t), transport.Binding{Exchange: ex, Queue: q, Key: "k"}))
	},
	"DeclareTopology": func(t *testing.T, s suite) {
		tr := s.connect(t)
		ex := testenv.Name(t, "topology")
		q1, q2 := testenv.Name(t, "topology"), testenv.Name(t, "topology")
		topo := transport.Topology{
			Exchanges: []transport.Exchange{{Name: ex, Kind: transport.Topic}},
			Queues:    []transport.Queue{{Name: q1}, {Name: q2}},
			Bindings:  []transport.Binding{{Exchange: ex, Queue: q1, Key: "orders.*"}, {Exchange: ex, Queue: q2, Key: "#"}},
		}
		declare(t, tr, topo)
		// Declaring the same topology again changes nothing.
		require.NoError(t, tr.Declare(ctx(t), topo))
		publish(t, tr, ex, "orders.placed", "m1")
		publish(t, tr, ex, "invoices.sent", "m2")
		require.Equal(t, 1, ready(t, tr, q1))
		require.Equal(t, 2, ready(t, tr, q2))
	},
	"DefaultAndReservedExchangesAreRefused": func(t *testing.T, s suite) {
		tr := s.connect(t)
		err := tr.Declare(ctx(t), transport.Topology{Exchanges: []transport.Exchange{{Name: "amq." + testenv.Name(t, "reserved"), Kind: transport.Direct}}})
		require.True(t, transport.IsCode(err, transport.AccessRefused), "want 403, got %v", err)
		q := queue(t, tr, "reserved", nil)
		err = tr.Declare(ctx(t), transport.Topology{Bindings: []transport.Binding{{Exchange: "", Queue: q, Key: "k"}}})
		require.True(t, transport.IsCode(err, transport.AccessRefused), "want 403, got %v", err)
		err = tr.Declare(ctx(t), transport.Topology{Bindings: []transport.Binding{{Exchange: testenv.Name(t, "no-such-exchange"), Queue: q, Key: "k"}}})
		require.True(t, transport.IsCode(err, transport.NotFound), "want 404, got %v", err)
		err = tr.Declare(ctx(t), transport.Topology{Bindings: []transport.Binding{{Exchange: "amq.direct", Queue: testenv.Name(t, "no-such-queue"), Key: "k"}}})
		require.True(t, transport.IsCode(err, transport.NotFound), "want 404, got %v", err)
		// The pre-declared exchanges route.
		bind(t, tr, "amq.direct", q, q)
		publish(t, tr, "amq.direct", q, "m")
		require.Equal(t, 1, ready(t, tr, q))
		require.NoError(t, tr.Unbind(ctx(t), transport.Binding{Exchange: "amq.direct", Queue: q, Key: q}))
	},
	"ClosedTransportRefuses": func(t *testing.T, s suite) {
		tr := s.connect(t)
		other := s.connect(t)
		q := queue(t, other, "closed", nil)
		require.NotEmpty(t, tr.Name())
		require.NoError(t, tr.Close(ctx(t)))
		require.NoError(t, tr.Close(ctx(t)), "Close is idempotent")
		err := tr.Publish(ctx(t), transport.Publishing{RoutingKey: q, Message: transport.Message{Body: []byte("m")}})
		require.True(t, errors.Is(err, transport.ErrClosed), "want ErrClosed, got %v", err)
		_, err = tr.Consume(ctx(t), q, transport.ConsumeOptions{Prefetch: 1})
		require.ErrorIs(t, err, transport.ErrClosed)
	},
}
