package enginepg

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"net"
	"net/url"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/jackc/pgx/v5/pgconn"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/acemq/acemq-flow/engine"
	"github.com/acemq/acemq-flow/persistence"
)

// DefaultConnectTimeout is how long Open waits for its first connection by
// default, so that an address nothing answers on is an error, not a hang.
const DefaultConnectTimeout = 10 * time.Second

var (
	// ErrInvalidConfig: a Config, URL or pool that Open or FromPool cannot
	// use. Nothing was opened.
	ErrInvalidConfig = errors.New("invalid enginepg config")
	// ErrNotMigrated: the database has not applied every migration this
	// build embeds (CheckMigrations); the error names the missing ones.
	ErrNotMigrated = errors.New("database not migrated")
)

// MigrationMode says what Open and FromPool do about the schema.
type MigrationMode int

// The migration modes.
const (
	// CheckMigrations (the zero value) refuses, with ErrNotMigrated, a
	// database that lacks a migration this build embeds.
	CheckMigrations MigrationMode = iota
	// ApplyMigrations applies the migrations the database lacks.
	ApplyMigrations
	// SkipMigrations looks at nothing: the schema is another tool's.
	SkipMigrations
)

// String is the mode's constant name.
func (m MigrationMode) String() string {
	switch m {
	case CheckMigrations:
		return "CheckMigrations"
	case ApplyMigrations:
		return "ApplyMigrations"
	case SkipMigrations:
		return "SkipMigrations"
	}
	return fmt.Sprintf("MigrationMode(%d)", int(m))
}

// Config says how to open the stores. The zero value is the defaults: the
// default table names, migrations checked, runs kept for ever, and the
// idempotency store's default lease and retention.
type Config struct {
	// Tables names the tables (zero = the defaults;
	// persistence.PrefixedTables for services sharing a database).
	Tables persistence.Tables
	// Migrations says what opening does about the schema (zero =
	// CheckMigrations).
	Migrations MigrationMode
	// JournalRetention is how long the journal keeps a run after it ended:
	// a worker's housekeeping deletes older ones, in small batches (0 =
	// keep every run).
	JournalRetention time.Duration
	// ClaimTimeout is the lease of a step's claim: after a worker died in
	// a step, another runs it once this has passed. Keep it above the
	// longest step (0 = persistence.DefaultClaimTimeout, 5 minutes).
	ClaimTimeout time.Duration
	// IdempotencyRetention is how long a step that ran is remembered, so
	// that a copy of its message arriving later is not run again (0 =
	// persistence.DefaultIdempotencyRetention, 24 hours).
	IdempotencyRetention time.Duration
	// ConnectTimeout bounds Open's first connection (0 =
	// DefaultConnectTimeout). FromPool connects nothing.
	ConnectTimeout time.Duration
	// MaxConns is the size of the pool Open makes (0 = DefaultMaxConns);
	// a pool_max_conns in the URL takes precedence. A worker's steps that
	// run in transactions hold a connection each while they run.
	MaxConns int32
}

// DefaultMaxConns is the size of the pool Open makes unless told: room for
// the statements a worker writes in groups (claims, results with the
// journal's events, lookups), a handler of each of several transactional
// steps, and the housekeeping; pgxpool's own default, the number of CPUs
// but at least 4, leaves a worker on a small machine waiting for
// connections.
const DefaultMaxConns = 20

// Validate refuses invalid table names, an unknown migration mode and a
// negative duration or pool size, naming the field, with an error matching
// ErrInvalidConfig.
func (c Config) Validate() error {
	if c.MaxConns < 0 {
		return fmt.Errorf("%w: MaxConns %d: want 0 (the default) or more", ErrInvalidConfig, c.MaxConns)
	}
	if err := c.Tables.Validate(); err != nil {
		return fmt.Errorf("%w: %w", ErrInvalidConfig, err)
	}
	if c.Migrations < CheckMigrations || c.Migrations > SkipMigrations {
		return fmt.Errorf("%w: Migrations %s: want CheckMigrations, ApplyMigrations or SkipMigrations", ErrInvalidConfig, c.Migrations)
	}
	for _, d := range []struct {
		field string
		d     time.Duration
	}{
		{"JournalRetention", c.JournalRetention}, {"ClaimTimeout", c.ClaimTimeout},
		{"IdempotencyRetention", c.IdempotencyRetention}, {"ConnectTimeout", c.ConnectTimeout},
	} {
		if d.d < 0 {
			return fmt.Errorf("%w: %s %s: want 0 (the default) or more", ErrInvalidConfig, d.field, d.d)
		}
	}
	return nil
}

