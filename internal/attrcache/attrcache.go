// Package attrcache keeps OpenTelemetry attribute sets for metric labels
// that repeat: a metric recorded per message with attributes built anew
// each time allocates and hashes them per message, which on a busy
// consumer is a measurable share of its CPU.
package attrcache

import (
	"strconv"
	"strings"
	"sync"

	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/metric"
)

// Cache maps label values to a ready metric option for one set of label
// names. The zero value is not usable; make one with New. Safe for
// concurrent use. It grows with the distinct label values seen, which are
// bounded by the queues, flows, steps and outcomes a process has.
type Cache struct {
	keys []string
	m    sync.Map // string -> metric.MeasurementOption
}

// New returns a cache for attributes named keys, in that order.
func New(keys ...string) *Cache { return &Cache{keys: keys} }

// Option returns the metric option carrying the attributes keys=values;
// values must be as many as the cache's keys.
func (c *Cache) Option(values ...string) metric.MeasurementOption {
	id := key(values)
	if o, ok := c.m.Load(id); ok {
		return o.(metric.MeasurementOption)
	}
	kv := make([]attribute.KeyValue, len(c.keys))
	for i, k := range c.keys {
		kv[i] = attribute.String(k, values[i])
	}
	o := metric.WithAttributeSet(attribute.NewSet(kv...))
	actual, _ := c.m.LoadOrStore(id, o)
	return actual.(metric.MeasurementOption)
}

// key joins values so that no two different lists give one key: each
// value is prefixed with its length.
func key(values []string) string {
	if len(values) == 1 {
		return values[0]
	}
	var b strings.Builder
	for _, v := range values {
		b.WriteString(strconv.Itoa(len(v)))
		b.WriteByte(':')
		b.WriteString(v)
	}
	return b.String()
}
