package transporttest

import (
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/acemq/acemq-flow/broker/transport"
)

var consumeTests = map[string]func(*testing.T, suite){
	"PrefetchLimitsUnsettled": func(t *testing.T, s suite) {
		tr := s.connect(t)
		q := queue(t, tr, "prefetch", nil)
		sub := consume(t, tr, q, 2)
		for _, m := range []string{"m1", "m2", "m3"} {
			publish(t, tr, "", q, m)
		}
		first := receive(t, sub, arrival)
		receive(t, sub, arrival)
		nothing(t, sub)
		require.NoError(t, first.Ack())
		require.Equal(t, "m3", string(receive(t, sub, arrival).Body))
	},
	"ConsumersShareRoundRobin": func(t *testing.T, s suite) {
		tr := s.connect(t)
		q := queue(t, tr, "round-robin", nil)
		a, b := consume(t, tr, q, 1), consume(t, tr, q, 1)
		publish(t, tr, "", q, "m1")
		publish(t, tr, "", q, "m2")
		da, db := receive(t, a, arrival), receive(t, b, arrival)
		require.ElementsMatch(t, []string{"m1", "m2"}, []string{string(da.Body), string(db.Body)})
		st, err := tr.Inspect(ctx(t), q)
		require.NoError(t, err)
		require.Equal(t, 2, st.Consumers)
	},
	"CancelStopsDeliveries": func(t *testing.T, s suite) {
		tr := s.connect(t)
		q := queue(t, tr, "cancel", nil)
		sub := consume(t, tr, q, 5)
		publish(t, tr, "", q, "m1")
		d := receive(t, sub, arrival)
		require.NoError(t, sub.Cancel(ctx(t)))
		require.NoError(t, sub.Cancel(ctx(t)), "Cancel is idempotent")
		deadline := time.After(arrival)
		for open := true; open; {
			select {
			case extra, ok := <-sub.Deliveries():
				require.False(t, ok, "delivery after cancel: %q", bodyOf(extra))
				open = false
			case <-deadline:
				require.FailNow(t, "Deliveries not closed after Cancel")
			}
		}
		require.NoError(t, sub.Err())
		publish(t, tr, "", q, "m2")
		require.Eventually(t, func() bool {
			st, err := tr.Inspect(ctx(t), q)
			return err == nil && st.Consumers == 0 && st.Messages == 1
		}, arrival, 10*time.Millisecond)
		require.NoError(t, d.Ack(), "a delivery received before Cancel can still be settled")
		require.Equal(t, "m2", string(get(t, tr, q).Body))
	},
	"CloseRequeuesUnsettled": func(t *testing.T, s suite) {
		tr := s.connect(t)
		q := queue(t, tr, "close-requeue", nil)
		first := s.connect(t)
		sub := consume(t, first, q, 10)
		publish(t, tr, "", q, "m1")
		publish(t, tr, "", q, "m2")
		receive(t, sub, arrival)
		receive(t, sub, arrival)
		require.NoError(t, first.Close(ctx(t)))

		second := s.connect(t)
		again := consume(t, second, q, 10)
		d1, d2 := receive(t, again, arrival), receive(t, again, arrival)
		require.True(t, d1.Redelivered)
		require.True(t, d2.Redelivered)
		require.ElementsMatch(t, []string{"m1", "m2"}, []string{d1.MessageID, d2.MessageID})
		require.NoError(t, d1.Ack())
		require.NoError(t, d2.Ack())
	},
	"ExclusiveConsumer": func(t *testing.T, s suite) {
		tr := s.connect(t)
		q := queue(t, tr, "exclusive-consumer", nil)
		_, err := tr.Consume(ctx(t), q, transport.ConsumeOptions{Prefetch: 1, Exclusive: true})
		require.NoError(t, err)
		_, err = tr.Consume(ctx(t), q, transport.ConsumeOptions{Prefetch: 1})
		require.True(t, transport.IsCode(err, transport.AccessRefused), "want 403, got %v", err)
	},
	"ConsumeMissingQueueIsNotFound": func(t *testing.T, s suite) {
		tr := s.connect(t)
		_, err := tr.Consume(ctx(t), "acemq-test.no-such-queue", transport.ConsumeOptions{Prefetch: 1})
		require.True(t, transport.IsCode(err, transport.NotFound), "want 404, got %v", err)
		q := queue(t, tr, "after-consume-404", nil)
		publish(t, tr, "", q, "m")
		require.Equal(t, "m", string(receive(t, consume(t, tr, q, 1), arrival).Body))
	},
}

func bodyOf(d *transport.Delivery) string {
	if d == nil {
		return ""
	}
	return string(d.Body)
}
