package persistence_test

import (
	"context"
	"errors"
	"testing"

	"github.com/jackc/pgx/v5"
	"github.com/stretchr/testify/require"

	"github.com/acemq/acemq-flow/patterns"
	"github.com/acemq/acemq-flow/patterns/storetest"
	"github.com/acemq/acemq-flow/persistence"
)

// The PostgreSQL stores pass the conformance suites the in-memory ones
// pass, every test on tables of its own; each store instance is a holder
// (a claimant) of its own, as another worker process's would be.

func TestSQLIdempotencyStoreConformance(t *testing.T) {
	t.Parallel()
	db := pool(t)
	storetest.Idempotency(t, func(t *testing.T, cfg storetest.IdempotencyConfig) storetest.IdempotencyStores {
		tb := tables(t, db)
		open := func() patterns.ResultStore {
			return idemStore(t, db, tb, persistence.SQLIdempotencyStoreConfig{ClaimTimeout: cfg.Lease, Retention: cfg.Retention})
		}
		return storetest.IdempotencyStores{Store: open(), Another: open, Effects: txEffects(t, db, tb)}
	})
}

// txEffects keeps the work of CompleteInTx in a table of the test's own.
func txEffects(t *testing.T, db persistence.DB, tb persistence.Tables) *storetest.TxEffects {
	t.Helper()
	ctx := ctxT(t)
	effects := pgx.Identifier{tb.Idempotency + "_effects"}.Sanitize()
	_, err := db.Exec(ctx, "CREATE TABLE "+effects+" (name text NOT NULL)")
	require.NoError(t, err)
	t.Cleanup(func() {
		_, err := db.Exec(context.Background(), "DROP TABLE "+effects)
		require.NoError(t, err)
	})
	return &storetest.TxEffects{
		Write: func(ctx context.Context, name string) error {
			tx, ok := persistence.Tx(ctx)
			if !ok {
				return errors.New("the work's context carries no transaction")
			}
			_, err := tx.Exec(ctx, "INSERT INTO "+effects+" (name) VALUES ($1)", name)
			return err
		},
		Committed: func(ctx context.Context) ([]string, error) {
			rows, err := db.Query(ctx, "SELECT name FROM "+effects)
			if err != nil {
				return nil, err
			}
			return pgx.CollectRows(rows, pgx.RowTo[string])
		},
	}
}

// TestTxOutsideTransaction: a context that CompleteInTx did not hand its
// work carries no transaction (the suite's effects read one from those
// that do).
func TestTxOutsideTransaction(t *testing.T) {
	t.Parallel()
	_, ok := persistence.Tx(context.Background())
	require.False(t, ok)
}

func TestSQLOutboxStoreConformance(t *testing.T) {
	t.Parallel()
	db := pool(t)
	storetest.Outbox(t, func(t *testing.T, cfg storetest.OutboxConfig) storetest.OutboxStores {
		tb := tables(t, db)
		open := func() *persistence.SQLOutboxStore {
			return outboxStore(t, db, tb, persistence.SQLOutboxStoreConfig{Lease: cfg.Lease, MaxAttempts: cfg.MaxAttempts})
		}
		s := open()
		return storetest.OutboxStores{
			Store: s,
			Add: func(ctx context.Context, rec patterns.OutboxRecord) (id string, err error) {
				err = pgx.BeginFunc(ctx, db, func(tx pgx.Tx) error {
					id, err = s.Add(ctx, tx, rec)
					return err
				})
				return id, err
			},
			Records: func(ctx context.Context) ([]patterns.OutboxRecord, error) { return s.Records(ctx, 0) },
			Another: func() storetest.OutboxStore { return open() },
			AddRolledBack: func(ctx context.Context, rec patterns.OutboxRecord) error {
				tx, err := db.Begin(ctx)
				if err != nil {
					return err
				}
				if _, err := s.Add(ctx, tx, rec); err != nil {
					return errors.Join(err, tx.Rollback(ctx))
				}
				return tx.Rollback(ctx)
			},
		}
	})
}

func TestSQLSchemaRegistryConformance(t *testing.T) {
	t.Parallel()
	db := pool(t)
	storetest.Schemas(t, func(t *testing.T) storetest.SchemaRegistries {
		tb := tables(t, db)
		open := func() patterns.SchemaRegistry { return registry(t, db, tb) }
		return storetest.SchemaRegistries{Registry: open(), Another: open}
	})
}
