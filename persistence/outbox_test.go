package persistence_test

import (
	"context"
	"errors"
	"fmt"
	"strconv"
	"sync"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/stretchr/testify/require"

	"github.com/acemq/acemq-flow/broker"
	"github.com/acemq/acemq-flow/internal/brokertest"
	"github.com/acemq/acemq-flow/internal/testenv"
	"github.com/acemq/acemq-flow/patterns"
	"github.com/acemq/acemq-flow/persistence"
)

func outboxStore(t testing.TB, db persistence.DB, tb persistence.Tables, cfg persistence.SQLOutboxStoreConfig) *persistence.SQLOutboxStore {
	t.Helper()
	cfg.Tables = tb
	s, err := persistence.NewSQLOutboxStore(db, cfg)
	require.NoError(t, err)
	return s
}

// addCommitted adds records for payloads 0..n-1 to q, one transaction each.
func addCommitted(t testing.TB, db *pgxpool.Pool, s *persistence.SQLOutboxStore, conn *broker.Conn, q string, from, n int) {
	t.Helper()
	ctx := ctxT(t)
	for i := from; i < from+n; i++ {
		rec, err := patterns.Record(ctx, conn, i, broker.To(q), broker.MessageID("rec-"+strconv.Itoa(i)))
		require.NoError(t, err)
		require.NoError(t, pgx.BeginFunc(ctx, db, func(tx pgx.Tx) error {
			_, err := s.Add(ctx, tx, rec)
			return err
		}))
	}
}

func relay(t testing.TB, conn *broker.Conn, store patterns.OutboxStore, cfg patterns.OutboxRelayConfig) *patterns.OutboxRelay {
	t.Helper()
	if cfg.Logger == nil {
		cfg.Logger = testenv.Logger(t)
	}
	r, err := patterns.NewOutboxRelay(conn, store, cfg)
	require.NoError(t, err)
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer cancel()
		require.NoError(t, r.Close(ctx))
	})
	return r
}

// receive consumes q and sends every payload (an int) on the returned
// channel.
func receive(t testing.TB, conn *broker.Conn, q string) <-chan int {
	t.Helper()
	got := make(chan int, 10000)
	_, err := conn.Consume(ctxT(t), q, broker.Func(func(_ context.Context, m *broker.Message) error {
		n, err := broker.Decode[int](m)
		got <- n
		return err
	}), broker.WithRetry(broker.NoRetry()))
	require.NoError(t, err)
	return got
}

func collect(t *testing.T, got <-chan int, until func([]int) bool, within time.Duration) []int {
	t.Helper()
	var seen []int
	deadline := time.After(within)
	for !until(seen) {
		select {
		case n := <-got:
			seen = append(seen, n)
		case <-deadline:
			t.Fatalf("after %s received only %v", within, seen)
		}
	}
	return seen
}

// TestOutboxAddNeedsTransactionAndStatsCount: what the outbox conformance
// suite cannot see. Add refuses to run without a transaction, and Stats
// counts what a rolled-back add left (nothing) and what a committed one
// did.
func TestOutboxAddNeedsTransactionAndStatsCount(t *testing.T) {
	t.Parallel()
	db := pool(t)
	tb := tables(t, db)
	ctx := ctxT(t)
	conn, err := broker.Open(ctx, "memory://")
	require.NoError(t, err)
	defer conn.Close(ctx)
	s := outboxStore(t, db, tb, persistence.SQLOutboxStoreConfig{})
	rec, err := patterns.Record(ctx, conn, "placed", broker.To("orders"))
	require.NoError(t, err)

	_, err = s.Add(ctx, nil, rec)
	require.ErrorIs(t, err, broker.ErrInvalidOption, "no transaction, no add")
	tx, err := db.Begin(ctx)
	require.NoError(t, err)
	_, err = s.Add(ctx, tx, rec)
	require.NoError(t, err)
	require.NoError(t, tx.Rollback(ctx))
	st, err := s.Stats(ctx)
	require.NoError(t, err)
	require.Equal(t, persistence.OutboxStats{}, st, "rolled back with the work")
	addCommitted(t, db, s, conn, "orders", 0, 1)
	st, err = s.Stats(ctx)
	require.NoError(t, err)
	require.Equal(t, persistence.OutboxStats{Pending: 1}, st)
}

