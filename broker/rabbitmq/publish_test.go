package rabbitmq_test

import (
	"errors"
	"fmt"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/acemq/acemq-flow/broker/rabbitmq"
	"github.com/acemq/acemq-flow/broker/transport"
	"github.com/acemq/acemq-flow/internal/testenv"
)

// Half the publishes go to a bound key, half to an unbound one, from many
// goroutines at once and with message ids shared between the two halves:
// each must get its own answer, a confirm or its own return.
func TestConcurrentMandatoryPublishesGetTheirOwnAnswer(t *testing.T) {
	t.Parallel()
	tr := open(t, rabbitmq.Config{})
	ex := testenv.Name(t, "mixed")
	q := testenv.Name(t, "mixed")
	declare(t, tr, transport.Topology{
		Exchanges: []transport.Exchange{{Name: ex, Kind: transport.Direct}},
		Queues:    []transport.Queue{{Name: q}},
		Bindings:  []transport.Binding{{Exchange: ex, Queue: q, Key: "routed"}},
	})

	const goroutines, each = 16, 126
	var wg sync.WaitGroup
	errs := make(chan error, goroutines*each)
	for g := range goroutines {
		wg.Go(func() {
			for i := range each {
				key := "routed"
				if i%2 == 1 {
					key = "unrouted"
				}
				// Ids repeat across goroutines and across both keys.
				id := fmt.Sprintf("m-%d", i/2)
				err := tr.Publish(ctx(t), transport.Publishing{
					Exchange: ex, RoutingKey: key, Mandatory: true,
					Message: transport.Message{MessageID: id, Body: []byte(id)},
				})
				switch {
				case key == "routed" && err != nil:
					errs <- fmt.Errorf("goroutine %d publish %d (routed): %w", g, i, err)
				case key == "unrouted" && !errors.Is(err, transport.ErrUnroutable):
					errs <- fmt.Errorf("goroutine %d publish %d (unrouted): want a return, got %v", g, i, err)
				case key == "unrouted":
					var re *transport.ReturnedError
					if !errors.As(err, &re) || re.RoutingKey != "unrouted" || re.Exchange != ex || re.ReplyCode != 312 {
						errs <- fmt.Errorf("goroutine %d publish %d: return %#v", g, i, re)
					}
				}
			}
		})
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		t.Error(err)
	}
	st, err := tr.Inspect(ctx(t), q)
	require.NoError(t, err)
	require.Equal(t, goroutines*each/2, st.Messages)
}

// A publish to a missing exchange is a 404 that closes its channel; the
// transport replaces the channel and keeps publishing.
func TestPublishToMissingExchangeKeepsWorking(t *testing.T) {
	t.Parallel()
	tr := open(t, rabbitmq.Config{PublishChannels: 2})
	q := queue(t, tr, "after-404")
	for range 3 {
		err := tr.Publish(ctx(t), transport.Publishing{
			Exchange: testenv.Name(t, "missing"), RoutingKey: "k",
			Message: transport.Message{MessageID: "lost", Body: []byte("x")},
		})
		require.True(t, transport.IsCode(err, transport.NotFound), "got %v", err)
		require.ErrorContains(t, err, "NOT_FOUND")
	}
	for i := range 10 {
		publish(t, tr, "", q, fmt.Sprint(i))
	}
	st, err := tr.Inspect(ctx(t), q)
	require.NoError(t, err)
	require.Equal(t, 10, st.Messages)
}

func TestPublishRefusesWhatRabbitMQWouldChokeOn(t *testing.T) {
	t.Parallel()
	tr := open(t, rabbitmq.Config{})
	q := queue(t, tr, "refused")
	for _, exp := range []string{"abc", "-1", "1.5", " 10", "1e3"} {
		err := tr.Publish(ctx(t), transport.Publishing{RoutingKey: q, Message: transport.Message{Expiration: exp}})
		require.ErrorIs(t, err, transport.ErrInvalidExpiration, "expiration %q", exp)
	}
	err := tr.Publish(ctx(t), transport.Publishing{RoutingKey: q, Message: transport.Message{
		Headers: transport.Table{"route": []string{"a", "b"}},
	}})
	require.ErrorIs(t, err, transport.ErrInvalidHeader)
	err = tr.Publish(ctx(t), transport.Publishing{RoutingKey: q, Message: transport.Message{
		Headers: transport.Table{"nested": transport.Table{"bad": struct{}{}}},
	}})
	require.ErrorIs(t, err, transport.ErrInvalidHeader)

	// Nothing reached the broker and the channels are fine.
	require.NoError(t, tr.Publish(ctx(t), transport.Publishing{RoutingKey: q, Mandatory: true, Message: transport.Message{
		MessageID: "ok", Expiration: "60000",
		Headers: transport.Table{
			"big":    1 << 40,
			"nested": map[string]any{"n": 7, "list": []any{1, "two", transport.Table{"three": int32(3)}}},
		},
		Timestamp: time.Unix(1700000000, 0),
	}}))
	d, err := tr.Get(ctx(t), q)
	require.NoError(t, err)
	require.NotNil(t, d)
	require.Equal(t, "ok", d.MessageID)
	require.Equal(t, "60000", d.Expiration)
	require.Equal(t, int64(1<<40), d.Headers["big"], "a Go int travels as 64 bits")
	require.Equal(t, transport.Table{"n": int64(7), "list": []any{int64(1), "two", transport.Table{"three": int32(3)}}}, d.Headers["nested"])
	require.True(t, d.Timestamp.Equal(time.Unix(1700000000, 0)))
	require.NoError(t, d.Ack())
}

// A publish whose caller stops waiting frees its in-flight slot once the
// confirm comes: with one slot, later publishes still go through.
func TestAbandonedPublishFreesItsSlot(t *testing.T) {
	t.Parallel()
	tr := open(t, rabbitmq.Config{PublishChannels: 1, MaxInFlight: 1})
	q := queue(t, tr, "abandoned")
	for i := range 20 {
		c, cancel := contextWithTimeout(t, time.Microsecond)
		_ = tr.Publish(c, transport.Publishing{RoutingKey: "nowhere", Mandatory: true,
			Message: transport.Message{MessageID: fmt.Sprint(i)}})
		cancel()
	}
	publish(t, tr, "", q, "after")
	err := tr.Publish(ctx(t), transport.Publishing{RoutingKey: "nowhere", Mandatory: true,
		Message: transport.Message{MessageID: "3"}})
	require.ErrorIs(t, err, transport.ErrUnroutable, "an abandoned publish's return is not claimed by another")
}
