package persistence_test

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/acemq/acemq-flow/broker"
	"github.com/acemq/acemq-flow/internal/testenv"
	"github.com/acemq/acemq-flow/patterns"
	"github.com/acemq/acemq-flow/persistence"
)

// The outbox record commits or rolls back with the transaction that holds
// the order; the relay, woken by NOTIFY on commit, publishes what committed
// and never hears of what rolled back. (On the embedded broker here; an
// amqp:// URL is RabbitMQ.)
func ExampleSQLOutboxStore() {
	ctx := context.Background()
	db, err := pgxpool.New(ctx, testenv.ExampleDatabaseURL())
	if err != nil {
		fmt.Println(err)
		return
	}
	defer db.Close()
	tables := exampleTables() // omit for the default table names
	defer dropExampleTables(db, tables)
	if err := persistence.MigrateTables(ctx, db, tables); err != nil {
		fmt.Println(err)
		return
	}
	conn, err := broker.Open(ctx, "memory://")
	if err != nil {
		fmt.Println(err)
		return
	}
	defer conn.Close(ctx)
	placed := make(chan *broker.Message, 2)
	_, err = conn.Consume(ctx, "order.placed", func(_ context.Context, m *broker.Message) broker.Ack {
		placed <- m
		return broker.Accept()
	})
	if err != nil {
		fmt.Println(err)
		return
	}

	store, err := persistence.NewSQLOutboxStore(db, persistence.SQLOutboxStoreConfig{Tables: tables})
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

	place := func(orderID string, work func(tx pgx.Tx) error) error {
		return pgx.BeginFunc(ctx, db, func(tx pgx.Tx) error {
			rec, err := patterns.Record(ctx, conn, map[string]string{"order_id": orderID},
				broker.To("order.placed"), broker.Type("order.placed.v2"))
			if err != nil {
				return err
			}
			if _, err := store.Add(ctx, tx, rec); err != nil {
				return err
			}
			return work(tx) // the order's own rows, on the same tx
		})
	}
	fmt.Println("o-1:", place("o-1", func(pgx.Tx) error { return errors.New("card declined") }))
	fmt.Println("o-2:", place("o-2", func(pgx.Tx) error { return nil }))

	select {
	case m := <-placed:
		fmt.Println("published:", m.Type, string(m.Body))
	case <-time.After(10 * time.Second):
		fmt.Println("nothing published")
	}
	// Output:
	// o-1: card declined
	// o-2: <nil>
	// published: order.placed.v2 {"order_id":"o-2"}
}

// Consumers in several processes share one table of keys; a message's work
// runs once however often it is delivered, and the copy is accepted as a
// duplicate. PurgeExpired belongs on a schedule.
func ExampleSQLIdempotencyStore() {
	ctx := context.Background()
	db, err := pgxpool.New(ctx, testenv.ExampleDatabaseURL())
	if err != nil {
		fmt.Println(err)
		return
	}
	defer db.Close()
	tables := exampleTables() // omit for the default table names
	defer dropExampleTables(db, tables)
	if err := persistence.MigrateTables(ctx, db, tables); err != nil {
		fmt.Println(err)
		return
	}
	store, err := persistence.NewSQLIdempotencyStore(db, persistence.SQLIdempotencyStoreConfig{Tables: tables})
	if err != nil {
		fmt.Println(err)
		return
	}
	guard, err := patterns.Idempotent(store)
	if err != nil {
		fmt.Println(err)
		return
	}
	conn, err := broker.Open(ctx, "memory://")
	if err != nil {
		fmt.Println(err)
		return
	}
	defer conn.Close(ctx)

	settled := make(chan string, 2)
	observe := func(next broker.Handler) broker.Handler {
		return func(ctx context.Context, m *broker.Message) broker.Ack {
			ack := next(ctx, m)
			settled <- ack.Label()
			return ack
		}
	}
	_, err = conn.Consume(ctx, "orders.new", broker.Func(func(ctx context.Context, m *broker.Message) error {
		fmt.Println("reserving stock for", m.ID)
		return nil
	}), broker.Use(observe, guard))
	if err != nil {
		fmt.Println(err)
		return
	}
	for range 2 {
		if err := conn.Publish(ctx, map[string]string{"sku": "X-1"}, broker.To("orders.new"), broker.MessageID("order-42")); err != nil {
			fmt.Println(err)
			return
		}
	}
	<-settled
	fmt.Printf("second copy: %q\n", <-settled)

	purged, err := store.PurgeExpired(ctx)
	fmt.Println("expired keys purged:", purged, err)
	// Output:
	// reserving stock for order-42
	// second copy: "duplicate"
	// expired keys purged: 0 <nil>
}
