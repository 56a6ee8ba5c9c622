package persistence_test

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/stretchr/testify/require"

	"github.com/acemq/acemq-flow/internal/brokertest"
	"github.com/acemq/acemq-flow/internal/oncetest"
	"github.com/acemq/acemq-flow/internal/testenv"
	"github.com/acemq/acemq-flow/patterns"
	"github.com/acemq/acemq-flow/persistence"
)

// TestOnceSurvivesACrashAtEachPoint: the executor on the PostgreSQL store,
// each worker a store instance of its own over one table, a worker dying
// at each point of the sequence, on both transports; once with the work's
// effect outside the database (done again when the worker died inside
// it), once with it in the store's transaction (done once, whatever).
func TestOnceSurvivesACrashAtEachPoint(t *testing.T) {
	db := pool(t)
	tb := tables(t, db)
	const lease = time.Second
	store := func(t *testing.T) patterns.IdempotencyStore {
		s, err := persistence.NewSQLIdempotencyStore(db, persistence.SQLIdempotencyStoreConfig{Tables: tb, ClaimTimeout: lease})
		require.NoError(t, err)
		return s
	}
	effects := testenv.Name(t, "effects")
	_, err := db.Exec(ctxT(t), `CREATE TABLE `+pgx.Identifier{effects}.Sanitize()+` (key text NOT NULL)`)
	require.NoError(t, err)
	t.Cleanup(func() { _, _ = db.Exec(context.Background(), `DROP TABLE `+pgx.Identifier{effects}.Sanitize()) })
	brokertest.Each(t, func(t *testing.T, h *brokertest.Harness) {
		t.Run("effect outside", func(t *testing.T) {
			oncetest.Run(t, h, oncetest.Config{Store: store, Lease: lease})
		})
		t.Run("effect in the transaction", func(t *testing.T) {
			oncetest.Run(t, h, oncetest.Config{Store: store, Lease: lease, InTx: true,
				Effect: func(ctx context.Context, key string) error {
					tx, ok := persistence.Tx(ctx)
					if !ok {
						return errors.New("no transaction in the unit's context")
					}
					_, err := tx.Exec(ctx, `INSERT INTO `+pgx.Identifier{effects}.Sanitize()+` (key) VALUES ($1)`, key)
					return err
				},
				Effects: func(t *testing.T, key string) int {
					var n int
					require.NoError(t, db.QueryRow(ctxT(t), `SELECT count(*) FROM `+pgx.Identifier{effects}.Sanitize()+` WHERE key = $1`, key).Scan(&n))
					return n
				},
			})
		})
	})
}
