package rabbitmq_test

import (
	"context"
	"io"
	"log/slog"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
	"go.uber.org/goleak"

	"github.com/acemq/acemq-flow/broker/rabbitmq"
	"github.com/acemq/acemq-flow/broker/transport"
	"github.com/acemq/acemq-flow/internal/testenv"
)

func TestMain(m *testing.M) {
	goleak.VerifyTestMain(m)
}

// testLog writes the transport's log lines to the test's log.
type testLog struct{ tb testing.TB }

func (w testLog) Write(p []byte) (int, error) {
	w.tb.Log(strings.TrimSuffix(string(p), "\n"))
	return len(p), nil
}

func logger(tb testing.TB) *slog.Logger {
	return slog.New(slog.NewTextHandler(testLog{tb}, &slog.HandlerOptions{Level: slog.LevelInfo}))
}

// open dials the test broker and closes the transport when the test ends.
func open(tb testing.TB, cfg rabbitmq.Config) *rabbitmq.Transport {
	tb.Helper()
	if cfg.Logger == nil {
		cfg.Logger = logger(tb)
	}
	tr, err := rabbitmq.Dial(ctx(tb), testenv.RabbitURL(tb), cfg)
	require.NoError(tb, err)
	tb.Cleanup(func() {
		c, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer cancel()
		require.NoError(tb, tr.Close(c))
	})
	return tr
}

// ctx bounds one test's calls.
func ctx(tb testing.TB) context.Context {
	c, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	tb.Cleanup(cancel)
	return c
}

// declare declares topo and deletes its queues and exchanges through tr when
// the test ends (before tr closes: cleanups run last registered first).
func declare(tb testing.TB, tr *rabbitmq.Transport, topo transport.Topology) {
	tb.Helper()
	require.NoError(tb, tr.Declare(ctx(tb), topo))
	tb.Cleanup(func() {
		c, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer cancel()
		for _, q := range topo.Queues {
			_, err := tr.DeleteQueue(c, q.Name)
			require.NoError(tb, err)
		}
		for _, e := range topo.Exchanges {
			require.NoError(tb, tr.DeleteExchange(c, e.Name))
		}
	})
}

// queue declares a transient classic queue and returns its name.
func queue(tb testing.TB, tr *rabbitmq.Transport, prefix string) string {
	tb.Helper()
	name := testenv.Name(tb, prefix)
	declare(tb, tr, transport.Topology{Queues: []transport.Queue{{Name: name}}})
	return name
}

func publish(tb testing.TB, tr *rabbitmq.Transport, ex, key, id string) {
	tb.Helper()
	require.NoError(tb, tr.Publish(ctx(tb), transport.Publishing{
		Exchange: ex, RoutingKey: key, Mandatory: true,
		Message: transport.Message{MessageID: id, Body: []byte(id)},
	}))
}

func receive(tb testing.TB, sub transport.Subscription) *transport.Delivery {
	tb.Helper()
	select {
	case d, ok := <-sub.Deliveries():
		require.True(tb, ok, "deliveries closed: %v", sub.Err())
		return d
	case <-time.After(5 * time.Second):
		require.FailNow(tb, "no delivery within 5s")
		return nil
	}
}

func contextWithTimeout(tb testing.TB, d time.Duration) (context.Context, context.CancelFunc) {
	tb.Helper()
	return context.WithTimeout(context.Background(), d)
}

// slogTo is a logger writing text lines to w.
func slogTo(w io.Writer) *slog.Logger {
	return slog.New(slog.NewTextHandler(w, &slog.HandlerOptions{Level: slog.LevelInfo}))
}
