package journalbench

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/acemq/acemq-flow/internal/testenv"
	"github.com/acemq/acemq-flow/persistence"
)

// Set is a data set loaded for one test: n runs started before End, in
// journal tables of the test's own.
type Set struct {
	Journal *persistence.SQLJournal
	Pool    *pgxpool.Pool
	Tables  persistence.Tables
	N       int
	End     time.Time
}

// Run is run i of the set (RunOf).
func (s *Set) Run(i int) Run { return RunOf(i, s.End) }

// Count is how many of the set's runs keep takes.
func (s *Set) Count(keep func(Run) bool) int64 {
	var n int64
	for i := 1; i <= s.N; i++ {
		if keep(s.Run(i)) {
			n++
		}
	}
	return n
}

// ForTest loads n runs started before end (Load) into journal tables
// named prefix and a random part, migrated, and dropped with everything
// in them when tb ends (so is the pool). It skips tb without the test
// database, or fails it under ACEMQ_REQUIRE_SERVICES=1.
func ForTest(ctx context.Context, tb testing.TB, prefix string, n int, end time.Time) *Set {
	tb.Helper()
	pool, err := pgxpool.New(ctx, testenv.DatabaseURL(tb))
	if err != nil {
		tb.Fatalf("journalbench: connect: %v", err)
	}
	tb.Cleanup(pool.Close)
	var b [5]byte
	_, _ = rand.Read(b[:])
	tables := persistence.PrefixedTables(prefix + hex.EncodeToString(b[:]) + "_")
	tb.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
		defer cancel()
		for _, name := range tables.Names() {
			if _, err := pool.Exec(ctx, "DROP TABLE IF EXISTS "+pgx.Identifier{name}.Sanitize()); err != nil {
				tb.Errorf("journalbench: drop %s: %v", name, err)
			}
		}
	})
	if err := persistence.MigrateTables(ctx, pool, tables); err != nil {
		tb.Fatalf("journalbench: migrate: %v", err)
	}
	began := time.Now()
	if err := Load(ctx, pool, tables, n, end); err != nil {
		tb.Fatal(err)
	}
	tb.Logf("journalbench: loaded %d runs into %s in %s", n, tables.Runs, time.Since(began).Round(time.Millisecond))
	j, err := persistence.NewSQLJournal(pool, persistence.SQLJournalConfig{Tables: tables})
	if err != nil {
		tb.Fatalf("journalbench: journal: %v", err)
	}
	return &Set{Journal: j, Pool: pool, Tables: tables, N: n, End: end}
}