// Stores are the engine's stores on one PostgreSQL database, shared by
// every worker of it. Safe for concurrent use; Close it when done.
type Stores struct {
	pool    *pgxpool.Pool
	owned   bool
	name    string
	redact  redactor
	tables  persistence.Tables
	journal *persistence.SQLJournal
	store   *persistence.SQLIdempotencyStore
	guard   *persistence.SQLCronGuard
	applied []persistence.Migration
}

// Open connects to the PostgreSQL database at databaseURL (a postgres://
// URL or a keyword/value string, as pgx reads it, TLS settings included)
// within cfg.ConnectTimeout, then builds the stores on a pool of its own,
// which Close closes. It refuses an invalid cfg or an empty URL
// (ErrInvalidConfig), a URL that does not parse (pgx's
// *pgconn.ParseConfigError), a database that does not answer (an error
// naming it: user, host, port and database), and what cfg.Migrations
// refuses; nothing stays open then.
func Open(ctx context.Context, databaseURL string, cfg Config) (*Stores, error) {
	if err := cfg.Validate(); err != nil {
		return nil, err
	}
	if databaseURL == "" {
		return nil, fmt.Errorf("%w: empty database URL", ErrInvalidConfig)
	}
	r := redactor{secrets: connSecrets(databaseURL)}
	pc, err := pgxpool.ParseConfig(databaseURL)
	if err != nil {
		return nil, r.errorf("%w", err)
	}
	if pw := pc.ConnConfig.Password; pw != "" {
		r.secrets = append(r.secrets, pw)
	}
	if !strings.Contains(databaseURL, "pool_max_conns") {
		pc.MaxConns = cmp.Or(cfg.MaxConns, DefaultMaxConns)
	}
	name := displayName(&pc.ConnConfig.Config)
	cctx, cancel := context.WithTimeout(ctx, cmp.Or(cfg.ConnectTimeout, DefaultConnectTimeout))
	defer cancel()
	pool, err := pgxpool.NewWithConfig(cctx, pc)
	if err != nil {
		return nil, r.errorf("connect to %s: %w", name, err)
	}
	if err := pool.Ping(cctx); err != nil {
		pool.Close()
		return nil, r.errorf("connect to %s: %w", name, err)
	}
	s, err := newStores(ctx, pool, name, r, cfg)
	if err != nil {
		pool.Close()
		return nil, err
	}
	s.owned = true
	return s, nil
}

// FromPool builds the stores on pool, which stays the caller's: Close
// leaves it open. It refuses an invalid cfg or a nil pool
// (ErrInvalidConfig) and what cfg.Migrations refuses. cfg.ConnectTimeout
// is not used.
func FromPool(ctx context.Context, pool *pgxpool.Pool, cfg Config) (*Stores, error) {
	if err := cfg.Validate(); err != nil {
		return nil, err
	}
	if pool == nil {
		return nil, fmt.Errorf("%w: nil pool", ErrInvalidConfig)
	}
	cc := pool.Config().ConnConfig
	var r redactor
	if cc.Password != "" {
		r.secrets = []string{cc.Password}
	}
	return newStores(ctx, pool, displayName(&cc.Config), r, cfg)
}

// newStores builds the stores on pool and does what cfg.Migrations says.
func newStores(ctx context.Context, pool *pgxpool.Pool, name string, r redactor, cfg Config) (*Stores, error) {
	s := &Stores{pool: pool, name: name, redact: r, tables: cfg.Tables}
	var err error
	if s.journal, err = persistence.NewSQLJournal(pool, persistence.SQLJournalConfig{Tables: cfg.Tables, Retention: cfg.JournalRetention}); err != nil {
		return nil, fmt.Errorf("run journal: %w", err)
	}
	if s.store, err = persistence.NewSQLIdempotencyStore(pool, persistence.SQLIdempotencyStoreConfig{
		Tables: cfg.Tables, ClaimTimeout: cfg.ClaimTimeout, Retention: cfg.IdempotencyRetention,
	}); err != nil {
		return nil, fmt.Errorf("idempotency store: %w", err)
	}
	if s.guard, err = persistence.NewSQLCronGuard(pool, cfg.Tables); err != nil {
		return nil, fmt.Errorf("cron guard: %w", err)
	}
	switch cfg.Migrations {
	case ApplyMigrations:
		if s.applied, err = s.migrate(ctx); err != nil {
			return nil, err
		}
	case CheckMigrations:
		missing, err := s.Missing(ctx)
		if err != nil {
			return nil, err
		}
		if len(missing) > 0 {
			return nil, fmt.Errorf("%w: %s lacks %s (open it with ApplyMigrations, or apply them with the tool that owns the schema)",
				ErrNotMigrated, name, migrationList(missing))
		}
	}
	return s, nil
}

