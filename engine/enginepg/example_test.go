package enginepg_test

import (
	"context"
	"errors"
	"fmt"
	"os"
	"testing"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/acemq/acemq-flow/broker"
	"github.com/acemq/acemq-flow/dsl"
	"github.com/acemq/acemq-flow/engine"
	"github.com/acemq/acemq-flow/engine/enginepg"
	"github.com/acemq/acemq-flow/internal/testenv"
)

// TestMain leaves the examples out when PostgreSQL does not answer: every
// example here needs it. Under ACEMQ_REQUIRE_SERVICES=1 (CI) they run
// regardless, and fail.
func TestMain(m *testing.M) {
	os.Exit(testenv.RunWithDatabaseExamples(m, "enginepg"))
}

// A production worker of one's own: Open connects, applies the
// migrations the database lacks and gives the stores every worker of the
// database shares; Engine puts them into the engine's Config. Any process
// on the database then sees the run. (On the embedded broker here; an
// amqp:// URL is RabbitMQ.)
func ExampleOpen() {
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	tables := newTables() // omit for the default table names
	stores, err := enginepg.Open(ctx, testenv.ExampleDatabaseURL(), enginepg.Config{
		Tables:           tables,
		Migrations:       enginepg.ApplyMigrations,
		JournalRetention: 30 * 24 * time.Hour,
	})
	if err != nil {
		fmt.Println(err)
		return
	}
	defer stores.Close()
	defer dropTables(stores.Pool(), tables)

	conn, err := broker.Open(ctx, "memory://")
	if err != nil {
		fmt.Println(err)
		return
	}
	defer conn.Close(ctx)
	eng, err := engine.New(stores.Engine(engine.Config{Conn: conn}))
	if err != nil {
		fmt.Println(err)
		return
	}
	defer eng.Close(ctx)
	greeted := make(chan struct{})
	greet := dsl.Flow("greet", dsl.Step("greet", func(_ context.Context, name string) (string, error) {
		fmt.Println("hello,", name)
		close(greeted)
		return name, nil
	}))
	if err := eng.Register(greet); err != nil {
		fmt.Println(err)
		return
	}
	w, err := eng.StartWorker(ctx)
	if err != nil {
		fmt.Println(err)
		return
	}
	defer w.Close(ctx)

	started, err := eng.Start(ctx, "greet", "Ada")
	if err != nil {
		fmt.Println(err)
		return
	}
	<-greeted
	// Closing the worker lets its step finish and writes what the journal
	// writer holds (SIGTERM does this in acemq-flow worker).
	if err := w.Close(ctx); err != nil {
		fmt.Println(err)
		return
	}
	run, err := stores.Journal().Run(ctx, started.RunID)
	if err != nil {
		fmt.Println(err)
		return
	}
	fmt.Println("the database has the run:", run.Flow, run.Status)
	// Output:
	// hello, Ada
	// the database has the run: greet completed
}

// On a pool of the caller's, the stores leave it open. CheckMigrations,
// the default, refuses a database that lacks migrations, naming them;
// ApplyMigrations applies them.
func ExampleFromPool() {
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	pool, err := pgxpool.New(ctx, testenv.ExampleDatabaseURL())
	if err != nil {
		fmt.Println(err)
		return
	}
	defer pool.Close()
	tables := newTables()
	defer dropTables(pool, tables)

	_, err = enginepg.FromPool(ctx, pool, enginepg.Config{Tables: tables})
	fmt.Println("not migrated:", errors.Is(err, enginepg.ErrNotMigrated))

	stores, err := enginepg.FromPool(ctx, pool, enginepg.Config{Tables: tables, Migrations: enginepg.ApplyMigrations})
	if err != nil {
		fmt.Println(err)
		return
	}
	missing, err := stores.Missing(ctx)
	fmt.Println("missing:", len(missing), err)
	stores.Close()
	fmt.Println("the pool answers:", pool.Ping(ctx) == nil)
	// Output:
	// not migrated: true
	// missing: 0 <nil>
	// the pool answers: true
}
