package cli

import (
	"context"
	"errors"
	"fmt"
	"log/slog"

	"github.com/jackc/pgx/v5/pgconn"
	"github.com/spf13/cobra"

	"github.com/acemq/acemq-flow/engine/enginepg"
	"github.com/acemq/acemq-flow/engine/journal"
)

// databaseFlag names --database-url and its environment fallback, in the
// errors and notes that are about the database.
const databaseFlag = "--database-url / ACEMQ_DATABASE_URL"

// ErrNoDatabase: the command needs --database-url and none was given.
var ErrNoDatabase = errors.New("no database: set " + databaseFlag + " to a PostgreSQL URL")

// Notes on stderr for commands that run without a database, so that an
// empty answer is not mistaken for "there are no runs".
const (
	noDatabaseReader = "no database (" + databaseFlag + "): runs are journaled only in the memory of the process that ran them, " +
		"so this command sees none of them; set ACEMQ_DATABASE_URL to the workers' database"
	noDatabaseWorker = "no database (" + databaseFlag + "): runs are journaled in this worker's memory only " +
		"(runs list cannot see them) and steps are de-duplicated per worker"
	noDatabaseStart = "no database (" + databaseFlag + "): the start is not journaled where other processes can see it"
	noDatabaseMover = "no database (" + databaseFlag + "): this process's journal knows no runs, so the run's message is " +
		"looked for by x-acemq-run-id in every dead-letter queue of the flows"
)

// undefinedTable is PostgreSQL's SQLSTATE for a table that does not exist.
const undefinedTable = "42P01"

// openStores opens the stores on the database --database-url names, as
// cfg says, or returns nil when none was given. It fails, naming the flag
// (and never the password), when the URL does not parse, nothing answers
// there within enginepg.DefaultConnectTimeout, or cfg.Migrations refuses.
// Close the stores when done (nil-safe).
func (a *app) openStores(cmd *cobra.Command, cfg enginepg.Config) (*enginepg.Stores, error) {
	if a.databaseURL == "" {
		return nil, nil
	}
	s, err := enginepg.Open(cmd.Context(), a.databaseURL, cfg)
	if err != nil {
		return nil, databaseError(err)
	}
	return s, nil
}

// databaseError is an error about the database that names the flag.
func databaseError(err error) error { return fmt.Errorf("%s: %w", databaseFlag, err) }

// warnUnmigrated logs a warning when the database lacks some of the
// migrations this binary embeds: its tables are missing or out of date.
// Only a warning, since another tool may own the schema.
func (a *app) warnUnmigrated(ctx context.Context, s *enginepg.Stores, log *slog.Logger) {
	missing, err := s.Missing(ctx)
	if err != nil {
		log.Warn("could not read which migrations the database applied", slog.String("database", s.Name()), slog.Any("error", databaseError(err)))
		return
	}
	if len(missing) > 0 {
		names := make([]string, len(missing))
		for i, m := range missing {
			names[i] = fmt.Sprintf("%04d_%s", m.Version, m.Name)
		}
		log.Warn("the database has not applied every migration: run `"+a.name+" migrate` (unless another tool owns the schema)",
			slog.String("database", s.Name()), slog.Any("missing", names))
	}
}

// hintMigrate adds to a database error caused by a missing table what
// to do about it: run program's migrate.
func hintMigrate(program string, err error) error {
	var pe *pgconn.PgError
	if errors.As(err, &pe) && pe.Code == undefinedTable {
		return fmt.Errorf("%w (run `%s migrate` to create the tables)", err, program)
	}
	return err
}

// openRunsJournal is the journal on the database, for a command whose
// whole answer is runs other processes recorded (runs list, runs show).
// Without a database it refuses, with ErrNoDatabase naming the command,
// rather than answer "no runs" from a journal that can hold none. Call the
// returned function when done.
func (a *app) openRunsJournal(cmd *cobra.Command) (journal.Journal, func(), error) {
	if a.databaseURL == "" {
		return nil, nil, fmt.Errorf("%s: %w (without one, runs are journaled only in the memory of the process that ran them, "+
			"where this command cannot see them; dev shows its own runs in its dashboard)", commandName(cmd), ErrNoDatabase)
	}
	return a.openJournal(cmd)
}

// openJournal is the journal a command reads runs from: on the database,
// or, without one, an empty in-memory journal, saying on stderr why it is
// empty. Call the returned function when done.
func (a *app) openJournal(cmd *cobra.Command) (journal.Journal, func(), error) {
	s, err := a.openStores(cmd, enginepg.Config{Migrations: enginepg.SkipMigrations})
	if err != nil {
		return nil, nil, err
	}
	if s == nil {
		fmt.Fprintln(cmd.ErrOrStderr(), noDatabaseReader)
		j, err := journal.NewMemory(0)
		if err != nil {
			return nil, nil, err
		}
		return j, func() {}, nil
	}
	return s.Journal(), s.Close, nil
}
