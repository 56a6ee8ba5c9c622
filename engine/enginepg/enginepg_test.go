package enginepg_test

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"
	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/stretchr/testify/require"

	"github.com/acemq/acemq-flow/broker"
	"github.com/acemq/acemq-flow/engine"
	"github.com/acemq/acemq-flow/engine/enginepg"
	"github.com/acemq/acemq-flow/engine/journal"
	"github.com/acemq/acemq-flow/internal/testenv"
	"github.com/acemq/acemq-flow/patterns"
	"github.com/acemq/acemq-flow/persistence"
)

// nowhere is a database URL nothing answers on: port 1 refuses at once.
const nowhere = "postgres://acemq:s3cret-pw@127.0.0.1:1/test"

func TestConfigValidate(t *testing.T) {
	t.Parallel()
	require.NoError(t, enginepg.Config{}.Validate())
	for _, tc := range []struct {
		cfg  enginepg.Config
		want string
	}{
		{enginepg.Config{Tables: persistence.Tables{Runs: "Runs; DROP"}}, `runs table "Runs; DROP"`},
		{enginepg.Config{Migrations: 7}, "Migrations MigrationMode(7): want CheckMigrations, ApplyMigrations or SkipMigrations"},
		{enginepg.Config{JournalRetention: -time.Hour}, "JournalRetention -1h0m0s: want 0 (the default) or more"},
		{enginepg.Config{ClaimTimeout: -time.Second}, "ClaimTimeout -1s"},
		{enginepg.Config{IdempotencyRetention: -time.Second}, "IdempotencyRetention -1s"},
		{enginepg.Config{ConnectTimeout: -time.Second}, "ConnectTimeout -1s"},
		{enginepg.Config{MaxConns: -1}, "MaxConns -1: want 0 (the default) or more"},
	} {
		err := tc.cfg.Validate()
		require.ErrorIs(t, err, enginepg.ErrInvalidConfig, tc.want)
		require.ErrorContains(t, err, tc.want)
		_, err = enginepg.Open(t.Context(), nowhere, tc.cfg)
		require.ErrorIs(t, err, enginepg.ErrInvalidConfig, "refused before connecting")
	}
}

// TestOpenRefuses: what Open cannot use is an error saying what is wrong,
// never showing the password.
func TestOpenRefuses(t *testing.T) {
	t.Parallel()
	ctx := t.Context()
	_, err := enginepg.Open(ctx, "", enginepg.Config{})
	require.ErrorIs(t, err, enginepg.ErrInvalidConfig)
	require.ErrorContains(t, err, "empty database URL")

	_, err = enginepg.Open(ctx, nowhere+"?sslmode=nonsense&sslpassword=k3y-pw", enginepg.Config{})
	var pe *pgconn.ParseConfigError
	require.ErrorAs(t, err, &pe)
	require.ErrorContains(t, err, "cannot parse")
	require.NotContains(t, err.Error(), "s3cret-pw")
	require.NotContains(t, err.Error(), "k3y-pw")

	_, err = enginepg.Open(ctx, nowhere, enginepg.Config{})
	require.ErrorContains(t, err, "connect to postgres://acemq@127.0.0.1:1/test: ")
	require.NotContains(t, err.Error(), "s3cret-pw")

	_, err = enginepg.FromPool(ctx, nil, enginepg.Config{})
	require.ErrorIs(t, err, enginepg.ErrInvalidConfig)
	require.ErrorContains(t, err, "nil pool")
}

// TestStoresCarryTheConfig: what Config says reaches the stores, and
// Engine fills only what the engine's Config leaves nil. No database:
// pgxpool connects lazily, and SkipMigrations asks nothing.
func TestStoresCarryTheConfig(t *testing.T) {
	t.Parallel()
	pool, err := pgxpool.New(t.Context(), nowhere)
	require.NoError(t, err)
	defer pool.Close()
	s, err := enginepg.FromPool(t.Context(), pool, enginepg.Config{Migrations: enginepg.SkipMigrations, JournalRetention: 72 * time.Hour})
	require.NoError(t, err)
	require.Equal(t, 72*time.Hour, s.Journal().Retention())
	require.Equal(t, "postgres://acemq@127.0.0.1:1/test", s.Name())
	require.Same(t, pool, s.Pool())
	require.Empty(t, s.Applied())
	err = s.Ping(t.Context())
	require.ErrorContains(t, err, "postgres://acemq@127.0.0.1:1/test does not answer: ")
	require.NotContains(t, err.Error(), "s3cret-pw")

	conn, err := broker.Open(t.Context(), "memory://")
	require.NoError(t, err)
	defer conn.Close(t.Context())
	cfg := s.Engine(engine.Config{Conn: conn, CloseTimeout: time.Second})
	require.Same(t, s.Journal(), cfg.Journal)
	require.Same(t, s.Idempotency(), cfg.Store)
	require.Same(t, s.CronGuard(), cfg.CronGuard)
	require.Equal(t, time.Second, cfg.CloseTimeout, "the rest is the caller's")

	mine, err := journal.NewMemory(0)
	require.NoError(t, err)
	store, err := patterns.NewInMemoryIdempotencyStore(time.Minute)
	require.NoError(t, err)
	cfg = s.Engine(engine.Config{Conn: conn, Journal: mine, Store: store})
	require.Same(t, mine, cfg.Journal, "a journal the caller set is kept")
	require.Same(t, store, cfg.Store, "a store the caller set is kept")
	require.Same(t, s.CronGuard(), cfg.CronGuard)

	s.Close()
	require.ErrorContains(t, pool.Ping(t.Context()), "127.0.0.1:1", "the caller's pool is left open (and still refused)")
}

