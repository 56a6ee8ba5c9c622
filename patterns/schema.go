package patterns

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"strings"
	"time"
	"unicode/utf8"
)

// Schema registry errors, for errors.Is.
var (
	// ErrSchemaNotFound: a lookup found nothing. A registry never answers
	// a lookup with an empty definition instead.
	ErrSchemaNotFound = errors.New("schema not found")
	// ErrInvalidSchema: Register was given an empty subject, format or
	// definition, or a subject or format that is not text.
	ErrInvalidSchema = errors.New("invalid schema")
)

// Schema is one registered version of a subject's definition.
type Schema struct {
	// ID identifies the schema across subjects, for ever.
	ID int64
	// Subject is what the schema describes, e.g. "order.placed".
	Subject string
	// Format names the schema language, e.g. "avro" or "json-schema".
	Format string
	// Definition is the schema exactly as registered.
	Definition []byte
	// Fingerprint is SchemaFingerprint(Definition).
	Fingerprint string
	// Version is 1 for a subject's first schema and grows by one per new
	// definition of it.
	Version int
	// RegisteredAt is when the definition was first registered.
	RegisteredAt time.Time
}

// SchemaRegistry lets a message carry a small identifier instead of its
// whole shape. Register returns the existing schema, same id, when the
// subject already has that exact definition (whatever format it is given
// now): a service that registers on every start must not add a version per
// restart. Lookups that find nothing return an error matching
// ErrSchemaNotFound.
//
// Nothing here puts a schema id on the wire: which header carries it is a
// cross-language contract AceMQ has not agreed yet.
type SchemaRegistry interface {
	Register(ctx context.Context, subject, format string, definition []byte) (Schema, error)
	Latest(ctx context.Context, subject string) (Schema, error)
	ByID(ctx context.Context, id int64) (Schema, error)
	Versions(ctx context.Context, subject string) ([]Schema, error)
}

// SchemaFingerprint is the lower-case hex SHA-256 of the exact bytes of a
// definition. Two definitions that differ only in whitespace are
// different: normalising would need a parser per format, and a registry
// that quietly merged two definitions because it misparsed them would be
// worse than a strict one.
func SchemaFingerprint(definition []byte) string {
	sum := sha256.Sum256(definition)
	return hex.EncodeToString(sum[:])
}

// CheckSchema refuses what no registry should store: an empty subject,
// format or definition, and a subject or format that is not text (not
// valid UTF-8, or holding a NUL byte), which a database's text column
// cannot hold and which no registry should then accept in memory either.
// Registries call it first in Register.
func CheckSchema(subject, format string, definition []byte) error {
	switch {
	case subject == "":
		return fmt.Errorf("%w: empty subject", ErrInvalidSchema)
	case !SchemaText(subject):
		return fmt.Errorf("%w: subject %q is not text", ErrInvalidSchema, subject)
	case format == "":
		return fmt.Errorf("%w: subject %q: empty format", ErrInvalidSchema, subject)
	case !SchemaText(format):
		return fmt.Errorf("%w: subject %q: format %q is not text", ErrInvalidSchema, subject, format)
	case len(definition) == 0:
		return fmt.Errorf("%w: subject %q: empty definition", ErrInvalidSchema, subject)
	}
	return nil
}

// SchemaText reports whether s can be a subject or a format: valid UTF-8
// without a NUL byte. A registry answers a lookup of a subject that is not
// with ErrSchemaNotFound, since none was ever registered.
func SchemaText(s string) bool {
	return utf8.ValidString(s) && !strings.ContainsRune(s, 0)
}
