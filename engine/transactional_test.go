package engine_test

import (
	"context"
	"errors"
	"sync"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/stretchr/testify/require"

	"github.com/acemq/acemq-flow/broker"
	"github.com/acemq/acemq-flow/dsl"
	"github.com/acemq/acemq-flow/engine"
	"github.com/acemq/acemq-flow/engine/journal"
	"github.com/acemq/acemq-flow/internal/brokertest"
	"github.com/acemq/acemq-flow/internal/testenv"
	"github.com/acemq/acemq-flow/patterns"
	"github.com/acemq/acemq-flow/persistence"
)

// ledger is a table of the test's own where transactional steps write
// their effects: one row per application.
type ledger struct {
	db    *pgxpool.Pool
	table string
}

func newLedger(t *testing.T, db *pgxpool.Pool, tables persistence.Tables) *ledger {
	t.Helper()
	l := &ledger{db: db, table: pgx.Identifier{tables.Outbox + "_ledger"}.Sanitize()}
	ctx := brokertest.Ctx(t)
	_, err := db.Exec(ctx, "CREATE TABLE "+l.table+" (run_id text, what text, attempt int)")
	require.NoError(t, err)
	t.Cleanup(func() { _, _ = db.Exec(context.Background(), "DROP TABLE IF EXISTS "+l.table) })
	return l
}

// write applies the effect what in the step's transaction; a step that is
// not transactional has none, and that is the test failing.
func (l *ledger) write(ctx context.Context, what string) error {
	tx, ok := persistence.Tx(ctx)
	if !ok {
		return broker.Fatal(errors.New("no transaction in the step's context"))
	}
	m, _ := broker.Handling(ctx)
	_, err := tx.Exec(ctx, "INSERT INTO "+l.table+" (run_id, what, attempt) VALUES ($1, $2, $3)", m.RunID, what, m.Attempt)
	return err
}

// attempts lists the attempts whose effect what committed for run.
func (l *ledger) attempts(t *testing.T, run, what string) []int {
	t.Helper()
	rows, err := l.db.Query(brokertest.Ctx(t), "SELECT attempt FROM "+l.table+" WHERE run_id = $1 AND what = $2 ORDER BY attempt", run, what)
	require.NoError(t, err)
	out, err := pgx.CollectRows(rows, pgx.RowTo[int])
	require.NoError(t, err)
	return out
}

// txFixture is a fixture whose idempotency store is on PostgreSQL, with a
// ledger beside it.
func txFixture(t *testing.T, h *brokertest.Harness, wrap func(patterns.TxStore) patterns.TxStore) (*fixture, *ledger) {
	t.Helper()
	db, tables := testDatabase(t)
	store, err := persistence.NewSQLIdempotencyStore(db, persistence.SQLIdempotencyStoreConfig{Tables: tables})
	require.NoError(t, err)
	var s patterns.TxStore = store
	if wrap != nil {
		s = wrap(store)
	}
	return newFixture(t, h, engine.Config{Store: s}), newLedger(t, db, tables)
}

// TestTransactionalStepFailedAttemptRollsBack: what a transactional step
// wrote on an attempt that failed is rolled back with it; the attempt
// that succeeds commits its writes once.
func TestTransactionalStepFailedAttemptRollsBack(t *testing.T) {
	brokertest.Each(t, func(t *testing.T, h *brokertest.Harness) {
		fx, l := txFixture(t, h, nil)
		ef := newEffects()
		fx.register(dsl.Flow(fx.name,
			dsl.Step("charge", func(ctx context.Context, o Order) (Order, error) {
				if err := l.write(ctx, "charge"); err != nil {
					return o, err
				}
				m, _ := broker.Handling(ctx)
				if m.Attempt == 1 {
					return o, errors.New("gateway timed out after the charge was written")
				}
				return o, nil
			}).Transactional().Retry(broker.Constant(3, time.Second)),
			dsl.Step("ship", appendStep(ef, "ship"))))
		fx.work()
		run := fx.start(Order{ID: "o-1"})
		fx.waitStatus(run, journal.Completed, 20*time.Second)
		require.Equal(t, []int{2}, l.attempts(t, run, "charge"), "attempt 1's write rolled back, attempt 2's committed")
		require.Equal(t, 1, ef.get(run, "ship"))
		fx.waitOutcomes(run, []string{"start::started", "step:charge:retried", "step:charge:completed", "step:ship:completed"})
	})
}

