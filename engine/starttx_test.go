package engine_test

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/stretchr/testify/require"

	"github.com/acemq/acemq-flow/dsl"
	"github.com/acemq/acemq-flow/engine"
	"github.com/acemq/acemq-flow/engine/journal"
	"github.com/acemq/acemq-flow/internal/brokertest"
	"github.com/acemq/acemq-flow/internal/testenv"
	"github.com/acemq/acemq-flow/patterns"
	"github.com/acemq/acemq-flow/persistence"
)

// TestStartTx: a run started inside the caller's transaction exists if and
// only if the transaction commits: committed, the relay sends it and it
// runs (and enters the journal); rolled back, nothing runs.
func TestStartTx(t *testing.T) {
	brokertest.Each(t, func(t *testing.T, h *brokertest.Harness) {
		ctx := brokertest.Ctx(t)
		db, tables := testDatabase(t)
		store, err := persistence.NewSQLOutboxStore(db, persistence.SQLOutboxStoreConfig{Tables: tables})
		require.NoError(t, err)

		fx := newFixture(t, h, engine.Config{})
		ef := newEffects()
		fx.register(dsl.Flow(fx.name, dsl.Step("charge", appendStep(ef, "charge"))))
		fx.work()
		relay, err := patterns.NewOutboxRelay(fx.conn, store, patterns.OutboxRelayConfig{Interval: 50 * time.Millisecond})
		require.NoError(t, err)
		require.NoError(t, relay.Start(ctx))
		t.Cleanup(func() { _ = relay.Close(context.Background()) })

		var committed, rolledBack engine.Started
		require.NoError(t, pgx.BeginFunc(ctx, db, func(tx pgx.Tx) error {
			committed, err = engine.StartTx(ctx, fx.eng, store, persistence.DB(tx), fx.name, Order{ID: "kept"})
			return err
		}))
		tx, err := db.Begin(ctx)
		require.NoError(t, err)
		rolledBack, err = engine.StartTx(ctx, fx.eng, store, persistence.DB(tx), fx.name, Order{ID: "dropped"})
		require.NoError(t, err)
		require.NoError(t, tx.Rollback(ctx))

		r := fx.waitStatus(committed.RunID, journal.Completed, 15*time.Second)
		require.JSONEq(t, `{"id":"kept","amount":0,"digital":false,"Trail":null}`, string(r.Input), "the run's input is recorded by its first step")
		require.Equal(t, 1, ef.get(committed.RunID, "charge"))
		fx.waitOutcomes(committed.RunID, []string{"start::started (outbox)", "step:charge:completed"})

		// The relay marks a record sent once the broker confirmed it, which
		// may be after the run it started has completed.
		require.Eventually(t, func() bool {
			var left int
			require.NoError(t, db.QueryRow(ctx, "SELECT count(*) FROM "+pgx.Identifier{tables.Outbox}.Sanitize()).Scan(&left))
			return left == 0
		}, 10*time.Second, 10*time.Millisecond, "the committed start was relayed, and the rolled-back one was never written")
		_, err = fx.eng.Journal().Run(ctx, rolledBack.RunID)
		require.ErrorIs(t, err, journal.ErrRunNotFound, "a rolled-back start is no run")
		require.Zero(t, ef.get(rolledBack.RunID, "charge"))
		_, err = engine.StartTx(ctx, fx.eng, store, persistence.DB(nil), fx.name, "not an order")
		require.ErrorIs(t, err, engine.ErrInvalidPayload)
	})
}

// testDatabase is a pool on the test database and tables of the test's
// own, migrated, dropped when the test ends.
// onPostgres is an engine Config whose run journal and idempotency store
// are on tables of the test's own (testDatabase), as workers that share a
// database have them.
func onPostgres(t testing.TB) engine.Config {
	t.Helper()
	db, tables := testDatabase(t)
	j, err := persistence.NewSQLJournal(db, persistence.SQLJournalConfig{Tables: tables})
	require.NoError(t, err)
	store, err := persistence.NewSQLIdempotencyStore(db, persistence.SQLIdempotencyStoreConfig{Tables: tables})
	require.NoError(t, err)
	return engine.Config{Journal: j, Store: store}
}

