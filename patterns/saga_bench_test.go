package patterns_test

import (
	"context"
	"testing"

	"github.com/acemq/acemq-flow/patterns"
)

// BenchmarkSagaStep measures a saga's own cost per step, with steps that
// do nothing: the target is under 1 µs.
func BenchmarkSagaStep(b *testing.B) {
	const steps = 10
	s := patterns.NewSaga[int]("bench")
	noop := func(context.Context, int) error { return nil }
	for range steps {
		s.Step("step", noop).CompensateWith(noop)
	}
	ctx := context.Background()
	b.ReportAllocs()
	for b.Loop() {
		if r := s.Run(ctx, 1); !r.Complete() {
			b.Fatal(r)
		}
	}
	b.ReportMetric(float64(b.Elapsed().Nanoseconds())/float64(b.N)/steps, "ns/step")
}
