package patterns_test

import (
	"context"
	"errors"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
	"go.uber.org/goleak"

	"github.com/acemq/acemq-flow/broker"
	"github.com/acemq/acemq-flow/internal/testenv"
	"github.com/acemq/acemq-flow/patterns"
)

func outboxLoopback(t *testing.T) (*broker.Conn, context.Context) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	t.Cleanup(cancel)
	conn, err := broker.Config{Logger: testenv.Logger(t)}.Open(ctx, "memory://")
	require.NoError(t, err)
	t.Cleanup(func() { require.NoError(t, conn.Close(context.Background())) })
	return conn, ctx
}

// newOutboxStore is an in-memory outbox with the default lease and
// attempts.
func newOutboxStore(t *testing.T) *patterns.InMemoryOutboxStore {
	t.Helper()
	s, err := patterns.NewInMemoryOutboxStore(patterns.InMemoryOutboxStoreConfig{})
	require.NoError(t, err)
	return s
}

func outboxAdd(t *testing.T, ctx context.Context, conn *broker.Conn, s *patterns.InMemoryOutboxStore, payload any, opts ...broker.PublishOption) {
	t.Helper()
	rec, err := patterns.Record(ctx, conn, payload, opts...)
	require.NoError(t, err)
	_, err = s.Add(ctx, rec)
	require.NoError(t, err)
}

func outboxDrain(t *testing.T, ctx context.Context, conn *broker.Conn, q string) []int {
	t.Helper()
	var out []int
	for {
		d, err := conn.Transport().Get(ctx, q)
		require.NoError(t, err)
		if d == nil {
			return out
		}
		require.NoError(t, d.Ack())
		var m broker.Message
		m.Body = d.Body
		n, err := broker.Decode[int](&m)
		require.NoError(t, err)
		out = append(out, n)
	}
}

// TestOutboxRelayManyInFlightStopsAtFailure: with one publish in flight a
// relay stops at a failing record strictly in order (the store
// conformance suite's "a relay stops at a failing record"); with many,
// batches stay in order and the records of one batch may arrive in any
// order among themselves.
func TestOutboxRelayManyInFlightStopsAtFailure(t *testing.T) {
	t.Parallel()
	conn, ctx := outboxLoopback(t)
	require.NoError(t, conn.Declare(ctx, broker.ConsumerTopology("orders")))
	s := newOutboxStore(t)
	for i := range 5 {
		outboxAdd(t, ctx, conn, s, i, broker.To("orders"))
	}
	outboxAdd(t, ctx, conn, s, 99, broker.ToExchange("amq.direct"), broker.To("nowhere"))
	for i := 5; i < 10; i++ {
		outboxAdd(t, ctx, conn, s, i, broker.To("orders"))
	}
	var mu sync.Mutex
	var heard []patterns.OutboxDestination
	r, err := patterns.NewOutboxRelay(conn, s, patterns.OutboxRelayConfig{InFlight: 8, BatchSize: 4,
		OnError: func(err error, d patterns.OutboxDestination) {
			mu.Lock()
			heard = append(heard, d)
			mu.Unlock()
		}})
	require.NoError(t, err)

	n, err := r.Sweep(ctx)
	require.ErrorIs(t, err, broker.ErrUnroutable)
	require.Equal(t, 5, n, "everything before the failing record")
	recs := s.Records()
	require.Len(t, recs, 6, "the failing record and everything after it stay")
	require.Equal(t, 1, recs[0].Attempts)
	require.Equal(t, []patterns.OutboxDestination{{Exchange: "amq.direct", RoutingKey: "nowhere"}}, heard)
	got := outboxDrain(t, ctx, conn, "orders")
	// Batches in order, any order within one; records after the failure
	// may have been confirmed too, and are sent again later.
	require.ElementsMatch(t, []int{0, 1, 2, 3}, got[:4])
	require.Subset(t, got[4:], []int{4})
}

// notifyingStore wakes the relay on every Add, as a database would on commit.
type notifyingStore struct {
	*patterns.InMemoryOutboxStore
	wakes chan func()
}

func (n *notifyingStore) Listen(ctx context.Context, wake func()) error {
	n.wakes <- wake
	<-ctx.Done()
	return ctx.Err()
}

func TestOutboxRelayStartWakeClose(t *testing.T) {
	before := goleak.IgnoreCurrent()
	// Registered first, so it runs after every other cleanup has closed
	// what the test opened.
	t.Cleanup(func() { goleak.VerifyNone(t, before) })
	conn, ctx := outboxLoopback(t)
	got := make(chan int, 10)
	_, err := conn.Consume(ctx, "orders", broker.Func(func(_ context.Context, m *broker.Message) error {
		n, err := broker.Decode[int](m)
		got <- n
		return err
	}), broker.WithRetry(broker.NoRetry()))
	require.NoError(t, err)
	s := &notifyingStore{InMemoryOutboxStore: newOutboxStore(t), wakes: make(chan func(), 1)}
	r, err := patterns.NewOutboxRelay(conn, s, patterns.OutboxRelayConfig{Interval: time.Hour})
	require.NoError(t, err)
	require.NoError(t, r.Start(ctx))
	require.ErrorIs(t, r.Start(ctx), patterns.ErrOutboxRelayStarted)
	wake := <-s.wakes
	for i := range 3 {
		outboxAdd(t, ctx, conn, s.InMemoryOutboxStore, i, broker.To("orders"))
		wake()
		require.Equal(t, i, <-got, "an hour's interval: only the wake can have sent it")
	}
	require.NoError(t, r.Close(ctx))
	require.NoError(t, r.Close(ctx), "idempotent")
	require.ErrorIs(t, r.Start(ctx), patterns.ErrOutboxRelayClosed)
}

