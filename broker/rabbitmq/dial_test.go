package rabbitmq_test

import (
	"context"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/acemq/acemq-flow/broker/rabbitmq"
	"github.com/acemq/acemq-flow/broker/transport"
	"github.com/acemq/acemq-flow/internal/testenv"
)

func TestPasswordNeverShows(t *testing.T) {
	t.Parallel()
	base := testenv.RabbitURL(t)
	tr := open(t, rabbitmq.Config{})
	require.NotContains(t, tr.Name(), ":guest@", "Name() = %q", tr.Name())
	require.Contains(t, tr.Name(), "127.0.0.1")

	const secret = "s3cr3t-pw"
	for _, url := range []string{
		"amqp://guest:" + secret + "@127.0.0.1:1/",                               // nothing listens
		strings.Replace(base, "guest:guest@", "guest:"+secret+"@", 1),            // refused credentials
		"amqp://guest:" + secret + "%zz@127.0.0.1:5672/",                         // bad escape
		"http://guest:" + secret + "@127.0.0.1:5672/",                            // wrong scheme
		"amqp://guest:" + secret + "@127.0.0.1:5672/?heartbeat=nope",             // bad query
		"amqp://guest:" + secret + "@127.0.0.1:5672/" + string(rune(0x7f)) + "x", // control character
	} {
		c, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		_, err := rabbitmq.Dial(c, url, rabbitmq.Config{Logger: logger(t)})
		cancel()
		require.Error(t, err, url)
		require.NotContains(t, err.Error(), secret)
		t.Log(err)
	}
}

func TestInvalidConfigAndURLAreRefused(t *testing.T) {
	t.Parallel()
	_, err := rabbitmq.Dial(ctx(t), "amqp://127.0.0.1/", rabbitmq.Config{MaxInFlight: -1})
	require.ErrorIs(t, err, rabbitmq.ErrInvalidConfig)
	_, err = rabbitmq.Dial(ctx(t), "amqp://127.0.0.1/", rabbitmq.Config{ReconnectMin: time.Minute, ReconnectMax: time.Second})
	require.ErrorIs(t, err, rabbitmq.ErrInvalidConfig)
	_, err = rabbitmq.Dial(ctx(t), "localhost:5672", rabbitmq.Config{})
	require.ErrorIs(t, err, rabbitmq.ErrInvalidURL)
	require.NoError(t, rabbitmq.Config{}.Validate())
}

func TestCloseIsIdempotentAndFinal(t *testing.T) {
	t.Parallel()
	tr := open(t, rabbitmq.Config{})
	q := testenv.Name(t, "closed")
	// Deleted by hand below, before Close.
	require.NoError(t, tr.Declare(ctx(t), transport.Topology{Queues: []transport.Queue{{Name: q}}}))
	sub, err := tr.Consume(ctx(t), q, transport.ConsumeOptions{Prefetch: 1})
	require.NoError(t, err)
	publish(t, tr, "", q, "held")
	held := receive(t, sub)

	_, err = tr.DeleteQueue(ctx(t), q)
	require.NoError(t, err)
	require.NoError(t, tr.Close(ctx(t)))
	require.NoError(t, tr.Close(ctx(t)))

	_, open := <-sub.Deliveries()
	require.False(t, open)
	require.ErrorIs(t, held.Ack(), transport.ErrClosed)
	require.ErrorIs(t, tr.Publish(ctx(t), transport.Publishing{RoutingKey: q}), transport.ErrClosed)
	require.ErrorIs(t, tr.Declare(ctx(t), transport.Topology{Queues: []transport.Queue{{Name: q}}}), transport.ErrClosed)
	_, err = tr.Consume(ctx(t), q, transport.ConsumeOptions{Prefetch: 1})
	require.ErrorIs(t, err, transport.ErrClosed)
	_, err = tr.Get(ctx(t), q)
	require.ErrorIs(t, err, transport.ErrClosed)
	require.Nil(t, tr.LocalAddr())
}