// commitLost is a store whose first successful CompleteInTx reports an
// error: the connection dropped while the commit was on its way, or the
// worker died just after it.
type commitLost struct {
	patterns.TxStore
	once sync.Once
}

func (c *commitLost) CompleteInTx(ctx context.Context, key string, work func(context.Context) ([]byte, error)) error {
	err := c.TxStore.CompleteInTx(ctx, key, work)
	lost := false
	if err == nil {
		c.once.Do(func() { lost = true })
	}
	if lost {
		return errors.New("connection lost while committing")
	}
	return err
}

// TestTransactionalStepCommittedThenLost: a transactional step committed,
// and its worker never heard so. The step is not run again: the redelivery
// finds it done, sends on the hop kept in the same transaction and records
// it; the run completes with the step's writes applied once.
func TestTransactionalStepCommittedThenLost(t *testing.T) {
	brokertest.Each(t, func(t *testing.T, h *brokertest.Harness) {
		fx, l := txFixture(t, h, func(s patterns.TxStore) patterns.TxStore { return &commitLost{TxStore: s} })
		ef := newEffects()
		fx.register(dsl.Flow(fx.name,
			dsl.Step("charge", func(ctx context.Context, o Order) (Order, error) {
				return o, l.write(ctx, "charge")
			}).Transactional().Retry(broker.Constant(3, time.Second)),
			dsl.Step("ship", appendStep(ef, "ship"))))
		fx.work()
		run := fx.start(Order{ID: "o-1"})
		fx.waitStatus(run, journal.Completed, 20*time.Second)
		require.Equal(t, []int{1}, l.attempts(t, run, "charge"), "the step's write was committed once, on attempt 1")
		require.Equal(t, 1, ef.get(run, "ship"), "the kept hop was sent on once")
		fx.waitOutcomes(run, []string{"start::started", "step:charge:retried", "step:charge:completed", "step:ship:completed"})
	})
}

// TestTransactionalCompensation: the compensation of a transactional step
// runs in a transaction too, and its writes commit once.
func TestTransactionalCompensation(t *testing.T) {
	brokertest.Each(t, func(t *testing.T, h *brokertest.Harness) {
		fx, l := txFixture(t, h, nil)
		fx.register(dsl.Flow(fx.name,
			dsl.Step("charge", func(ctx context.Context, o Order) (Order, error) {
				return o, l.write(ctx, "charge")
			}).Transactional().Compensate(func(ctx context.Context, o Order) error {
				return l.write(ctx, "refund")
			}),
			dsl.Step("ship", func(context.Context, Order) (Order, error) {
				return Order{}, broker.Fatal(errors.New("no courier"))
			})))
		fx.work()
		run := fx.start(Order{ID: "o-1"})
		fx.waitStatus(run, journal.Compensated, 20*time.Second)
		require.Equal(t, []int{1}, l.attempts(t, run, "charge"))
		require.Equal(t, []int{1}, l.attempts(t, run, "refund"))
	})
}

// TestTransactionalNeedsATxStore: a worker for a flow with a
// transactional step is refused by an engine whose store cannot run
// transactions; the flow registers, so that runs can be started.
func TestTransactionalNeedsATxStore(t *testing.T) {
	h := brokertest.New(t, "memory://"+testenv.Name(t, "broker"), false)
	conn := h.Open(broker.Config{})
	eng, err := engine.New(engine.Config{Conn: conn})
	require.NoError(t, err)
	t.Cleanup(func() { _ = eng.Close(context.Background()) })
	require.NoError(t, eng.Register(dsl.Flow("ledger", dsl.Step("charge", func(_ context.Context, o Order) (Order, error) { return o, nil }).Transactional())))
	w, err := eng.StartWorker(brokertest.Ctx(t))
	require.Nil(t, w)
	require.ErrorIs(t, err, engine.ErrNoTransactions)
	require.ErrorContains(t, err, `flow "ledger" step "charge" is Transactional`)
	require.ErrorContains(t, err, "persistence.SQLIdempotencyStore")
}
