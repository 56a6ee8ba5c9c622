package persistence

import (
	"context"
	"embed"
	"errors"
	"fmt"
	"io/fs"
	"path"
	"slices"
	"strconv"
	"strings"

	"github.com/jackc/pgx/v5"
)

//go:embed migrations/*.sql
var migrationFiles embed.FS

// ErrMigration: a migration could not be read or applied.
var ErrMigration = errors.New("migration failed")

// Migration is one embedded, versioned schema change.
type Migration struct {
	// Version orders migrations; it is the file name's numeric prefix.
	Version int
	// Name is the file name without its version and extension.
	Name string
	sql  string
}

// Migrations lists the embedded migrations in version order.
func Migrations() ([]Migration, error) {
	entries, err := fs.ReadDir(migrationFiles, "migrations")
	if err != nil {
		return nil, fmt.Errorf("%w: %w", ErrMigration, err)
	}
	var out []Migration
	for _, e := range entries {
		base := strings.TrimSuffix(e.Name(), ".sql")
		num, name, ok := strings.Cut(base, "_")
		v, err := strconv.Atoi(num)
		if !ok || err != nil || v < 1 {
			return nil, fmt.Errorf("%w: migration file %q is not named NNNN_name.sql", ErrMigration, e.Name())
		}
		body, err := migrationFiles.ReadFile(path.Join("migrations", e.Name()))
		if err != nil {
			return nil, fmt.Errorf("%w: %w", ErrMigration, err)
		}
		out = append(out, Migration{Version: v, Name: name, sql: string(body)})
	}
	slices.SortFunc(out, func(a, b Migration) int { return a.Version - b.Version })
	return out, nil
}

// Migrate applies the embedded migrations db has not applied yet, with
// the default table names. See MigrateTables.
func Migrate(ctx context.Context, db DB) error {
	return MigrateTables(ctx, db, Tables{})
}

// MigrateTables applies the embedded migrations db has not applied yet,
// creating the tables under the names in t (defaults for empty fields), and
// records each version in t.Migrations. It is idempotent and safe to run
// from several processes at once: everything happens in one transaction
// holding a PostgreSQL advisory lock keyed by the migrations table, so a
// second migrator waits and then finds nothing to do. It refuses invalid
// table names before touching the database.
//
// In production the tables may equally be created by whatever migration
// tool owns the schema: the SQL is in this package's migrations folder.
func MigrateTables(ctx context.Context, db DB, t Tables) error {
	t, err := t.checked()
	if err != nil {
		return err
	}
	all, err := Migrations()
	if err != nil {
		return err
	}
	err = inTx(ctx, db, func(tx pgx.Tx) error {
		if _, err := tx.Exec(ctx, `SELECT pg_advisory_xact_lock(hashtextextended($1, 0))`, "acemq-flow migrate "+t.Migrations); err != nil {
			return fmt.Errorf("take the migration lock: %w", err)
		}
		if _, err := tx.Exec(ctx, t.render(`CREATE TABLE IF NOT EXISTS {{migrations}} (
			version    integer     PRIMARY KEY,
			name       text        NOT NULL,
			applied_at timestamptz NOT NULL DEFAULT now())`)); err != nil {
			return fmt.Errorf("create the migrations table: %w", err)
		}
		applied, err := appliedVersions(ctx, tx, t)
		if err != nil {
			return err
		}
		for _, m := range all {
			if applied[m.Version] {
				continue
			}
			if _, err := tx.Exec(ctx, t.render(m.sql)); err != nil {
				return fmt.Errorf("apply %04d_%s: %w", m.Version, m.Name, err)
			}
			if _, err := tx.Exec(ctx, t.render(`INSERT INTO {{migrations}} (version, name) VALUES ($1, $2)`), m.Version, m.Name); err != nil {
				return fmt.Errorf("record %04d_%s: %w", m.Version, m.Name, err)
			}
		}
		return nil
	})
	if err != nil {
		return fmt.Errorf("%w: %w", ErrMigration, err)
	}
	return nil
}

// AppliedVersions lists the migration versions recorded in t.Migrations.
func AppliedVersions(ctx context.Context, db DB, t Tables) ([]int, error) {
	t, err := t.checked()
	if err != nil {
		return nil, err
	}
	applied, err := appliedVersions(ctx, db, t)
	if err != nil {
		return nil, err
	}
	out := make([]int, 0, len(applied))
	for v := range applied {
		out = append(out, v)
	}
	slices.Sort(out)
	return out, nil
}

func appliedVersions(ctx context.Context, db DB, t Tables) (map[int]bool, error) {
	rows, err := db.Query(ctx, t.render(`SELECT version FROM {{migrations}}`))
	if err != nil {
		return nil, fmt.Errorf("read applied migrations: %w", err)
	}
	versions, err := pgx.CollectRows(rows, pgx.RowTo[int32])
	if err != nil {
		return nil, fmt.Errorf("read applied migrations: %w", err)
	}
	applied := make(map[int]bool, len(versions))
	for _, v := range versions {
		applied[int(v)] = true
	}
	return applied, nil
}
