package broker

import (
	"context"
	"fmt"

	"go.opentelemetry.io/otel"
	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/metric"
)

// nodeTransport is a transport connected to one node of a list at a time:
// the RabbitMQ transport.
type nodeTransport interface {
	Node() string
	Nodes() []string
}

// Node returns the address (host:port) of the broker node the connection
// is on now: "" while it is between connections, and for a transport
// without nodes (the loopback). It changes when a lost connection is
// redialled on another node of the URL's list.
func (c *Conn) Node() string {
	if nt, ok := c.transport.(nodeTransport); ok {
		return nt.Node()
	}
	return ""
}

// Nodes returns the address (host:port) of every node of the connection's
// URL, in the order they are dialled; none for a transport without nodes.
func (c *Conn) Nodes() []string {
	if nt, ok := c.transport.(nodeTransport); ok {
		return nt.Nodes()
	}
	return nil
}

// observeNodes registers the acemq.connection.node gauge for c (nothing
// for a transport without nodes): 1 for the node c is on, 0 for every
// other node of its list. Unregister the returned registration when c
// closes.
func observeNodes(mp metric.MeterProvider, c *Conn) (metric.Registration, error) {
	nt, ok := c.transport.(nodeTransport)
	if !ok {
		return nil, nil
	}
	if mp == nil {
		mp = otel.GetMeterProvider()
	}
	gauge, err := mp.Meter(instrumentation).Int64ObservableGauge("acemq.connection.node",
		metric.WithDescription("1 for the broker node the connection is on, 0 for the other nodes of its URL's list, by node (host:port) and broker (the URL without password)."))
	if err != nil {
		return nil, fmt.Errorf("create instruments: %w", err)
	}
	nodes := nt.Nodes()
	sets := make([]metric.MeasurementOption, len(nodes))
	for i, n := range nodes {
		sets[i] = metric.WithAttributeSet(attribute.NewSet(attribute.String("node", n), attribute.String("broker", c.Name())))
	}
	reg, err := mp.Meter(instrumentation).RegisterCallback(func(_ context.Context, o metric.Observer) error {
		on := nt.Node()
		for i, n := range nodes {
			v := int64(0)
			if n == on {
				v = 1
			}
			o.ObserveInt64(gauge, v, sets[i])
		}
		return nil
	}, gauge)
	if err != nil {
		return nil, fmt.Errorf("register the node gauge: %w", err)
	}
	return reg, nil
}
