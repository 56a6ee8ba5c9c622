package rabbitmq_test

import (
	"fmt"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/acemq/acemq-flow/broker/rabbitmq"
	"github.com/acemq/acemq-flow/broker/transport"
	"github.com/acemq/acemq-flow/internal/testenv"
)

// BenchmarkPublishConfirmed publishes 256-byte persistent, mandatory
// messages to a quorum queue from 16 goroutines, each waiting for its
// confirm, and reports msg/s.
func BenchmarkPublishConfirmed(b *testing.B) {
	tr := open(b, rabbitmq.Config{})
	q := testenv.Name(b, "bench")
	declare(b, tr, transport.Topology{Queues: []transport.Queue{{
		Name: q, Durable: true, Args: transport.Table{"x-queue-type": "quorum"},
	}}})
	body := make([]byte, 256)
	const goroutines = 16
	var next atomic.Int64
	var wg sync.WaitGroup
	errs := make(chan error, goroutines)
	c := ctx(b)
	b.ResetTimer()
	start := time.Now()
	for range goroutines {
		wg.Go(func() {
			for {
				i := next.Add(1)
				if i > int64(b.N) {
					return
				}
				err := tr.Publish(c, transport.Publishing{RoutingKey: q, Mandatory: true,
					Message: transport.Message{MessageID: fmt.Sprint(i), Body: body}})
				if err != nil {
					errs <- err
					return
				}
			}
		})
	}
	wg.Wait()
	b.ReportMetric(float64(b.N)/time.Since(start).Seconds(), "msg/s")
	b.StopTimer()
	close(errs)
	for err := range errs {
		b.Fatal(err)
	}
}