func TestOutboxRelayConfigAndRecord(t *testing.T) {
	t.Parallel()
	conn, ctx := outboxLoopback(t)
	for _, bad := range []patterns.OutboxRelayConfig{{Interval: -1}, {BatchSize: -1}, {InFlight: -1}, {PublishTimeout: -1}} {
		require.ErrorIs(t, bad.Validate(), broker.ErrInvalidOption)
		_, err := patterns.NewOutboxRelay(conn, newOutboxStore(t), bad)
		require.ErrorIs(t, err, broker.ErrInvalidOption)
	}
	_, err := patterns.NewOutboxRelay(nil, newOutboxStore(t), patterns.OutboxRelayConfig{})
	require.ErrorIs(t, err, broker.ErrInvalidOption)
	_, err = patterns.Record(ctx, nil, 1)
	require.ErrorIs(t, err, broker.ErrInvalidOption)
	_, err = patterns.Record(ctx, conn, 1, broker.Header("x-acemq-attempt", 3))
	require.ErrorIs(t, err, broker.ErrReservedHeader)
	_, err = newOutboxStore(t).Add(ctx, patterns.OutboxRecord{})
	require.ErrorIs(t, err, patterns.ErrInvalidOutboxRecord)
	for _, bad := range []patterns.InMemoryOutboxStoreConfig{{Lease: -1}, {MaxAttempts: -1}} {
		_, err := patterns.NewInMemoryOutboxStore(bad)
		require.ErrorIs(t, err, broker.ErrInvalidOption)
	}

	// The record is what Publish would have sent.
	rec, err := patterns.Record(ctx, conn, map[string]int{"n": 1}, broker.To("orders"), broker.Type("order.placed.v2"), broker.MessageID("m-1"))
	require.NoError(t, err)
	require.Equal(t, "m-1", rec.Message.MessageID)
	require.Equal(t, "m-1", rec.Message.CorrelationID)
	require.Equal(t, "order.placed.v2", rec.Message.Type)
	require.Equal(t, broker.ContentTypeJSON, rec.Message.ContentType)
	require.Equal(t, int64(1), rec.Message.Headers[broker.HeaderAttempt])
	require.JSONEq(t, `{"n":1}`, string(rec.Message.Body))
}

// failingStore's Pending fails: OnError hears an empty destination.
type failingStore struct{ patterns.OutboxStore }

func (failingStore) Pending(context.Context, int) ([]patterns.OutboxRecord, error) {
	return nil, errors.New("database down")
}

func TestOutboxRelayStoreFailureHasNoDestination(t *testing.T) {
	t.Parallel()
	conn, ctx := outboxLoopback(t)
	var heard []patterns.OutboxDestination
	r, err := patterns.NewOutboxRelay(conn, failingStore{}, patterns.OutboxRelayConfig{
		OnError: func(_ error, d patterns.OutboxDestination) { heard = append(heard, d) }})
	require.NoError(t, err)
	_, err = r.Sweep(ctx)
	require.ErrorContains(t, err, "database down")
	require.Equal(t, []patterns.OutboxDestination{{}}, heard)
}

// A relay claims each next batch while the current one is published; a
// failure gives that batch back unpublished, and order is kept across
// several full batches.
func TestOutboxRelayLookaheadKeepsOrder(t *testing.T) {
	t.Parallel()
	conn, ctx := outboxLoopback(t)
	require.NoError(t, conn.Declare(ctx, broker.ConsumerTopology("orders")))
	s := newOutboxStore(t)
	for i := range 10 {
		outboxAdd(t, ctx, conn, s, i, broker.To("orders"))
	}
	outboxAdd(t, ctx, conn, s, 99, broker.ToExchange("amq.direct"), broker.To("nowhere"))
	for i := 10; i < 20; i++ {
		outboxAdd(t, ctx, conn, s, i, broker.To("orders"))
	}
	r, err := patterns.NewOutboxRelay(conn, s, patterns.OutboxRelayConfig{BatchSize: 3})
	require.NoError(t, err)

	n, err := r.Sweep(ctx)
	require.ErrorIs(t, err, broker.ErrUnroutable)
	require.Equal(t, 10, n)
	require.Equal(t, []int{0, 1, 2, 3, 4, 5, 6, 7, 8, 9}, outboxDrain(t, ctx, conn, "orders"))
	recs := s.Records()
	require.Len(t, recs, 11, "the failing record and everything after it stay")
	// Nothing is left leased: the batch claimed ahead was given back, so
	// the poison record gives way once its attempts are spent.
	for range patterns.DefaultOutboxMaxAttempts - 1 {
		_, err := r.Sweep(ctx)
		require.ErrorIs(t, err, broker.ErrUnroutable)
	}
	n, err = r.Sweep(ctx)
	require.NoError(t, err)
	require.Equal(t, 10, n)
	require.Equal(t, []int{10, 11, 12, 13, 14, 15, 16, 17, 18, 19}, outboxDrain(t, ctx, conn, "orders"))
}
