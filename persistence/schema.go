package persistence

import (
	"context"
	"fmt"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/acemq/acemq-flow/broker"
	"github.com/acemq/acemq-flow/patterns"
)

// SQLSchemaRegistryConfig configures a SQLSchemaRegistry. The zero value
// is the defaults.
type SQLSchemaRegistryConfig struct {
	// Tables names the tables (Schemas and SchemaCounter are used here).
	Tables Tables
}

// SQLSchemaRegistry is the schema registry whose ids survive a restart,
// and nothing more: no compatibility checking, no HTTP. Ids come from a
// counter row, whose row lock queues concurrent writers for an instant and
// gives each a number (MAX(id) + 1 would hand two writers the same one);
// the unique index on (subject, fingerprint) makes the same definition the
// same id from any process, for ever. It implements
// patterns.SchemaRegistry.
type SQLSchemaRegistry struct {
	db DB
	t  Tables
}

// NewSQLSchemaRegistry returns a registry running on db. It refuses a nil
// db and invalid table names.
func NewSQLSchemaRegistry(db DB, cfg SQLSchemaRegistryConfig) (*SQLSchemaRegistry, error) {
	if db == nil {
		return nil, fmt.Errorf("%w: schema registry: nil db", broker.ErrInvalidOption)
	}
	t, err := cfg.Tables.checked()
	if err != nil {
		return nil, err
	}
	return &SQLSchemaRegistry{db: db, t: t}, nil
}

const schemaColumns = `id, subject, format, definition, fingerprint, version, registered_at`

// Register adds definition as the subject's next version, or returns the
// schema already registered with exactly these bytes. It refuses what
// patterns.CheckSchema refuses.
func (r *SQLSchemaRegistry) Register(ctx context.Context, subject, format string, definition []byte) (patterns.Schema, error) {
	if err := patterns.CheckSchema(subject, format, definition); err != nil {
		return patterns.Schema{}, err
	}
	fp := patterns.SchemaFingerprint(definition)
	var s patterns.Schema
	err := inTx(ctx, r.db, func(tx pgx.Tx) error {
		var err error
		if s, err = r.find(ctx, tx, subject, fp); err == nil || !isNoRows(err) {
			return err
		}
		var id int64
		if err := tx.QueryRow(ctx, r.t.render(`
			UPDATE {{schema_counter}} SET value = value + 1 WHERE name = 'schema_id' RETURNING value`)).Scan(&id); err != nil {
			return fmt.Errorf("next id: %w", err)
		}
		// Holding the counter's row lock, this statement sees every schema
		// committed before it, so the version cannot be taken twice.
		rows, err := tx.Query(ctx, r.t.render(`
			INSERT INTO {{schemas}} (id, subject, format, definition, fingerprint, version)
			SELECT $1, $2, $3, $4, $5, coalesce(max(version), 0) + 1 FROM {{schemas}} WHERE subject = $2
			ON CONFLICT (subject, fingerprint) DO NOTHING
			RETURNING `+schemaColumns), id, subject, format, definition, fp)
		if err != nil {
			return fmt.Errorf("insert: %w", err)
		}
		inserted, err := pgx.CollectRows(rows, scanSchema)
		if err != nil {
			return fmt.Errorf("insert: %w", err)
		}
		if len(inserted) == 1 {
			s = inserted[0]
			return nil
		}
		// Another process registered the same bytes while this one waited
		// for the counter: theirs is the id.
		s, err = r.find(ctx, tx, subject, fp)
		return err
	})
	if err != nil {
		return patterns.Schema{}, fmt.Errorf("schema registry: register %q: %w", subject, err)
	}
	return s, nil
}

func (r *SQLSchemaRegistry) find(ctx context.Context, db DB, subject, fp string) (patterns.Schema, error) {
	rows, err := db.Query(ctx, r.t.render(`SELECT `+schemaColumns+` FROM {{schemas}} WHERE subject = $1 AND fingerprint = $2`), subject, fp)
	if err != nil {
		return patterns.Schema{}, err
	}
	return pgx.CollectExactlyOneRow(rows, scanSchema)
}

// Latest is the subject's highest version.
func (r *SQLSchemaRegistry) Latest(ctx context.Context, subject string) (patterns.Schema, error) {
	if !patterns.SchemaText(subject) {
		// No such subject can have been registered (and PostgreSQL
		// would refuse the parameter).
		return patterns.Schema{}, fmt.Errorf("%w: subject %q", patterns.ErrSchemaNotFound, subject)
	}
	rows, err := r.db.Query(ctx, r.t.render(`SELECT `+schemaColumns+` FROM {{schemas}} WHERE subject = $1 ORDER BY version DESC LIMIT 1`), subject)
	if err != nil {
		return patterns.Schema{}, fmt.Errorf("schema registry: latest %q: %w", subject, err)
	}
	s, err := pgx.CollectExactlyOneRow(rows, scanSchema)
	if isNoRows(err) {
		return patterns.Schema{}, fmt.Errorf("%w: subject %q", patterns.ErrSchemaNotFound, subject)
	}
	if err != nil {
		return patterns.Schema{}, fmt.Errorf("schema registry: latest %q: %w", subject, err)
	}
	return s, nil
}

// ByID is the schema registered under id.
func (r *SQLSchemaRegistry) ByID(ctx context.Context, id int64) (patterns.Schema, error) {
	rows, err := r.db.Query(ctx, r.t.render(`SELECT `+schemaColumns+` FROM {{schemas}} WHERE id = $1`), id)
	if err != nil {
		return patterns.Schema{}, fmt.Errorf("schema registry: id %d: %w", id, err)
	}
	s, err := pgx.CollectExactlyOneRow(rows, scanSchema)
	if isNoRows(err) {
		return patterns.Schema{}, fmt.Errorf("%w: id %d", patterns.ErrSchemaNotFound, id)
	}
	if err != nil {
		return patterns.Schema{}, fmt.Errorf("schema registry: id %d: %w", id, err)
	}
	return s, nil
}

// Versions is every schema of the subject, oldest first.
func (r *SQLSchemaRegistry) Versions(ctx context.Context, subject string) ([]patterns.Schema, error) {
	if !patterns.SchemaText(subject) {
		return nil, fmt.Errorf("%w: subject %q", patterns.ErrSchemaNotFound, subject)
	}
	rows, err := r.db.Query(ctx, r.t.render(`SELECT `+schemaColumns+` FROM {{schemas}} WHERE subject = $1 ORDER BY version`), subject)
	if err != nil {
		return nil, fmt.Errorf("schema registry: versions of %q: %w", subject, err)
	}
	out, err := pgx.CollectRows(rows, scanSchema)
	if err != nil {
		return nil, fmt.Errorf("schema registry: versions of %q: %w", subject, err)
	}
	if len(out) == 0 {
		return nil, fmt.Errorf("%w: subject %q", patterns.ErrSchemaNotFound, subject)
	}
	return out, nil
}

func scanSchema(row pgx.CollectableRow) (patterns.Schema, error) {
	var (
		s       patterns.Schema
		version int32
		at      time.Time
	)
	err := row.Scan(&s.ID, &s.Subject, &s.Format, &s.Definition, &s.Fingerprint, &version, &at)
	s.Version, s.RegisteredAt = int(version), at
	return s, err
}
