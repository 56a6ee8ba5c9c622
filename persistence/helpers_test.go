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

	"github.com/acemq/acemq-flow/internal/brokertest"
	"github.com/acemq/acemq-flow/internal/testenv"
	"github.com/acemq/acemq-flow/persistence"
)

// ctxT bounds a test at 90 s; a benchmark runs as long as its b.N needs
// (a relay started with a 90 s context stops mid-benchmark).
func ctxT(tb testing.TB) context.Context {
	ctx, cancel := context.WithCancel(context.Background())
	if _, bench := tb.(*testing.B); !bench {
		ctx, cancel = context.WithTimeout(context.Background(), 90*time.Second)
	}
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
	t := persistence.PrefixedTables(p)
	tb.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer cancel()
		for _, name := range t.Names() {
			_, err := db.Exec(ctx, "DROP TABLE IF EXISTS "+pgx.Identifier{name}.Sanitize())
			require.NoError(tb, err)
		}
	})
	require.NoError(tb, persistence.MigrateTables(ctxT(tb), db, t))
	return t
}

// newRabbit is the shared broker harness on RabbitMQ: connections with a
// ladder of the test's own, unique queue names, everything deleted at the
// end.
func newRabbit(tb testing.TB) *brokertest.Harness {
	return brokertest.New(tb, testenv.RabbitURL(tb), true)
}