func TestOutboxTwoRelaysPublishEveryRecordOnceInOrder(t *testing.T) {
	t.Parallel()
	db := pool(t)
	tb := tables(t, db)
	r := newRabbit(t)
	q := r.Queue("outbox-two")
	r.Declare(q)
	conn := r.Open(broker.Config{})
	got := receive(t, conn, q)

	const n = 300
	addCommitted(t, db, outboxStore(t, db, tb, persistence.SQLOutboxStoreConfig{}), conn, q, 0, n)
	for range 2 {
		rl := relay(t, r.Open(broker.Config{}), outboxStore(t, db, tb, persistence.SQLOutboxStoreConfig{}),
			patterns.OutboxRelayConfig{BatchSize: 20, Interval: 20 * time.Millisecond})
		require.NoError(t, rl.Start(ctxT(t)))
	}
	seen := collect(t, got, func(s []int) bool { return len(s) == n }, 60*time.Second)
	for i, v := range seen {
		require.Equal(t, i, v, "every record once, in order, between the two relays")
	}
	brokertest.Nothing(t, got, 300*time.Millisecond)
	st, err := outboxStore(t, db, tb, persistence.SQLOutboxStoreConfig{}).Stats(ctxT(t))
	require.NoError(t, err)
	require.Equal(t, persistence.OutboxStats{}, st, "every record marked")
}

// crashingStore is a relay's store whose process dies between the broker's
// confirms and the marking: nothing is marked, nothing released.
type crashingStore struct {
	*persistence.SQLOutboxStore
	crashed, dead chan struct{}
	once          sync.Once
}

func (c *crashingStore) MarkPublished(context.Context, ...string) error {
	c.once.Do(func() { close(c.crashed) })
	<-c.dead
	return errors.New("crashed")
}

func (c *crashingStore) Release(context.Context, ...string) error { return errors.New("crashed") }

func TestOutboxCrashedRelayIsTakenOver(t *testing.T) {
	t.Parallel()
	db := pool(t)
	tb := tables(t, db)
	r := newRabbit(t)
	q := r.Queue("outbox-crash")
	r.Declare(q)
	conn := r.Open(broker.Config{})
	got := receive(t, conn, q)
	const n, batch = 100, 30
	addCommitted(t, db, outboxStore(t, db, tb, persistence.SQLOutboxStoreConfig{}), conn, q, 0, n)

	lease := persistence.SQLOutboxStoreConfig{Lease: time.Second}
	dying := &crashingStore{SQLOutboxStore: outboxStore(t, db, tb, lease), crashed: make(chan struct{}), dead: make(chan struct{})}
	a, err := patterns.NewOutboxRelay(r.Open(broker.Config{}), dying, patterns.OutboxRelayConfig{BatchSize: batch, Logger: testenv.Logger(t)})
	require.NoError(t, err)
	swept := make(chan error, 1)
	go func() {
		_, err := a.Sweep(ctxT(t))
		swept <- err
	}()
	<-dying.crashed
	close(dying.dead)
	require.Error(t, <-swept)

	b := relay(t, r.Open(broker.Config{}), outboxStore(t, db, tb, lease), patterns.OutboxRelayConfig{BatchSize: batch, Interval: 50 * time.Millisecond})
	require.NoError(t, b.Start(ctxT(t)))
	seen := collect(t, got, func(s []int) bool { return len(s) == n+batch }, 60*time.Second)

	count := map[int]int{}
	descents := 0
	for i, v := range seen {
		count[v]++
		if i > 0 && v <= seen[i-1] {
			descents++
		}
	}
	for i := range n {
		want := 1
		if i < batch {
			want = 2 // confirmed by the dead relay, never marked: sent again
		}
		require.Equal(t, want, count[i], "record %d", i)
	}
	require.Equal(t, 1, descents, "two runs, each in order: %v", seen)
}

func TestOutboxUnroutableRecordStaysAndOnErrorHearsDestination(t *testing.T) {
	t.Parallel()
	db := pool(t)
	tb := tables(t, db)
	r := newRabbit(t)
	ctx := ctxT(t)
	exchange := testenv.Name(t, "unbound")
	require.NoError(t, r.Admin.Declare(ctx, broker.Topology{Exchanges: []broker.Exchange{{Name: exchange, Kind: "direct", Durable: true}}}))
	t.Cleanup(func() { _ = r.Admin.Transport().DeleteExchange(context.Background(), exchange) })
	q := r.Queue("outbox-after")
	r.Declare(q)
	conn := r.Open(broker.Config{})
	got := receive(t, conn, q)

	s := outboxStore(t, db, tb, persistence.SQLOutboxStoreConfig{MaxAttempts: 2})
	add := func(payload any, opts ...broker.PublishOption) {
		rec, err := patterns.Record(ctx, conn, payload, opts...)
		require.NoError(t, err)
		_, err = s.Add(ctx, db, rec)
		require.NoError(t, err)
	}
	add("nobody listens", broker.ToExchange(exchange), broker.To("order.lost"))
	add(1, broker.To(q))

	var mu sync.Mutex
	var heard []patterns.OutboxDestination
	rl := relay(t, conn, s, patterns.OutboxRelayConfig{OnError: func(err error, d patterns.OutboxDestination) {
		require.ErrorIs(t, err, broker.ErrUnroutable)
		mu.Lock()
		heard = append(heard, d)
		mu.Unlock()
	}})
	n, err := rl.Sweep(ctx)
	require.ErrorIs(t, err, broker.ErrUnroutable, "a flush fails loudly")
	require.Zero(t, n, "the failing record stops the batch")
	recs, err := s.Records(ctx, 0)
	require.NoError(t, err)
	require.Len(t, recs, 2)
	require.Equal(t, 1, recs[0].Attempts)
	require.Contains(t, recs[0].LastError, "returned")
	require.Equal(t, []patterns.OutboxDestination{{Exchange: exchange, RoutingKey: "order.lost"}}, heard)

	// Its attempts spent, the poison record stays for inspection and no
	// longer holds back the one after it.
	_, err = rl.Sweep(ctx)
	require.ErrorIs(t, err, broker.ErrUnroutable)
	n, err = rl.Sweep(ctx)
	require.NoError(t, err)
	require.Equal(t, 1, n)
	require.Equal(t, 1, <-got)
	st, err := s.Stats(ctx)
	require.NoError(t, err)
	require.Equal(t, persistence.OutboxStats{Exhausted: 1}, st)
	require.Len(t, heard, 2)
}

