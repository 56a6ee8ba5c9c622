package dashboard_test

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/stretchr/testify/require"

	"github.com/acemq/acemq-flow/engine/dashboard"
	"github.com/acemq/acemq-flow/engine/journal"
	"github.com/acemq/acemq-flow/engine/timeline/timelinetest"
	"github.com/acemq/acemq-flow/internal/dashboardtest"
	"github.com/acemq/acemq-flow/internal/testenv"
	"github.com/acemq/acemq-flow/persistence"
)

// TestRunPageOfAHundredThousandItemsOnPostgreSQL: the page of a run whose
// ForEach went over 100,000 items, on the PostgreSQL journal, in tables of
// the test's own: the timeline query reads every one of its 200,000
// events, grouping them is one pass, and one page of branches is
// rendered. The figures are logged.
func TestRunPageOfAHundredThousandItemsOnPostgreSQL(t *testing.T) {
	t.Parallel()
	ctx, cancel := context.WithTimeout(t.Context(), 2*time.Minute)
	defer cancel()
	pool, tables := testTables(ctx, t, "acemq_dash")
	j, err := persistence.NewSQLJournal(pool, persistence.SQLJournalConfig{Tables: tables})
	require.NoError(t, err)
	const items = 100_000
	events := timelinetest.ForkRun("r-big", "unit.shop", items, items, time.Now().Add(-time.Hour))
	began := time.Now()
	for from := 0; from < len(events); from += 5000 {
		require.NoError(t, j.Record(ctx, events[from:min(from+5000, len(events))]))
	}
	_, _, err = j.OpenJoin(ctx, journal.Join{RunID: "r-big", Key: "0/2/each", Total: items, Limit: 4}, make([][]byte, items))
	require.NoError(t, err)
	t.Logf("recorded %d events in %s", len(events), time.Since(began))

	for range 3 {
		began = time.Now()
		tl, err := j.Timeline(ctx, "r-big")
		require.NoError(t, err)
		t.Logf("the timeline query: %d events in %s", len(tl), time.Since(began))
	}

	h, err := dashboard.New(dashboard.Config{Journal: j, Logger: testenv.Logger(t)})
	require.NoError(t, err)
	srv := httptest.NewServer(h)
	t.Cleanup(func() { require.NoError(t, h.Close(context.Background())) })
	t.Cleanup(srv.Close)
	c := dashboardtest.Client(t)
	for _, path := range []string{"/runs/r-big", "/runs/r-big?fork=0/2/each&from=50000", "/runs/r-big?fork=0/2/each&branch=99999"} {
		began := time.Now()
		status, body, _ := dashboardtest.Do(t, c, http.MethodGet, srv.URL+path, nil, nil)
		t.Logf("%s: %s, %d bytes", path, time.Since(began), len(body))
		require.Equal(t, http.StatusOK, status)
		require.True(t, strings.Contains(body, "100000 handed out,\n  100000 arrived, 0 failed, 0 stopped, 0 running."), "the counts")
		require.Less(t, len(body), 1<<20, "a page, not the run")
	}
}

// testTables are journal tables of a test's own on the test database,
// under prefix and a random part, migrated, and dropped when the test
// ends; pool is the test's connection pool to them.
func testTables(ctx context.Context, t *testing.T, prefix string) (*pgxpool.Pool, persistence.Tables) {
	t.Helper()
	pool, err := pgxpool.New(ctx, testenv.DatabaseURL(t))
	require.NoError(t, err)
	t.Cleanup(pool.Close)
	var b [5]byte
	_, err = rand.Read(b[:])
	require.NoError(t, err)
	tables := persistence.PrefixedTables(prefix + hex.EncodeToString(b[:]) + "_")
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
		defer cancel()
		for _, name := range tables.Names() {
			_, err := pool.Exec(ctx, "DROP TABLE IF EXISTS "+pgx.Identifier{name}.Sanitize())
			require.NoError(t, err)
		}
	})
	require.NoError(t, persistence.MigrateTables(ctx, pool, tables))
	return pool, tables
}
