package persistence_test

import (
	"testing"

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
