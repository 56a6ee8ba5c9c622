package persistence_test

import (
	"fmt"
	"sync"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/acemq/acemq-flow/patterns"
	"github.com/acemq/acemq-flow/persistence"
)

func registry(t *testing.T, db persistence.DB, tb persistence.Tables) *persistence.SQLSchemaRegistry {
	t.Helper()
	r, err := persistence.NewSQLSchemaRegistry(db, persistence.SQLSchemaRegistryConfig{Tables: tb})
	require.NoError(t, err)
	return r
}

func TestSQLSchemaRegistryConcurrentRegistrationsGetDistinctIDs(t *testing.T) {
	t.Parallel()
	db := pool(t)
	tb := tables(t, db)
	ctx := ctxT(t)
	regs := []*persistence.SQLSchemaRegistry{registry(t, db, tb), registry(t, db, tb), registry(t, db, tb)}
	const n = 60
	ids := make([]int64, n)
	var wg sync.WaitGroup
	for i := range n {
		wg.Go(func() {
			s, err := regs[i%len(regs)].Register(ctx, fmt.Sprintf("subject-%d", i%4), "json-schema", fmt.Appendf(nil, `{"v":%d}`, i))
			if assert.NoError(t, err) {
				ids[i] = s.ID
			}
		})
	}
	wg.Wait()
	seen := map[int64]bool{}
	for _, id := range ids {
		require.False(t, seen[id], "id %d handed out twice", id)
		seen[id] = true
	}
	for s := range 4 {
		versions, err := regs[0].Versions(ctx, fmt.Sprintf("subject-%d", s))
		require.NoError(t, err)
		require.Len(t, versions, n/4)
		for i, v := range versions {
			require.Equal(t, i+1, v.Version, "versions are gapless per subject")
		}
	}
}

func TestSQLSchemaRegistrySameDefinitionSameID(t *testing.T) {
	t.Parallel()
	db := pool(t)
	tb := tables(t, db)
	ctx := ctxT(t)
	a, b := registry(t, db, tb), registry(t, db, tb)
	def := []byte(`{"type":"record","name":"OrderPlaced"}`)

	ids := make([]int64, 20)
	var wg sync.WaitGroup
	for i := range ids {
		wg.Go(func() {
			r := a
			if i%2 == 1 {
				r = b
			}
			s, err := r.Register(ctx, "order.placed", "avro", def)
			if assert.NoError(t, err) {
				ids[i] = s.ID
			}
		})
	}
	wg.Wait()
	for _, id := range ids {
		require.Equal(t, ids[0], id, "the same bytes from any process are the same id")
	}

	spaced, err := b.Register(ctx, "order.placed", "avro", []byte(`{"type": "record","name":"OrderPlaced"}`))
	require.NoError(t, err)
	require.NotEqual(t, ids[0], spaced.ID, "whitespace makes a different definition")
	require.Equal(t, 2, spaced.Version)

	latest, err := a.Latest(ctx, "order.placed")
	require.NoError(t, err)
	require.Equal(t, spaced.ID, latest.ID)
	byID, err := a.ByID(ctx, ids[0])
	require.NoError(t, err)
	require.Equal(t, def, byID.Definition)
	require.Equal(t, patterns.SchemaFingerprint(def), byID.Fingerprint)
	require.Equal(t, "avro", byID.Format)
	require.Equal(t, 1, byID.Version)

	_, err = a.Latest(ctx, "nobody")
	require.ErrorIs(t, err, patterns.ErrSchemaNotFound)
	_, err = a.ByID(ctx, 1<<40)
	require.ErrorIs(t, err, patterns.ErrSchemaNotFound)
	_, err = a.Versions(ctx, "nobody")
	require.ErrorIs(t, err, patterns.ErrSchemaNotFound)
	_, err = a.Register(ctx, "", "avro", def)
	require.ErrorIs(t, err, patterns.ErrInvalidSchema)
}

func TestSQLSchemaRegistryInCallersTransaction(t *testing.T) {
	t.Parallel()
	db := pool(t)
	tb := tables(t, db)
	ctx := ctxT(t)
	tx, err := db.Begin(ctx)
	require.NoError(t, err)
	s, err := registry(t, tx, tb).Register(ctx, "inside", "avro", []byte("x"))
	require.NoError(t, err)
	require.NoError(t, tx.Rollback(ctx))
	_, err = registry(t, db, tb).ByID(ctx, s.ID)
	require.ErrorIs(t, err, patterns.ErrSchemaNotFound, "a registry on a pgx.Tx stays inside it")
}
