package patterns_test

import (
	"context"
	"fmt"
	"net"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/acemq/acemq-flow/broker"
	"github.com/acemq/acemq-flow/broker/rabbitmq"
	"github.com/acemq/acemq-flow/internal/brokertest"
	"github.com/acemq/acemq-flow/internal/testenv"
	"github.com/acemq/acemq-flow/patterns"
)

// TestNoDoubleEffectsUnderConnectionKills is the scenario of issue 9: a
// 3-step pipeline behind the idempotency guard (message-id keys, the
// default), thousands of runs, and every connection of the test closed
// from the broker side every two seconds. A step whose work completed must
// never run again because its hop failed, so no step's effect is applied
// twice, and no run is lost.
func TestNoDoubleEffectsUnderConnectionKills(t *testing.T) {
	if testing.Short() {
		t.Skip("runs thousands of pipeline runs under connection kills")
	}
	brokertest.OnRabbit(t, func(t *testing.T, h *brokertest.Harness) {
		const runs = 5000
		ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
		defer cancel()
		work := h.Open(broker.Config{InProgressDelay: time.Second})
		pub := h.Open(broker.Config{})
		name := testenv.Name(t, "effects")
		p, err := patterns.NewPipeline(name, "a", "b", "c")
		require.NoError(t, err)
		for _, s := range p.Steps() {
			q := p.QueueFor(s)
			h.DeleteLater(q, q+broker.DeadLetterSuffix, q+broker.ParkedSuffix)
		}
		h.DeleteExchangeLater(name)
		require.NoError(t, work.Declare(ctx, p.Topology()))

		store, err := patterns.NewInMemoryIdempotencyStore(0)
		require.NoError(t, err)
		guard, err := patterns.Idempotent(store, patterns.InProgressDelay(time.Second))
		require.NoError(t, err)

		var (
			mu       sync.Mutex
			effects  = map[string]int{}
			finished atomic.Int32
		)
		for _, s := range p.Steps() {
			step, err := p.Follow(work, func(_ context.Context, m *broker.Message) (any, error) {
				mu.Lock()
				effects[m.RunID+"/"+s]++
				first := effects[m.RunID+"/"+s] == 1
				mu.Unlock()
				if s == "c" && first {
					finished.Add(1)
				}
				return "on", nil
			})
			require.NoError(t, err)
			_, err = work.Consume(ctx, p.QueueFor(s), step, broker.Use(guard), broker.Concurrency(8),
				broker.Prefetch(64), broker.WithRetry(broker.Constant(100, 0)))
			require.NoError(t, err)
		}

		kills := make(chan int, 1)
		killCtx, stopKilling := context.WithCancel(ctx)
		go func() {
			n := 0
			defer func() { kills <- n }()
			for {
				select {
				case <-killCtx.Done():
					return
				case <-time.After(2 * time.Second):
				}
				n += testenv.CloseConnections(t, local(work), local(pub))
			}
		}()

		for i := range runs {
			runID := fmt.Sprintf("run-%05d", i)
			// A start whose confirm was lost is sent again under the same
			// message id, which the guard of step a recognises.
			for {
				_, err := p.Start(ctx, pub, "go", broker.RunID(runID), broker.MessageID(runID))
				if err == nil {
					break
				}
				require.NoError(t, ctx.Err(), "start %s: %v", runID, err)
			}
		}
		require.Eventually(t, func() bool { return finished.Load() == runs }, 2*time.Minute, 100*time.Millisecond,
			"every run reaches its last step")
		stopKilling()
		closed := <-kills

		mu.Lock()
		defer mu.Unlock()
		var doubled []string
		for k, n := range effects {
			if n > 1 {
				doubled = append(doubled, fmt.Sprintf("%s x%d", k, n))
			}
		}
		t.Logf("%d runs, %d connections closed by the broker, %d double effects", runs, closed, len(doubled))
		require.GreaterOrEqual(t, closed, 2, "the connections were closed while runs were in flight")
		require.Len(t, effects, 3*runs, "every step of every run took effect")
		require.Empty(t, doubled, "no step's effect was applied twice")
	})
}

// local is the client end of a RabbitMQ connection, nil between
// connections.
func local(c *broker.Conn) net.Addr {
	if rt, ok := c.Transport().(*rabbitmq.Transport); ok {
		return rt.LocalAddr()
	}
	return nil
}
