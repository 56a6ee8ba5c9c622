package persistence_test

import (
	"context"
	"fmt"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/acemq/acemq-flow/broker"
	"github.com/acemq/acemq-flow/internal/testenv"
	"github.com/acemq/acemq-flow/patterns"
	"github.com/acemq/acemq-flow/persistence"
)

func idemStore(t *testing.T, db persistence.DB, tb persistence.Tables, cfg persistence.SQLIdempotencyStoreConfig) *persistence.SQLIdempotencyStore {
	t.Helper()
	cfg.Tables = tb
	s, err := persistence.NewSQLIdempotencyStore(db, cfg)
	require.NoError(t, err)
	return s
}

func TestSQLIdempotencyPurgeExpiredInBatches(t *testing.T) {
	t.Parallel()
	db := pool(t)
	tb := tables(t, db)
	ctx := ctxT(t)
	counted := &countingDB{DB: db}
	s := idemStore(t, counted, tb, persistence.SQLIdempotencyStoreConfig{PurgeBatch: 100})
	_, err := db.Exec(ctx, `INSERT INTO `+tb.Idempotency+` (key, state, holder, expires_at)
		SELECT convert_to('old-' || i, 'UTF8'), 'confirmed', 'h', now() - interval '1 minute' FROM generate_series(1, 250) i`)
	require.NoError(t, err)
	for i := range 3 {
		require.NoError(t, s.Confirm(ctx, fmt.Sprintf("live-%d", i)))
	}
	counted.execs.Store(0)
	n, err := s.PurgeExpired(ctx)
	require.NoError(t, err)
	require.Equal(t, int64(250), n)
	require.Equal(t, int64(3), counted.execs.Load(), "250 rows, 100 a statement: 100, 100, 50")
	var left int
	require.NoError(t, db.QueryRow(ctx, `SELECT count(*) FROM `+tb.Idempotency).Scan(&left))
	require.Equal(t, 3, left)
}

// settlements counts, by outcome label, what the Idempotent middleware
// decided; it wraps the guard from outside.
type settlements struct {
	mu     sync.Mutex
	labels map[string]int
	change chan struct{}
}

func newSettlements() *settlements {
	return &settlements{labels: map[string]int{}, change: make(chan struct{}, 1)}
}

func (s *settlements) middleware(next broker.Handler) broker.Handler {
	return func(ctx context.Context, m *broker.Message) broker.Ack {
		ack := next(ctx, m)
		label := ack.Label()
		if label == "" {
			label = ack.Outcome().String()
		}
		s.mu.Lock()
		s.labels[label]++
		s.mu.Unlock()
		select {
		case s.change <- struct{}{}:
		default:
		}
		return ack
	}
}

func (s *settlements) get(label string) int {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.labels[label]
}

// await waits until done holds, woken by every settlement.
func (s *settlements) await(t *testing.T, within time.Duration, done func() bool) {
	t.Helper()
	deadline := time.After(within)
	for !done() {
		select {
		case <-s.change:
		case <-deadline:
			s.mu.Lock()
			defer s.mu.Unlock()
			t.Fatalf("not settled within %s: %v", within, s.labels)
		}
	}
}

func TestIdempotentConsumersShareSQLStore(t *testing.T) {
	t.Parallel()
	db := pool(t)
	tb := tables(t, db)
	r := newRabbit(t)
	ctx := ctxT(t)
	q := r.Queue("idem-shared")
	r.Declare(q)

	var mu sync.Mutex
	work := map[string]int{}
	seen := newSettlements()
	for range 3 {
		conn := r.Open(broker.Config{})
		store := idemStore(t, db, tb, persistence.SQLIdempotencyStoreConfig{})
		guard, err := patterns.Idempotent(store, patterns.InProgressDelay(200*time.Millisecond))
		require.NoError(t, err)
		_, err = conn.Consume(ctx, q, broker.Func(func(ctx context.Context, m *broker.Message) error {
			mu.Lock()
			work[m.ID]++
			mu.Unlock()
			time.Sleep(5 * time.Millisecond) // the work: long enough for the copies to overlap
			return nil
		}), broker.Concurrency(4), broker.Use(seen.middleware, guard))
		require.NoError(t, err)
	}

	const n = 60
	pub := r.Open(broker.Config{})
	for i := range n {
		for range 2 { // every message delivered twice
			require.NoError(t, pub.Publish(ctx, map[string]int{"order": i}, broker.To(q), broker.MessageID(fmt.Sprintf("order-%d", i))))
		}
	}
	seen.await(t, 60*time.Second, func() bool {
		return seen.get(broker.OutcomeAccept.String())+seen.get(patterns.IdempotencyOutcomeDuplicate) == 2*n
	})
	mu.Lock()
	defer mu.Unlock()
	require.Len(t, work, n)
	for id, runs := range work {
		require.Equal(t, 1, runs, "the work of %s ran once", id)
	}
	require.Equal(t, n, seen.get(broker.OutcomeAccept.String()))
	require.Equal(t, n, seen.get(patterns.IdempotencyOutcomeDuplicate))
	t.Logf("in-progress put-backs on the way: %d", seen.get(broker.OutcomeLabelInProgress))
}