func TestOutboxBinaryBodyAndHeadersRoundTrip(t *testing.T) {
	t.Parallel()
	db := pool(t)
	tb := tables(t, db)
	r := newRabbit(t)
	ctx := ctxT(t)
	q := r.Queue("outbox-binary")
	r.Declare(q)
	conn := r.Open(broker.Config{})
	s := outboxStore(t, db, tb, persistence.SQLOutboxStoreConfig{})

	body := []byte{0xff, 0xfe, 0x00, 'o', 'k', 0xc3, 0x28, 0x00}
	rec, err := patterns.Record(ctx, conn, body, broker.To(q), broker.Type("blob.v1"),
		broker.Header("count", int64(7)), broker.Header("ratio", 0.25), broker.Header("raw", []byte{0, 1, 2}),
		broker.Header("nested", broker.Table{"list": []any{"a", int32(2), true}}))
	require.NoError(t, err)
	_, err = s.Add(ctx, db, rec)
	require.NoError(t, err)
	var encoding string
	require.NoError(t, db.QueryRow(ctx, `SELECT body_encoding FROM `+tb.Outbox).Scan(&encoding))
	require.Equal(t, "base64", encoding)

	_, err = relay(t, conn, s, patterns.OutboxRelayConfig{}).Sweep(ctx)
	require.NoError(t, err)
	var d *broker.Message
	require.Eventually(t, func() bool {
		got, err := r.Admin.Transport().Get(ctx, q)
		if err != nil || got == nil {
			return false
		}
		require.NoError(t, got.Ack())
		d = &broker.Message{Body: got.Body, Headers: got.Headers}
		d.ID, d.Type, d.ContentType = got.MessageID, got.Type, got.ContentType
		return true
	}, 10*time.Second, 20*time.Millisecond)
	require.Equal(t, body, d.Body, "byte for byte")
	require.Equal(t, rec.Message.MessageID, d.ID)
	require.Equal(t, "blob.v1", d.Type)
	require.Equal(t, rec.Message.ContentType, d.ContentType)
	require.Equal(t, int64(7), d.Headers["count"])
	require.Equal(t, 0.25, d.Headers["ratio"])
	require.Equal(t, []byte{0, 1, 2}, d.Headers["raw"])
	require.Equal(t, broker.Table{"list": []any{"a", int32(2), true}}, d.Headers["nested"])
	require.Equal(t, rec.Message.Headers[broker.HeaderFirstSeen], d.Headers[broker.HeaderFirstSeen])
}

func TestOutboxRelayWakesOnNotify(t *testing.T) {
	t.Parallel()
	db := pool(t)
	tb := tables(t, db)
	r := newRabbit(t)
	ctx := ctxT(t)
	q := r.Queue("outbox-notify")
	r.Declare(q)
	conn := r.Open(broker.Config{})
	got := receive(t, conn, q)
	s := outboxStore(t, db, tb, persistence.SQLOutboxStoreConfig{})
	// An hour's interval: only a notification can make it sweep in time.
	rl := relay(t, conn, s, patterns.OutboxRelayConfig{Interval: time.Hour})
	require.NoError(t, rl.Start(ctx))
	for i := range 3 {
		addCommitted(t, db, s, conn, q, i, 1)
		select {
		case v := <-got:
			require.Equal(t, i, v)
		case <-time.After(10 * time.Second):
			t.Fatalf("record %d committed but not relayed", i)
		}
	}
}

func TestOutboxStoreWithoutPoolCannotListen(t *testing.T) {
	t.Parallel()
	db := pool(t)
	tb := tables(t, db)
	ctx := ctxT(t)
	c, err := db.Acquire(ctx)
	require.NoError(t, err)
	defer c.Release()
	s := outboxStore(t, c.Conn(), tb, persistence.SQLOutboxStoreConfig{})
	err = s.Listen(ctx, func() {})
	require.ErrorIs(t, err, patterns.ErrOutboxCannotListen)
	require.Contains(t, fmt.Sprint(err), "*pgx.Conn")
}