// migrate applies what the database lacks and says what that was.
func (s *Stores) migrate(ctx context.Context) ([]persistence.Migration, error) {
	lacking, err := s.Missing(ctx)
	if err != nil || len(lacking) == 0 {
		return nil, err
	}
	if err := persistence.MigrateTables(ctx, s.pool, s.tables); err != nil {
		return nil, s.redact.errorf("migrate %s: %w", s.name, err)
	}
	return lacking, nil
}

// undefinedTable is PostgreSQL's SQLSTATE for a table that does not exist.
const undefinedTable = "42P01"

// appliedVersions lists the migrations the database applied; none when
// it was never migrated (no migrations table yet).
func (s *Stores) appliedVersions(ctx context.Context) ([]int, error) {
	v, err := persistence.AppliedVersions(ctx, s.pool, s.tables)
	var pe *pgconn.PgError
	if errors.As(err, &pe) && pe.Code == undefinedTable {
		return nil, nil
	}
	if err != nil {
		return nil, s.redact.errorf("%w", err)
	}
	return v, nil
}

// Missing lists the embedded migrations the database has not applied, in
// version order: all of them for a database never migrated, none for one
// up to date.
func (s *Stores) Missing(ctx context.Context) ([]persistence.Migration, error) {
	applied, err := s.appliedVersions(ctx)
	if err != nil {
		return nil, err
	}
	all, err := persistence.Migrations()
	if err != nil {
		return nil, err
	}
	var missing []persistence.Migration
	for _, m := range all {
		if !slices.Contains(applied, m.Version) {
			missing = append(missing, m)
		}
	}
	return missing, nil
}

// Applied lists the migrations the database lacked when it was opened
// with ApplyMigrations, and has now, in version order; none when it was up
// to date or the mode was another. (Another process migrating at the same
// moment may have applied some of them: the advisory lock makes one wait
// for the other, and the second finds nothing left to do.)
func (s *Stores) Applied() []persistence.Migration { return slices.Clone(s.applied) }

// Engine returns cfg with the stores in it: the run journal as Journal,
// the idempotency store as Store and the cron guard as CronGuard, each
// only where cfg leaves it nil. Every worker given these shares runs,
// step claims and cron ticks with every other worker of the database.
func (s *Stores) Engine(cfg engine.Config) engine.Config {
	if cfg.Journal == nil {
		cfg.Journal = s.journal
	}
	if cfg.Store == nil {
		cfg.Store = s.store
	}
	if cfg.CronGuard == nil {
		cfg.CronGuard = s.guard
	}
	return cfg
}

// Journal is the run journal.
func (s *Stores) Journal() *persistence.SQLJournal { return s.journal }

// Idempotency is the idempotency store, which also runs Transactional
// steps in a transaction of the database.
func (s *Stores) Idempotency() *persistence.SQLIdempotencyStore { return s.store }

// CronGuard is the guard that lets one worker start each cron tick's run.
func (s *Stores) CronGuard() *persistence.SQLCronGuard { return s.guard }

// Pool is the pool the stores run on: for the caller's own statements
// (an outbox, a readiness check).
func (s *Stores) Pool() *pgxpool.Pool { return s.pool }

// Name is the database for messages and logs: user, host, port and
// database, never the password.
func (s *Stores) Name() string { return s.name }

// Ping checks that the database answers: a readiness check. Its error
// names the database.
func (s *Stores) Ping(ctx context.Context) error {
	if err := s.pool.Ping(ctx); err != nil {
		return s.redact.errorf("%s does not answer: %w", s.name, err)
	}
	return nil
}

// Close closes the pool if Open created it; a pool given to FromPool is
// left open. Nil-safe and idempotent. Close the engine first.
func (s *Stores) Close() {
	if s != nil && s.owned {
		s.pool.Close()
	}
}

// displayName is a database for messages: postgres://user@host:port/db.
func displayName(cc *pgconn.Config) string {
	return (&url.URL{Scheme: "postgres", User: url.User(cc.User), Host: net.JoinHostPort(cc.Host, strconv.Itoa(int(cc.Port))), Path: "/" + cc.Database}).String()
}

// migrationList is migrations as "0008_run_data, 0009_input_replays".
func migrationList(ms []persistence.Migration) string {
	names := make([]string, len(ms))
	for i, m := range ms {
		names[i] = fmt.Sprintf("%04d_%s", m.Version, m.Name)
	}
	return strings.Join(names, ", ")
}