func TestIdempotencyConsumerKilledMidHandler(t *testing.T) {
	t.Parallel()
	db := pool(t)
	tb := tables(t, db)
	r := newRabbit(t)
	ctx := ctxT(t)
	q := r.Queue("idem-killed")
	r.Declare(q)
	cfg := persistence.SQLIdempotencyStoreConfig{ClaimTimeout: 2 * time.Second}

	// A takes the message, claims it, and hangs in its handler; then its
	// connection goes away under it, as a killed process's would.
	connA, err := broker.Config{Ladder: r.Ladder, Logger: testenv.Logger(t)}.Open(ctx, r.URL)
	require.NoError(t, err)
	guardA, err := patterns.Idempotent(idemStore(t, db, tb, cfg))
	require.NoError(t, err)
	started, hang := make(chan struct{}), make(chan struct{})
	consumerA, err := connA.Consume(ctx, q, func(context.Context, *broker.Message) broker.Ack {
		close(started)
		<-hang
		return broker.Accept()
	}, broker.Use(guardA), broker.Prefetch(1))
	require.NoError(t, err)
	require.NoError(t, r.Admin.Publish(ctx, "charge", broker.To(q), broker.MessageID("killed-1")))
	<-started
	killCtx, cancel := context.WithTimeout(ctx, 300*time.Millisecond)
	require.Error(t, connA.Close(killCtx), "A's handler is still running when its connection goes")
	cancel()
	defer func() {
		close(hang)
		<-consumerA.Done()
	}()

	// B gets the redelivery: in progress (A's claim is live) until the
	// lease runs out, then taken over and run, without spending an attempt.
	seen := newSettlements()
	guardB, err := patterns.Idempotent(idemStore(t, db, tb, cfg), patterns.InProgressDelay(300*time.Millisecond))
	require.NoError(t, err)
	ran := make(chan *broker.Message, 1)
	_, err = r.Open(broker.Config{}).Consume(ctx, q, func(_ context.Context, m *broker.Message) broker.Ack {
		ran <- m
		return broker.Accept()
	}, broker.Use(seen.middleware, guardB), broker.WithRetry(broker.Constant(2, 0)))
	require.NoError(t, err)
	select {
	case m := <-ran:
		require.Equal(t, "killed-1", m.ID)
		require.Equal(t, 1, m.Attempt, "in-progress put-backs do not spend attempts")
	case <-time.After(30 * time.Second):
		t.Fatal("the message was never taken over")
	}
	seen.await(t, 10*time.Second, func() bool { return seen.get(broker.OutcomeAccept.String()) == 1 })
	require.GreaterOrEqual(t, seen.get(broker.OutcomeLabelInProgress), 1, "it was put back while A's lease was live")
	st, err := r.Admin.Transport().Inspect(ctx, q+broker.DeadLetterSuffix)
	require.NoError(t, err)
	require.Zero(t, st.Messages, "nothing dead-lettered")
}

// countingDB counts the statements a store runs through Exec.
type countingDB struct {
	persistence.DB
	execs atomic.Int64
}

func (c *countingDB) Exec(ctx context.Context, sql string, args ...any) (pgconn.CommandTag, error) {
	c.execs.Add(1)
	return c.DB.Exec(ctx, sql, args...)
}

// failingDB refuses every Exec while down is set: the database away.
type failingDB struct {
	persistence.DB
	down atomic.Bool
}

func (f *failingDB) Exec(ctx context.Context, sql string, args ...any) (pgconn.CommandTag, error) {
	if f.down.Load() {
		return pgconn.CommandTag{}, fmt.Errorf("database away")
	}
	return f.DB.Exec(ctx, sql, args...)
}

