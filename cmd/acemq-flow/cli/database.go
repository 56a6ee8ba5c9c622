package cli

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"net/url"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/jackc/pgx/v5/pgconn"
	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/spf13/cobra"

	"github.com/acemq/acemq-flow/engine"
	"github.com/acemq/acemq-flow/engine/journal"
	"github.com/acemq/acemq-flow/patterns"
	"github.com/acemq/acemq-flow/persistence"
)

// databaseFlag names --database-url and its environment fallback, in the
// errors and notes that are about the database.
const databaseFlag = "--database-url / ACEMQ_DATABASE_URL"

// databaseConnectTimeout bounds the first connection to the database, so
// that an address nothing answers on is an error, not a hang.
const databaseConnectTimeout = 10 * time.Second

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

// database is the PostgreSQL database --database-url selects.
type database struct {
	pool *pgxpool.Pool
	// program is the binary's name, for the command a hint suggests.
	program string
	// name is the database for messages: user, host, port and database,
	// never the password.
	name string
	// secrets are the password and the key's password (sslpassword),
	// taken out of every error's text.
	secrets []string
}

// openDatabase connects to --database-url, or returns nil when none was
// given. It fails, naming the flag, when the URL does not parse or nothing
// answers there within databaseConnectTimeout.
func (a *app) openDatabase(cmd *cobra.Command) (*database, error) {
	if a.databaseURL == "" {
		return nil, nil
	}
	d := &database{name: "the database", program: a.name, secrets: connSecrets(a.databaseURL)}
	cfg, err := pgxpool.ParseConfig(a.databaseURL)
	if err != nil {
		return nil, d.errorf("%w", err)
	}
	cc := cfg.ConnConfig
	if cc.Password != "" {
		d.secrets = append(d.secrets, cc.Password)
	}
	d.name = (&url.URL{Scheme: "postgres", User: url.User(cc.User), Host: net.JoinHostPort(cc.Host, strconv.Itoa(int(cc.Port))), Path: "/" + cc.Database}).String()
	ctx, cancel := context.WithTimeout(cmd.Context(), databaseConnectTimeout)
	defer cancel()
	pool, err := pgxpool.NewWithConfig(ctx, cfg)
	if err != nil {
		return nil, d.errorf("connect to %s: %w", d.name, err)
	}
	if err := pool.Ping(ctx); err != nil {
		pool.Close()
		return nil, d.errorf("connect to %s: %w", d.name, err)
	}
	d.pool = pool
	return d, nil
}

// connSecrets are the password and sslpassword (which decrypts sslkey) of
// a connection string, URL or keyword/value form, as far as they can be
// read without parsing it as pgx does: pgx's own errors already hide the
// password, and these are taken out of whatever else an error says.
func connSecrets(raw string) []string {
	var out []string
	if u, err := url.Parse(raw); err == nil && u.Scheme != "" {
		if p, ok := u.User.Password(); ok && p != "" {
			out = append(out, p)
		}
		if p := u.Query().Get("sslpassword"); p != "" {
			out = append(out, p)
		}
		return out
	}
	for _, kv := range strings.Fields(raw) {
		k, v, _ := strings.Cut(kv, "=")
		if (k == "password" || k == "sslpassword") && strings.Trim(v, "'") != "" {
			out = append(out, strings.Trim(v, "'"))
		}
	}
	return out
}

// errorf is an error about the database that names the flag and never
// shows the password or sslpassword.
func (d *database) errorf(format string, args ...any) error {
	err := fmt.Errorf(databaseFlag+": "+format, args...)
	msg := err.Error()
	for _, s := range d.secrets {
		msg = strings.ReplaceAll(msg, s, "xxxxx")
	}
	if msg == err.Error() {
		return err
	}
	return &redactedError{msg: msg, err: err}
}

// redactedError is an error whose text had a secret taken out; errors.Is
// and errors.As still see what it wraps.
type redactedError struct {
	msg string
	err error
}

func (e *redactedError) Error() string { return e.msg }
func (e *redactedError) Unwrap() error { return e.err }

// close closes the pool; nil-safe, since a command without a database
// has none.
func (d *database) close() {
	if d != nil {
		d.pool.Close()
	}
}

// journal is the run journal on the database; a worker purges runs that
// ended longer than retention ago (0: none).
func (d *database) journal(retention time.Duration) (journal.Journal, error) {
	j, err := persistence.NewSQLJournal(d.pool, persistence.SQLJournalConfig{Retention: retention})
	if err != nil {
		return nil, d.errorf("run journal: %w", err)
	}
	return j, nil
}

// store is the idempotency store on the database, shared by every worker;
// its claims last claimTimeout (0 = persistence.DefaultClaimTimeout).
func (d *database) store(claimTimeout time.Duration) (patterns.ResultStore, error) {
	s, err := persistence.NewSQLIdempotencyStore(d.pool, persistence.SQLIdempotencyStoreConfig{ClaimTimeout: claimTimeout})
	if err != nil {
		return nil, d.errorf("idempotency store: %w", err)
	}
	return s, nil
}

// cronGuard decides, for every worker on the database, which one starts a
// cron tick's run.
func (d *database) cronGuard() (engine.CronGuard, error) {
	g, err := persistence.NewSQLCronGuard(d.pool, persistence.Tables{})
	if err != nil {
		return nil, d.errorf("cron guard: %w", err)
	}
	return g, nil
}

// appliedVersions lists the migrations the database has applied; none
// when it has never been migrated (no migrations table yet).
func (d *database) appliedVersions(ctx context.Context) ([]int, error) {
	v, err := persistence.AppliedVersions(ctx, d.pool, persistence.Tables{})
	var pe *pgconn.PgError
	if errors.As(err, &pe) && pe.Code == undefinedTable {
		return nil, nil
	}
	if err != nil {
		return nil, d.errorf("%w", err)
	}
	return v, nil
}

// warnUnmigrated logs a warning when the database lacks some of the
// migrations this binary embeds: its tables are missing or out of date.
// Only a warning, since another tool may own the schema.
func (d *database) warnUnmigrated(ctx context.Context, log *slog.Logger) {
	applied, err := d.appliedVersions(ctx)
	if err != nil {
		log.Warn("could not read which migrations the database applied", slog.String("database", d.name), slog.Any("error", err))
		return
	}
	all, err := persistence.Migrations()
	if err != nil {
		log.Warn("could not read the embedded migrations", slog.Any("error", err))
		return
	}
	var missing []string
	for _, m := range all {
		if !slices.Contains(applied, m.Version) {
			missing = append(missing, fmt.Sprintf("%04d_%s", m.Version, m.Name))
		}
	}
	if len(missing) > 0 {
		log.Warn("the database has not applied every migration: run `"+d.program+" migrate` (unless another tool owns the schema)",
			slog.String("database", d.name), slog.Any("missing", missing))
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
	db, err := a.openDatabase(cmd)
	if err != nil {
		return nil, nil, err
	}
	if db == nil {
		fmt.Fprintln(cmd.ErrOrStderr(), noDatabaseReader)
		j, err := journal.NewMemory(0)
		if err != nil {
			return nil, nil, err
		}
		return j, func() {}, nil
	}
	j, err := db.journal(0)
	if err != nil {
		db.close()
		return nil, nil, err
	}
	return j, db.close, nil
}
