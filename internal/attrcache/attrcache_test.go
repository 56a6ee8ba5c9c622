package attrcache

import (
	"testing"

	"github.com/stretchr/testify/require"
	"go.opentelemetry.io/otel/metric"
)

func TestCacheHandsOutOneOptionPerValues(t *testing.T) {
	t.Parallel()
	c := New("queue", "outcome")
	a := c.Option("orders", "accepted")
	require.Equal(t, a, c.Option("orders", "accepted"))
	require.NotEqual(t, a, c.Option("orders", "retried"))
	require.NotEqual(t, c.Option("a\x00b", "c"), c.Option("a", "b\x00c"), "different values, different sets, even when joined alike")
	set := metric.NewAddConfig([]metric.AddOption{c.Option("orders", "retried")}).Attributes()
	v, ok := set.Value("outcome")
	require.True(t, ok)
	require.Equal(t, "retried", v.AsString())
}
