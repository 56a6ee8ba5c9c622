package rabbitmq_test

import (
	"context"
	"errors"
	"fmt"
	"net"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/acemq/acemq-flow/broker/rabbitmq"
	"github.com/acemq/acemq-flow/broker/transport"
	"github.com/acemq/acemq-flow/internal/testenv"
)

// idSet is a set of message ids shared between goroutines.
type idSet struct {
	mu  sync.Mutex
	ids map[string]bool
}

func (s *idSet) add(id string) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.ids == nil {
		s.ids = map[string]bool{}
	}
	s.ids[id] = true
}

func (s *idSet) len() int {
	s.mu.Lock()
	defer s.mu.Unlock()
	return len(s.ids)
}

// missing returns the ids of s that other lacks.
func (s *idSet) missing(other *idSet) []string {
	s.mu.Lock()
	defer s.mu.Unlock()
	other.mu.Lock()
	defer other.mu.Unlock()
	var out []string
	for id := range s.ids {
		if !other.ids[id] {
			out = append(out, id)
		}
	}
	return out
}

// While a consumer receives and publishers publish, the broker closes the
// connection twice. The subscription keeps delivering on the same channel,
// the exclusive queue is declared again, a delivery from before the drop is
// stale, a publish issued during the outage waits and succeeds, and every
// publish either failed or was delivered: none succeeded silently.
func TestReconnectResumesEverything(t *testing.T) {
	t.Parallel()
	tr := open(t, rabbitmq.Config{ReconnectMin: 400 * time.Millisecond, ReconnectMax: time.Second, PublishChannels: 2})
	q := testenv.Name(t, "survivor")
	excl := testenv.Name(t, "exclusive")
	declare(t, tr, transport.Topology{Queues: []transport.Queue{
		{Name: q},
		{Name: excl, Exclusive: true, AutoDelete: true},
	}})
	var resumed atomic.Int32
	sub, err := tr.Consume(ctx(t), q, transport.ConsumeOptions{Prefetch: 20, ResumeArgs: func() transport.Table {
		resumed.Add(1)
		return nil
	}})
	require.NoError(t, err)

	var received, confirmed idSet
	var hold atomic.Bool
	held := make(chan *transport.Delivery, 1)
	var consumers sync.WaitGroup
	consumers.Go(func() {
		for d := range sub.Deliveries() {
			if hold.CompareAndSwap(true, false) {
				held <- d
				continue
			}
			if err := d.Ack(); err != nil && !errors.Is(err, transport.ErrStaleDelivery) {
				t.Errorf("ack %s: %v", d.MessageID, err)
				continue
			}
			received.add(d.MessageID)
		}
	})

	// The publishers stop before anything else is cleaned up, however the
	// test ends; they share one context because t.Cleanup cannot be called
	// from them.
	stop := make(chan struct{})
	var stopOnce sync.Once
	var publishers sync.WaitGroup
	stopPublishers := func() {
		stopOnce.Do(func() { close(stop) })
		publishers.Wait()
	}
	t.Cleanup(stopPublishers)
	// Two broker-side closes through rabbitmqctl (seconds each on a loaded
	// machine) and tens of thousands of publishes: more than ctx's 20 s.
	pubCtx, cancelPub := context.WithTimeout(context.Background(), 90*time.Second)
	defer cancelPub()
	var lost atomic.Int32
	for g := range 4 {
		publishers.Go(func() {
			for i := 0; ; i++ {
				select {
				case <-stop:
					return
				default:
				}
				id := fmt.Sprintf("p%d-%d", g, i)
				err := tr.Publish(pubCtx, transport.Publishing{RoutingKey: q, Mandatory: true,
					Message: transport.Message{MessageID: id, Body: []byte(id)}})
				switch {
				case err == nil:
					confirmed.add(id)
				case errors.Is(err, transport.ErrConnectionLost):
					lost.Add(1)
				default:
					t.Errorf("publish %s: %v", id, err)
				}
			}
		})
	}

	for round := 1; round <= 2; round++ {
		start := received.len()
		require.Eventually(t, func() bool { return received.len() >= start+50 }, 10*time.Second, time.Millisecond,
			"round %d: deliveries stopped", round)
		hold.Store(true)
		var d *transport.Delivery
		select {
		case d = <-held:
		case <-time.After(5 * time.Second):
			require.FailNow(t, "nothing to hold")
		}

		outage := make(chan error, 1)
		go func() {
			// Publish as soon as the transport is between connections. The
			// wait is bounded by the test's context rather than a fixed
			// deadline: rabbitmqctl alone can take seconds on a loaded machine.
			for tr.LocalAddr() != nil {
				if pubCtx.Err() != nil {
					outage <- errors.New("never saw the outage")
					return
				}
				time.Sleep(time.Millisecond)
			}
			outage <- tr.Publish(pubCtx, transport.Publishing{RoutingKey: q, Mandatory: true,
				Message: transport.Message{MessageID: fmt.Sprintf("outage-%d", round)}})
		}()
		old := tr.LocalAddr()
		testenv.CloseConnection(t, old)
		var now net.Addr
		require.Eventually(t, func() bool {
			now = tr.LocalAddr()
			return now != nil && now.String() != old.String()
		}, 10*time.Second, 5*time.Millisecond, "round %d: no new connection", round)
		t.Logf("round %d: %s replaced by %s", round, old, now)

		require.ErrorIs(t, d.Ack(), transport.ErrStaleDelivery, "a delivery from the lost connection")
		require.NoError(t, <-outage, "a publish during the outage waits for the next connection")
		confirmed.add(fmt.Sprintf("outage-%d", round))
		_, err := tr.Inspect(ctx(t), excl)
		require.NoError(t, err, "the exclusive queue was declared again")
	}

	stopPublishers()
	require.Eventually(t, func() bool { return len(confirmed.missing(&received)) == 0 }, 10*time.Second, 10*time.Millisecond,
		"confirmed but never delivered: %v", confirmed.missing(&received))
	require.Equal(t, int32(2), resumed.Load())
	require.NoError(t, sub.Err())
	t.Logf("%d publishes confirmed, %d failed with the connection", confirmed.len(), lost.Load())
	require.NoError(t, sub.Cancel(ctx(t)))
	consumers.Wait()
}

// Close during an outage stops the redialling at once, and a publish that
// was waiting for the next connection returns ErrClosed.
func TestCloseDuringOutage(t *testing.T) {
	t.Parallel()
	tr, err := rabbitmq.Dial(ctx(t), testenv.RabbitURL(t), rabbitmq.Config{
		Logger: logger(t), ReconnectMin: 5 * time.Second, ReconnectMax: 5 * time.Second,
	})
	require.NoError(t, err)
	testenv.CloseConnection(t, tr.LocalAddr())
	require.Eventually(t, func() bool { return tr.LocalAddr() == nil }, 5*time.Second, time.Millisecond)

	waiting := make(chan error, 1)
	go func() {
		waiting <- tr.Publish(ctx(t), transport.Publishing{RoutingKey: "anywhere"})
	}()
	start := time.Now()
	require.NoError(t, tr.Close(ctx(t)))
	require.Less(t, time.Since(start), time.Second, "Close waited for the backoff")
	require.ErrorIs(t, <-waiting, transport.ErrClosed)
}
