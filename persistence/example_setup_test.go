package persistence_test

import (
	"context"
	"crypto/rand"
	"encoding/hex"
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
// example here needs it. Under ACEMQ_REQUIRE_SERVICES=1 (CI) they run
// regardless, and fail.
func TestMain(m *testing.M) {
	os.Exit(testenv.RunWithDatabaseExamples(m, "persistence"))
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
