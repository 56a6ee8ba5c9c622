package persistence_test

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/stretchr/testify/require"

	"github.com/acemq/acemq-flow/broker"
	"github.com/acemq/acemq-flow/internal/testenv"
	"github.com/acemq/acemq-flow/persistence"
)

func ctxT(tb testing.TB) context.Context {
	ctx, cancel := context.WithTimeout(context.Background(), 90*time.Second)
	tb.Cleanup(cancel)
	return ctx
}

// pool connects to the test database; closed when the test ends.
func pool(tb testing.TB) *pgxpool.Pool {
	tb.Helper()
	url := testenv.DatabaseURL(tb)
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	p, err := pgxpool.New(ctx, url)
	require.NoError(tb, err)
	tb.Cleanup(p.Close)
	require.NoError(tb, p.Ping(ctx))
	return p
}

// tables are table names of this test's own, migrated, dropped when the
// test ends: concurrent test runs on one database never meet.
func tables(tb testing.TB, db *pgxpool.Pool) persistence.Tables {
	tb.Helper()
	var b [5]byte
	_, _ = rand.Read(b[:])
	p := "acemq_t" + hex.EncodeToString(b[:]) + "_"
	t := persistence.Tables{
		Migrations: p + "migrations", Outbox: p + "outbox", Idempotency: p + "idem",
		Schemas: p + "schemas", SchemaCounter: p + "schema_ids",
	}
	tb.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer cancel()
		for _, name := range []string{t.Migrations, t.Outbox, t.Idempotency, t.Schemas, t.SchemaCounter} {
			_, err := db.Exec(ctx, "DROP TABLE IF EXISTS "+pgx.Identifier{name}.Sanitize())
			require.NoError(tb, err)
		}
	})
	require.NoError(tb, persistence.MigrateTables(ctxT(tb), db, t))
	return t
}

// rabbit opens RabbitMQ connections with a ladder of the test's own and
// deletes what the test declared.
type rabbit struct {
	tb     testing.TB
	url    string
	ladder string
	admin  *broker.Conn
}

func newRabbit(tb testing.TB) *rabbit {
	r := &rabbit{tb: tb, url: testenv.RabbitURL(tb), ladder: testenv.Name(tb, "ladder")}
	r.admin = r.open()
	tb.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer cancel()
		for _, q := range broker.LadderTopology(r.ladder).Queues {
			_, _ = r.admin.Transport().DeleteQueue(ctx, q.Name)
		}
		_ = r.admin.Transport().DeleteExchange(ctx, r.ladder)
	})
	return r
}

// open returns a connection closed when the test ends.
func (r *rabbit) open() *broker.Conn {
	r.tb.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	c, err := broker.Config{Ladder: r.ladder, Logger: testenv.Logger(r.tb)}.Open(ctx, r.url)
	require.NoError(r.tb, err)
	r.tb.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
		defer cancel()
		require.NoError(r.tb, c.Close(ctx))
	})
	return c
}

// queue is a unique queue name; it, its .dlq and .parked are deleted when
// the test ends.
func (r *rabbit) queue(prefix string) string {
	q := testenv.Name(r.tb, prefix)
	r.tb.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer cancel()
		for _, n := range []string{q, q + broker.DeadLetterSuffix, q + broker.ParkedSuffix} {
			_, _ = r.admin.Transport().DeleteQueue(ctx, n)
		}
	})
	return q
}

// declare declares queue with its .dlq and .parked (as a consumer would).
func (r *rabbit) declare(q string) {
	r.tb.Helper()
	require.NoError(r.tb, r.admin.Declare(ctxT(r.tb), broker.ConsumerTopology(q)))
}
