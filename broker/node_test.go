package broker_test

import (
	"context"
	"net/url"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
	"go.opentelemetry.io/otel/attribute"
	sdkmetric "go.opentelemetry.io/otel/sdk/metric"
	"go.opentelemetry.io/otel/sdk/metric/metricdata"

	"github.com/acemq/acemq-flow/broker"
	"github.com/acemq/acemq-flow/broker/rabbitmq"
	"github.com/acemq/acemq-flow/internal/brokertest"
	"github.com/acemq/acemq-flow/internal/testenv"
)

// A connection through a list of two "nodes" (proxies to the test broker)
// says which it is on, in Node and in acemq.connection.node, and keeps
// consuming when that node goes and it moves to the other.
func TestConnFailsOverToTheNextNode(t *testing.T) {
	brokertest.OnRabbit(t, func(t *testing.T, h *brokertest.Harness) {
		u, err := url.Parse(h.URL)
		require.NoError(t, err)
		p1 := testenv.StartProxy(t, u.Host, nil)
		p2 := testenv.StartProxy(t, u.Host, nil)
		u.Host = p1.Addr() + "," + p2.Addr()
		h.URL = u.String()

		reader := sdkmetric.NewManualReader()
		conn := h.Open(broker.Config{MeterProvider: sdkmetric.NewMeterProvider(sdkmetric.WithReader(reader)),
			RabbitMQ: rabbitmq.Config{ReconnectMin: 10 * time.Millisecond, ReconnectMax: 100 * time.Millisecond}})
		require.Equal(t, p1.Addr(), conn.Node())
		require.Equal(t, []string{p1.Addr(), p2.Addr()}, conn.Nodes())
		require.False(t, strings.Contains(conn.Name(), "guest:"), conn.Name())
		require.Equal(t, map[string]int64{p1.Addr(): 1, p2.Addr(): 0}, nodeGauge(t, reader))

		q := h.Queue("failover")
		seen := h.Sink(conn, q)
		require.NoError(t, conn.Publish(brokertest.Ctx(t), "one", broker.To(q)))
		brokertest.Next(t, seen, 5*time.Second)

		p1.Stop()
		require.Eventually(t, func() bool { return conn.Node() == p2.Addr() }, 10*time.Second, 5*time.Millisecond)
		require.Equal(t, map[string]int64{p1.Addr(): 0, p2.Addr(): 1}, nodeGauge(t, reader))
		require.NoError(t, conn.Publish(brokertest.Ctx(t), "two", broker.To(q)))
		brokertest.Next(t, seen, 5*time.Second)
	})
}

// The loopback has no nodes.
func TestLoopbackHasNoNode(t *testing.T) {
	t.Parallel()
	conn, err := broker.Open(t.Context(), "memory://")
	require.NoError(t, err)
	defer conn.Close(context.Background())
	require.Empty(t, conn.Node())
	require.Empty(t, conn.Nodes())
}

// nodeGauge reads acemq.connection.node by node.
func nodeGauge(t *testing.T, reader *sdkmetric.ManualReader) map[string]int64 {
	t.Helper()
	var rm metricdata.ResourceMetrics
	require.NoError(t, reader.Collect(brokertest.Ctx(t), &rm))
	out := map[string]int64{}
	for _, sm := range rm.ScopeMetrics {
		for _, m := range sm.Metrics {
			if m.Name != "acemq.connection.node" {
				continue
			}
			for _, dp := range m.Data.(metricdata.Gauge[int64]).DataPoints {
				node, _ := dp.Attributes.Value(attribute.Key("node"))
				out[node.AsString()] = dp.Value
			}
		}
	}
	return out
}