// TestMigrations: CheckMigrations refuses a database that lacks
// migrations, naming them; ApplyMigrations applies them once; Close closes
// the pool Open created.
func TestMigrations(t *testing.T) {
	t.Parallel()
	ctx, cancel := context.WithTimeout(t.Context(), 60*time.Second)
	defer cancel()
	url := testenv.DatabaseURL(t)
	tables := testTables(t, url)
	all, err := persistence.Migrations()
	require.NoError(t, err)

	_, err = enginepg.Open(ctx, url, enginepg.Config{Tables: tables})
	require.ErrorIs(t, err, enginepg.ErrNotMigrated)
	require.ErrorContains(t, err, "lacks 0001_")
	require.ErrorContains(t, err, "open it with ApplyMigrations")

	s, err := enginepg.Open(ctx, url, enginepg.Config{Tables: tables, Migrations: enginepg.ApplyMigrations})
	require.NoError(t, err)
	require.Equal(t, all, s.Applied())
	missing, err := s.Missing(ctx)
	require.NoError(t, err)
	require.Empty(t, missing)
	require.NoError(t, s.Ping(ctx))
	pool := s.Pool()
	s.Close()
	require.Error(t, pool.Ping(ctx), "Open's pool is closed with the stores")

	own, err := pgxpool.New(ctx, url)
	require.NoError(t, err)
	defer own.Close()
	s, err = enginepg.FromPool(ctx, own, enginepg.Config{Tables: tables, Migrations: enginepg.ApplyMigrations})
	require.NoError(t, err)
	require.Empty(t, s.Applied(), "nothing left to apply")
	s.Close()
	require.NoError(t, own.Ping(ctx), "a pool given to FromPool stays open")
	s, err = enginepg.FromPool(ctx, own, enginepg.Config{Tables: tables})
	require.NoError(t, err, "CheckMigrations passes a migrated database")
	s.Close()
}

// TestStoresAreShared: stores opened twice on one database, as two
// workers do, see the same runs, the same claims and the same cron ticks.
func TestStoresAreShared(t *testing.T) {
	t.Parallel()
	ctx, cancel := context.WithTimeout(t.Context(), 60*time.Second)
	defer cancel()
	url := testenv.DatabaseURL(t)
	tables := testTables(t, url)
	s, err := enginepg.Open(ctx, url, enginepg.Config{Tables: tables, Migrations: enginepg.ApplyMigrations})
	require.NoError(t, err)
	defer s.Close()
	var j journal.Journal = s.Journal()
	run := "r-" + testenv.Name(t, "shared")
	require.NoError(t, j.Record(ctx, []journal.Event{{RunID: run, Flow: "f", Kind: journal.KindStart, Key: "start", Status: journal.Running,
		StartedAt: time.Now(), EndedAt: time.Now()}}))
	other, err := enginepg.Open(ctx, url, enginepg.Config{Tables: tables})
	require.NoError(t, err)
	defer other.Close()
	got, err := other.Journal().Run(ctx, run)
	require.NoError(t, err)
	require.Equal(t, journal.Running, got.Status)

	c, err := s.Idempotency().Claim(ctx, run)
	require.NoError(t, err)
	require.Equal(t, patterns.ClaimClaimed, c)
	c, err = other.Idempotency().Claim(ctx, run)
	require.NoError(t, err)
	require.Equal(t, patterns.ClaimInProgress, c)
	tick := time.Now().Truncate(time.Second)
	won, err := s.CronGuard().Fire(ctx, "f", "@every 1s", tick)
	require.NoError(t, err)
	require.True(t, won)
	won, err = other.CronGuard().Fire(ctx, "f", "@every 1s", tick)
	require.NoError(t, err)
	require.False(t, won)
}

// testTables are table names of the test's own, dropped when it ends.
func testTables(t *testing.T, url string) persistence.Tables {
	t.Helper()
	tables := newTables()
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer cancel()
		pool, err := pgxpool.New(ctx, url)
		require.NoError(t, err)
		defer pool.Close()
		require.NoError(t, dropTables(pool, tables))
	})
	return tables
}

// newTables are table names of one test's or example's own, so that runs
// on a shared database never meet.
func newTables() persistence.Tables {
	var b [5]byte
	_, _ = rand.Read(b[:])
	return persistence.PrefixedTables("acemq_t" + hex.EncodeToString(b[:]) + "_")
}

// dropTables drops what newTables named.
func dropTables(db *pgxpool.Pool, tables persistence.Tables) error {
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	for _, name := range tables.Names() {
		if _, err := db.Exec(ctx, "DROP TABLE IF EXISTS "+pgx.Identifier{name}.Sanitize()); err != nil {
			return fmt.Errorf("drop %s: %w", name, err)
		}
	}
	return nil
}

// TestOpenSizesThePool: Open's pool holds DefaultMaxConns connections at
// most, or Config.MaxConns, unless the URL's pool_max_conns says.
func TestOpenSizesThePool(t *testing.T) {
	t.Parallel()
	url := testenv.DatabaseURL(t)
	sep := "?"
	if strings.Contains(url, "?") {
		sep = "&"
	}
	for _, tc := range []struct {
		url  string
		cfg  enginepg.Config
		want int32
	}{
		{url, enginepg.Config{}, enginepg.DefaultMaxConns},
		{url, enginepg.Config{MaxConns: 7}, 7},
		{url + sep + "pool_max_conns=3", enginepg.Config{MaxConns: 7}, 3},
	} {
		s, err := enginepg.Open(t.Context(), tc.url, enginepg.Config{Migrations: enginepg.SkipMigrations, MaxConns: tc.cfg.MaxConns})
		require.NoError(t, err)
		require.Equal(t, tc.want, s.Pool().Config().MaxConns, tc.url)
		s.Close()
	}
}
