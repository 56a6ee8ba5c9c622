package broker_test

import (
	"context"
	"fmt"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/acemq/acemq-flow/broker"
	"github.com/acemq/acemq-flow/broker/rabbitmq"
	"github.com/acemq/acemq-flow/internal/brokertest"
	"github.com/acemq/acemq-flow/internal/testenv"
)

// TestReconnectLosesNothing pushes 5,000 messages through a consumer while
// its connection (and once the publisher's) is closed from the broker side
// twice: every message is handled; duplicates are allowed and counted.
// Handlers take 20 ms and publishers stay at most 400 messages ahead of
// them, so each close (rabbitmqctl takes seconds) lands with deliveries
// unsettled and publishes awaiting their confirms.
func TestReconnectLosesNothing(t *testing.T) {
	brokertest.OnRabbit(t, func(t *testing.T, h *brokertest.Harness) {
		ctx := brokertest.Ctx(t)
		const total = 5000
		fast := broker.Config{RabbitMQ: rabbitmq.Config{ReconnectMin: 50 * time.Millisecond, ReconnectMax: 500 * time.Millisecond}}
		pub, con := h.Open(fast), h.Open(fast)
		q := h.Queue("reconnect")

		var mu sync.Mutex
		handled := map[string]int{}
		var unique atomic.Int64
		progress := make(chan int64, total*2)
		_, err := con.Consume(ctx, q, func(ctx context.Context, m *broker.Message) broker.Ack {
			time.Sleep(20 * time.Millisecond) // simulated work, so closes land mid-flight
			mu.Lock()
			handled[m.ID]++
			if handled[m.ID] == 1 {
				progress <- unique.Add(1)
			}
			mu.Unlock()
			return broker.Accept()
		}, broker.Concurrency(8), broker.Prefetch(50), broker.WithRetry(broker.NoRetry()))
		require.NoError(t, err)

		// Publishers retry a publish whose confirm was lost with the same
		// message id: at-least-once on the way in as well.
		var republished atomic.Int64
		publishErr := make(chan error, 1)
		go func() {
			var wg sync.WaitGroup
			var next atomic.Int64
			for range 8 {
				wg.Go(func() {
					for i := next.Add(1); i <= total; i = next.Add(1) {
						for i-unique.Load() > 400 && ctx.Err() == nil {
							time.Sleep(5 * time.Millisecond) // keep pace with the consumer
						}
						id := fmt.Sprintf("m-%05d", i)
						for {
							err := pub.Publish(ctx, i, broker.To(q), broker.MessageID(id), broker.Mandatory())
							if err == nil {
								break
							}
							if ctx.Err() != nil {
								publishErr <- err
								return
							}
							republished.Add(1)
						}
					}
				})
			}
			wg.Wait()
			close(publishErr)
		}()

		local := func(c *broker.Conn) *rabbitmq.Transport {
			rt, ok := c.Transport().(*rabbitmq.Transport)
			require.True(t, ok)
			return rt
		}
		waitFor := func(n int64) {
			for {
				select {
				case got := <-progress:
					if got >= n {
						return
					}
				case <-ctx.Done():
					mu.Lock()
					defer mu.Unlock()
					t.Fatalf("only %d of %d messages handled", len(handled), n)
				}
			}
		}
		waitFor(1000)
		testenv.CloseConnection(t, local(con).LocalAddr())
		testenv.CloseConnection(t, local(pub).LocalAddr())
		waitFor(3000)
		testenv.CloseConnection(t, local(con).LocalAddr())
		waitFor(total)
		for err := range publishErr {
			require.NoError(t, err)
		}

		mu.Lock()
		defer mu.Unlock()
		duplicates := 0
		for _, n := range handled {
			duplicates += n - 1
		}
		require.Len(t, handled, total, "every message handled")
		require.Positive(t, duplicates+int(republished.Load()), "the closes landed while work was in flight")
		t.Logf("handled %d messages, %d duplicates, %d publishes repeated after a lost confirm", total, duplicates, republished.Load())
		require.Eventually(t, func() bool { return h.Depth(q) == 0 }, 10*time.Second, 50*time.Millisecond)
		require.Equal(t, 0, h.Depth(q+broker.DeadLetterSuffix))
	})
}
