package testenv

import (
	"context"
	"flag"
	"fmt"
	"os"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
)

// ExampleDatabaseURL is the database examples use: the integration
// tests' (ACEMQ_TEST_DATABASE_URL, else DefaultDatabaseURL).
func ExampleDatabaseURL() string {
	if u := os.Getenv("ACEMQ_TEST_DATABASE_URL"); u != "" {
		return u
	}
	return DefaultDatabaseURL
}

// RunWithDatabaseExamples is a TestMain for a package whose examples need
// PostgreSQL: it runs m, leaving the examples out, and saying so on
// stderr, when ExampleDatabaseURL does not answer (an example cannot skip
// itself). Under ACEMQ_REQUIRE_SERVICES=1 they run regardless, and fail.
// pkg names the package in what it says. It returns the exit code.
func RunWithDatabaseExamples(m *testing.M, pkg string) int {
	flag.Parse()
	if err := databaseAnswers(ExampleDatabaseURL()); err != nil && !Required() {
		skip := "^Example"
		if s := flag.Lookup("test.skip").Value.String(); s != "" {
			skip = s + "|" + skip
		}
		if serr := flag.Set("test.skip", skip); serr != nil {
			fmt.Fprintln(os.Stderr, pkg+": cannot leave the examples out:", serr)
			return 2
		}
		fmt.Fprintf(os.Stderr, "%s: examples not run: set ACEMQ_TEST_DATABASE_URL to a reachable PostgreSQL (%v)\n", pkg, err)
	}
	return m.Run()
}

// databaseAnswers says why the database at url cannot be used, or nil
// when it can.
func databaseAnswers(url string) error {
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	c, err := pgx.Connect(ctx, url)
	if err != nil {
		return err
	}
	defer c.Close(ctx)
	return c.Ping(ctx)
}
