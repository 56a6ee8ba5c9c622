package persistence_test

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"flag"
	"fmt"
	"os"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/acemq/acemq-flow/internal/testenv"
	"github.com/acemq/acemq-flow/persistence"
)

// TestMain leaves the examples out when PostgreSQL does not answer: every
// example here needs it and, unlike a test, an example cannot skip itself.
// Under ACEMQ_REQUIRE_SERVICES=1 (CI) they run regardless, and fail.
func TestMain(m *testing.M) {
	flag.Parse()
	if err := exampleDatabaseAnswers(); err != nil && !testenv.Required() {
		skip := "^Example"
		if s := flag.Lookup("test.skip").Value.String(); s != "" {
			skip = s + "|" + skip
		}
		if serr := flag.Set("test.skip", skip); serr != nil {
			fmt.Fprintln(os.Stderr, "persistence: cannot leave the examples out:", serr)
			os.Exit(2)
		}
		fmt.Fprintf(os.Stderr, "persistence: examples not run: set ACEMQ_TEST_DATABASE_URL to a reachable PostgreSQL (%v)\n", err)
	}
	os.Exit(m.Run())
}

// exampleDatabaseURL is the database the examples use: the integration
// tests' (ACEMQ_TEST_DATABASE_URL, else testenv.DefaultDatabaseURL).
func exampleDatabaseURL() string {
	if u := os.Getenv("ACEMQ_TEST_DATABASE_URL"); u != "" {
		return u
	}
	return testenv.DefaultDatabaseURL
}

// exampleDatabaseAnswers says why the examples' database cannot be used,
// or nil when it can.
func exampleDatabaseAnswers() error {
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	c, err := pgx.Connect(ctx, exampleDatabaseURL())
	if err != nil {
		return err
	}
	defer c.Close(ctx)
	return c.Ping(ctx)
}

// exampleTables are table names of one example run's own, so that runs on
// a shared database never meet (a relay would publish another run's
// records); a program of one's own leaves Tables empty for the defaults.
func exampleTables() persistence.Tables {
	var b [5]byte
	_, _ = rand.Read(b[:])
	p := "acemq_ex" + hex.EncodeToString(b[:]) + "_"
	return persistence.PrefixedTables(p)
}

// dropExampleTables drops what exampleTables named.
func dropExampleTables(db *pgxpool.Pool, t persistence.Tables) {
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	for _, name := range t.Names() {
		if _, err := db.Exec(ctx, "DROP TABLE IF EXISTS "+pgx.Identifier{name}.Sanitize()); err != nil {
			fmt.Println("drop", name, err)
			return
		}
	}
}