func testDatabase(t testing.TB) (*pgxpool.Pool, persistence.Tables) {
	t.Helper()
	ctx := brokertest.Ctx(t)
	db, err := pgxpool.New(ctx, testenv.DatabaseURL(t))
	require.NoError(t, err)
	t.Cleanup(db.Close)
	var b [5]byte
	_, _ = rand.Read(b[:])
	p := "acemq_t" + hex.EncodeToString(b[:]) + "_"
	tables := persistence.PrefixedTables(p)
	require.NoError(t, persistence.MigrateTables(ctx, db, tables))
	t.Cleanup(func() {
		for _, n := range tables.Names() {
			_, _ = db.Exec(context.Background(), "DROP TABLE IF EXISTS "+pgx.Identifier{n}.Sanitize())
		}
	})
	return db, tables
}

// TestStartTxHoldsNoSecondConnection: StartTx with a run id, inside a
// transaction on a pool of one connection, returns at once: it does not
// look the run up in a journal on the same pool (which waited for ever
// once every connection was some starter's transaction: make chaos's
// scenario 3 hung so). StartAgain in a transaction is refused.
func TestStartTxHoldsNoSecondConnection(t *testing.T) {
	t.Parallel()
	h := brokertest.New(t, "memory://"+testenv.Name(t, "broker"), false)
	ctx := brokertest.Ctx(t)
	_, tables := testDatabase(t)
	cfg, err := pgxpool.ParseConfig(testenv.DatabaseURL(t))
	require.NoError(t, err)
	cfg.MaxConns = 1
	one, err := pgxpool.NewWithConfig(ctx, cfg)
	require.NoError(t, err)
	t.Cleanup(one.Close)
	j, err := persistence.NewSQLJournal(one, persistence.SQLJournalConfig{Tables: tables})
	require.NoError(t, err)
	store, err := persistence.NewSQLOutboxStore(one, persistence.SQLOutboxStoreConfig{Tables: tables})
	require.NoError(t, err)
	fx := newFixture(t, h, engine.Config{Journal: j})
	fx.register(dsl.Flow(fx.name, dsl.Step("charge", appendStep(newEffects(), "charge"))))
	tctx, cancel := context.WithTimeout(ctx, 5*time.Second)
	defer cancel()
	var got engine.Started
	require.NoError(t, pgx.BeginFunc(tctx, one, func(tx pgx.Tx) error {
		got, err = engine.StartTx(tctx, fx.eng, store, persistence.DB(tx), fx.name, Order{ID: "one"}, engine.RunID(fx.name+"-1"))
		return err
	}))
	require.Equal(t, fx.name+"-1", got.RunID)
	err = pgx.BeginFunc(tctx, one, func(tx pgx.Tx) error {
		_, err := engine.StartTx(tctx, fx.eng, store, persistence.DB(tx), fx.name, Order{ID: "one"}, engine.RunID(fx.name+"-1"), engine.StartAgain())
		return err
	})
	require.ErrorIs(t, err, engine.ErrInvalidConfig)
}

// TestStartTxDeadline: a run started in a transaction has its flow's
// deadline too: the timer is written to the outbox with the run, and the
// run still in its step at the deadline is stopped and compensated.
func TestStartTxDeadline(t *testing.T) {
	brokertest.Each(t, func(t *testing.T, h *brokertest.Harness) {
		ctx := brokertest.Ctx(t)
		db, tables := testDatabase(t)
		store, err := persistence.NewSQLOutboxStore(db, persistence.SQLOutboxStoreConfig{Tables: tables})
		require.NoError(t, err)
		fx := newFixture(t, h, engine.Config{})
		ef, started, causes := newEffects(), make(chan string, 4), make(chan error, 4)
		fx.register(blockingFlow(fx.name, ef, started, causes, dsl.Deadline(time.Second)))
		fx.work()
		relay, err := patterns.NewOutboxRelay(fx.conn, store, patterns.OutboxRelayConfig{Interval: 50 * time.Millisecond})
		require.NoError(t, err)
		require.NoError(t, relay.Start(ctx))
		t.Cleanup(func() { _ = relay.Close(context.Background()) })
		var res engine.Started
		require.NoError(t, pgx.BeginFunc(ctx, db, func(tx pgx.Tx) error {
			res, err = engine.StartTx(ctx, fx.eng, store, persistence.DB(tx), fx.name, Order{ID: "slow"})
			return err
		}))
		r := stoppedByDeadline(fx, causes, res.RunID)
		require.Contains(t, r.Error, "cancelled by deadline")
		require.Eventually(t, func() bool { return ef.get(res.RunID, "undo-charge") == 1 }, 10*time.Second, 20*time.Millisecond,
			"charge is compensated; timeline %v", fx.outcomes(res.RunID))
	})
}