// TestSQLIdempotencyForgetLostIsTakenBack: a claim whose Forget the
// database never got is taken back by the store that held it at its next
// Claim, not a lease later; to any other store it is still in progress,
// and so it is to its own store while it holds it.
func TestSQLIdempotencyForgetLostIsTakenBack(t *testing.T) {
	t.Parallel()
	db := pool(t)
	tb := tables(t, db)
	ctx := ctxT(t)
	fdb := &failingDB{DB: db}
	mine := idemStore(t, fdb, tb, persistence.SQLIdempotencyStoreConfig{})
	other := idemStore(t, db, tb, persistence.SQLIdempotencyStoreConfig{})
	claim := func(s *persistence.SQLIdempotencyStore) patterns.Claim {
		t.Helper()
		c, err := s.Claim(ctx, "k")
		require.NoError(t, err)
		return c
	}
	require.Equal(t, patterns.ClaimClaimed, claim(mine))
	require.Equal(t, patterns.ClaimInProgress, claim(mine), "held: a second delivery in the same process waits")
	fdb.down.Store(true)
	require.Error(t, mine.Forget(ctx, "k"), "the database is away: the claim stays in it")
	fdb.down.Store(false)
	require.Equal(t, patterns.ClaimInProgress, claim(other), "another holder still sees it in progress")
	require.Equal(t, patterns.ClaimClaimed, claim(mine), "its holder takes it back at once")
	require.Equal(t, patterns.ClaimInProgress, claim(mine))
	require.NoError(t, mine.Confirm(ctx, "k"))
	require.Equal(t, patterns.ClaimDuplicate, claim(mine))
	require.Equal(t, patterns.ClaimDuplicate, claim(other))
}

// claimHeldBackDB holds the answer to the first claim back, after the
// database has taken the claim, until release is closed: the instant in
// which the claim is the store's in the database and not yet in its
// memory.
type claimHeldBackDB struct {
	persistence.DB
	once           sync.Once
	taken, release chan struct{}
}

func (d *claimHeldBackDB) Query(ctx context.Context, sql string, args ...any) (pgx.Rows, error) {
	rows, err := d.DB.Query(ctx, sql, args...)
	first := false
	if err == nil && strings.Contains(sql, "RETURNING") {
		d.once.Do(func() { first = true })
	}
	if !first {
		return rows, err
	}
	return &heldBackRows{Rows: rows, d: d}, nil
}

type heldBackRows struct {
	pgx.Rows
	d *claimHeldBackDB
}

func (r *heldBackRows) Close() {
	r.Rows.Close()
	close(r.d.taken)
	<-r.d.release
}

// TestSQLIdempotencyConcurrentClaimsOfOneInstance: while one goroutine's
// claim is won in the database but not yet answered, another goroutine of
// the same instance claiming the key is told it is in progress, not that
// the instance left the claim behind (which would run the work twice).
// The other's claim waits for the first's statement (claims are written in
// groups, one statement at a time) and runs while the first's answer is on
// its way back.
func TestSQLIdempotencyConcurrentClaimsOfOneInstance(t *testing.T) {
	t.Parallel()
	db := pool(t)
	tb := tables(t, db)
	ctx := ctxT(t)
	slow := &claimHeldBackDB{DB: db, taken: make(chan struct{}), release: make(chan struct{})}
	s := idemStore(t, slow, tb, persistence.SQLIdempotencyStoreConfig{})
	first := make(chan patterns.Claim, 1)
	go func() {
		c, err := s.Claim(ctx, "k")
		assert.NoError(t, err)
		first <- c
	}()
	<-slow.taken
	second := make(chan patterns.Claim, 1)
	go func() {
		c, err := s.Claim(ctx, "k")
		assert.NoError(t, err)
		second <- c
	}()
	close(slow.release)
	require.Equal(t, patterns.ClaimInProgress, <-second, "the other goroutine is claiming it")
	require.Equal(t, patterns.ClaimClaimed, <-first)
	require.Equal(t, patterns.ClaimInProgress, claimOf(t, s, "k"), "held")
}

func claimOf(t *testing.T, s *persistence.SQLIdempotencyStore, key string) patterns.Claim {
	t.Helper()
	c, err := s.Claim(ctxT(t), key)
	require.NoError(t, err)
	return c
}
