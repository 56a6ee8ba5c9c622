package persistence_test

import (
	"sync"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/acemq/acemq-flow/persistence"
)

func TestMigrateConcurrentlyAndIdempotent(t *testing.T) {
	t.Parallel()
	db := pool(t)
	tb := tables(t, db) // migrated once already
	ctx := ctxT(t)
	var wg sync.WaitGroup
	errs := make([]error, 8)
	for i := range errs {
		wg.Go(func() { errs[i] = persistence.MigrateTables(ctx, db, tb) })
	}
	wg.Wait()
	for _, err := range errs {
		require.NoError(t, err)
	}
	all, err := persistence.Migrations()
	require.NoError(t, err)
	want := make([]int, len(all))
	for i, m := range all {
		want[i] = m.Version
	}
	got, err := persistence.AppliedVersions(ctx, db, tb)
	require.NoError(t, err)
	require.Equal(t, want, got, "every migration recorded once")
}

func TestMigrateFreshTablesFromManyProcesses(t *testing.T) {
	t.Parallel()
	db := pool(t)
	tb := tables(t, db)
	ctx := ctxT(t)
	// Start from nothing: drop what tables() migrated, then race.
	for _, n := range tb.Names() {
		_, err := db.Exec(ctx, "DROP TABLE "+n)
		require.NoError(t, err)
	}
	var wg sync.WaitGroup
	errs := make([]error, 6)
	for i := range errs {
		wg.Go(func() { errs[i] = persistence.MigrateTables(ctx, db, tb) })
	}
	wg.Wait()
	for _, err := range errs {
		require.NoError(t, err)
	}
	got, err := persistence.AppliedVersions(ctx, db, tb)
	require.NoError(t, err)
	all, err := persistence.Migrations()
	require.NoError(t, err)
	want := make([]int, len(all))
	for i, m := range all {
		want[i] = m.Version
	}
	require.Equal(t, want, got, "every embedded migration applied once")
	require.Equal(t, 1, want[0])
}

func TestTablesValidate(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		name   string
		tables persistence.Tables
		ok     bool
	}{
		{"defaults", persistence.Tables{}, true},
		{"custom", persistence.Tables{Outbox: "orders_outbox", Idempotency: "_keys2"}, true},
		{"upper case", persistence.Tables{Outbox: "Outbox"}, false},
		{"quote", persistence.Tables{Outbox: `outbox"; DROP TABLE x; --`}, false},
		{"schema qualified", persistence.Tables{Outbox: "public.outbox"}, false},
		{"leading digit", persistence.Tables{Outbox: "1outbox"}, false},
		{"space", persistence.Tables{Outbox: "out box"}, false},
		{"too long", persistence.Tables{Outbox: "a12345678901234567890123456789012345678901234567890"}, false},
		{"two roles one name", persistence.Tables{Outbox: "same", Idempotency: "same"}, false},
		{"clashes with a default", persistence.Tables{Outbox: persistence.DefaultIdempotencyTable}, false},
		// internal/benchmark's tables: its prefix, a 12-byte ID and 10
		// random hex digits leave 14 bytes for the longest role
		// (flow_versions, 13).
		{"the longest prefix in use", persistence.PrefixedTables("acemq_bench_abcdefghijkl_0123456789_"), true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			err := tc.tables.Validate()
			if tc.ok {
				require.NoError(t, err)
			} else {
				require.ErrorIs(t, err, persistence.ErrInvalidTableName)
			}
		})
	}
}

func TestStoresRefuseInvalidTables(t *testing.T) {
	t.Parallel()
	bad := persistence.Tables{Outbox: "x;y", Idempotency: "x;y", Schemas: "x;y"}
	_, err := persistence.NewSQLOutboxStore(nilDB{}, persistence.SQLOutboxStoreConfig{Tables: bad})
	require.ErrorIs(t, err, persistence.ErrInvalidTableName)
	_, err = persistence.NewSQLIdempotencyStore(nilDB{}, persistence.SQLIdempotencyStoreConfig{Tables: bad})
	require.ErrorIs(t, err, persistence.ErrInvalidTableName)
	_, err = persistence.NewSQLSchemaRegistry(nilDB{}, persistence.SQLSchemaRegistryConfig{Tables: bad})
	require.ErrorIs(t, err, persistence.ErrInvalidTableName)
	err = persistence.MigrateTables(ctxT(t), nilDB{}, bad)
	require.ErrorIs(t, err, persistence.ErrInvalidTableName)
}

// nilDB is a DB that is never reached: validation comes first.
type nilDB struct{ persistence.DB }
