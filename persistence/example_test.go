package persistence_test

import (
	"context"
	"fmt"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/acemq/acemq-flow/broker"
	"github.com/acemq/acemq-flow/patterns"
	"github.com/acemq/acemq-flow/persistence"
)

// The outbox record commits or rolls back with the order; the relay, woken
// by NOTIFY on commit, publishes it. (Needs PostgreSQL and RabbitMQ, so it
// is compiled but not run.)
func ExampleSQLOutboxStore() {
	ctx := context.Background()
	db, err := pgxpool.New(ctx, "postgres://postgres@127.0.0.1:5432/app")
	if err != nil {
		fmt.Println(err)
		return
	}
	defer db.Close()
	if err := persistence.Migrate(ctx, db); err != nil {
		fmt.Println(err)
		return
	}
	conn, err := broker.Open(ctx, "amqp://guest:guest@127.0.0.1:5672/")
	if err != nil {
		fmt.Println(err)
		return
	}
	defer conn.Close(ctx)

	store, err := persistence.NewSQLOutboxStore(db, persistence.SQLOutboxStoreConfig{})
	if err != nil {
		fmt.Println(err)
		return
	}
	relay, err := patterns.NewOutboxRelay(conn, store, patterns.OutboxRelayConfig{})
	if err != nil {
		fmt.Println(err)
		return
	}
	if err := relay.Start(ctx); err != nil {
		fmt.Println(err)
		return
	}
	defer relay.Close(ctx)

	err = pgx.BeginFunc(ctx, db, func(tx pgx.Tx) error {
		if _, err := tx.Exec(ctx, `INSERT INTO orders (id) VALUES ($1)`, "o-1"); err != nil {
			return err
		}
		rec, err := patterns.Record(ctx, conn, map[string]string{"order_id": "o-1"},
			broker.ToExchange("orders-events"), broker.To("order.placed"), broker.Type("order.placed.v2"))
		if err != nil {
			return err
		}
		_, err = store.Add(ctx, tx, rec)
		return err
	})
	fmt.Println(err)
}

// Consumers in several processes share one table of keys; a message's work
// runs once however often it is delivered. PurgeExpired belongs on a
// schedule.
func ExampleSQLIdempotencyStore() {
	ctx := context.Background()
	db, err := pgxpool.New(ctx, "postgres://postgres@127.0.0.1:5432/app")
	if err != nil {
		fmt.Println(err)
		return
	}
	defer db.Close()
	store, err := persistence.NewSQLIdempotencyStore(db, persistence.SQLIdempotencyStoreConfig{})
	if err != nil {
		fmt.Println(err)
		return
	}
	guard, err := patterns.Idempotent(store)
	if err != nil {
		fmt.Println(err)
		return
	}
	conn, err := broker.Open(ctx, "amqp://guest:guest@127.0.0.1:5672/")
	if err != nil {
		fmt.Println(err)
		return
	}
	defer conn.Close(ctx)
	_, err = conn.Consume(ctx, "orders.new", broker.Func(func(ctx context.Context, m *broker.Message) error {
		return nil // reserve the stock
	}), broker.Use(guard))
	fmt.Println(err)
}
