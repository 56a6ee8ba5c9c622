package storetest

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"fmt"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/acemq/acemq-flow/patterns"
)

// SchemaRegistries are the registries of one test, over one new, empty
// registry.
type SchemaRegistries struct {
	// Registry is the first.
	Registry patterns.SchemaRegistry
	// Another returns one more registry over Registry's schemas (what
	// another process has); nil when an instance is the only one over its
	// schemas (patterns.InMemorySchemaRegistry), and concurrent
	// registrations then all go to Registry.
	Another func() patterns.SchemaRegistry
}

// SchemasOpen opens the registries of one test, on schemas of the test's
// own; what they hold is dropped when t ends.
type SchemasOpen func(t *testing.T) SchemaRegistries

// Schemas runs the schema registry suite against the registries open
// returns. The rules are those of patterns.SchemaRegistry and of the
// seeds: the same definition registered again is the same schema, same
// id, from any process and whatever format it is given; the fingerprint
// is the SHA-256 of the exact bytes, so whitespace makes a new version;
// versions count from 1 per subject, without gaps; ids are never handed
// out twice; definitions are kept byte for byte; a lookup that finds
// nothing is an error matching patterns.ErrSchemaNotFound; an empty
// subject, format or definition is refused (patterns.ErrInvalidSchema).
func Schemas(t *testing.T, open SchemasOpen) {
	run(t, open, map[string]func(*testing.T, SchemasOpen){
		"the same definition is the same schema":                         schemaSameDefinition,
		"whitespace makes a new version":                                 schemaWhitespace,
		"another subject's definition is its own":                        schemaOtherSubject,
		"an older definition again is the old one":                       schemaOlderAgain,
		"the fingerprint is SHA-256 of the bytes":                        schemaFingerprint,
		"definitions are kept byte for byte":                             schemaBytes,
		"a lookup that finds nothing says so":                            schemaNotFound,
		"a subject, format or body that is empty or not text is refused": schemaInvalid,
		"concurrent registrations get their own ids":                     schemaConcurrent,
		"one definition registered at once is one id":                    schemaConcurrentSame,
	})
}

// schemas is one test's registries.
type schemas struct {
	t   *testing.T
	ctx context.Context
	SchemaRegistries
}

func openSchemas(t *testing.T, open SchemasOpen) *schemas {
	t.Helper()
	r := open(t)
	require.NotNil(t, r.Registry, "open returned no registry")
	return &schemas{t: t, ctx: ctxOf(t), SchemaRegistries: r}
}

// registries are Registry and, when there are others, n-1 of them.
func (s *schemas) registries(n int) []patterns.SchemaRegistry {
	rs := []patterns.SchemaRegistry{s.Registry}
	for s.Another != nil && len(rs) < n {
		rs = append(rs, s.Another())
	}
	return rs
}

// other is another registry over the same schemas, or Registry.
func (s *schemas) other() patterns.SchemaRegistry {
	if s.Another == nil {
		return s.Registry
	}
	return s.Another()
}

func (s *schemas) register(r patterns.SchemaRegistry, subject, format, definition string) patterns.Schema {
	s.t.Helper()
	sc, err := r.Register(s.ctx, subject, format, []byte(definition))
	require.NoError(s.t, err)
	return sc
}

// sameSchema fails unless a and b are one schema, field for field.
func sameSchema(t *testing.T, a, b patterns.Schema) {
	t.Helper()
	require.True(t, a.RegisteredAt.Equal(b.RegisteredAt), "registered at %s and %s", a.RegisteredAt, b.RegisteredAt)
	a.RegisteredAt, b.RegisteredAt = time.Time{}, time.Time{}
	require.Equal(t, a, b)
}

func (s *schemas) latest(r patterns.SchemaRegistry, subject string) patterns.Schema {
	s.t.Helper()
	sc, err := r.Latest(s.ctx, subject)
	require.NoError(s.t, err)
	return sc
}

func (s *schemas) versions(r patterns.SchemaRegistry, subject string) []patterns.Schema {
	s.t.Helper()
	vs, err := r.Versions(s.ctx, subject)
	require.NoError(s.t, err)
	return vs
}

func (s *schemas) byID(r patterns.SchemaRegistry, id int64) patterns.Schema {
	s.t.Helper()
	sc, err := r.ByID(s.ctx, id)
	require.NoError(s.t, err)
	return sc
}

func schemaSameDefinition(t *testing.T, open SchemasOpen) {
	s := openSchemas(t, open)
	def := `{"type":"record","name":"OrderPlaced"}`
	v1 := s.register(s.Registry, "order.placed", "avro", def)
	require.Positive(t, v1.ID)
	require.Equal(t, "order.placed", v1.Subject)
	require.Equal(t, "avro", v1.Format)
	require.Equal(t, []byte(def), v1.Definition)
	require.Equal(t, 1, v1.Version)
	require.WithinDuration(t, time.Now(), v1.RegisteredAt, time.Minute)

	sameSchema(t, v1, s.register(s.Registry, "order.placed", "avro", def))
	sameSchema(t, v1, s.register(s.other(), "order.placed", "avro", def))
	sameSchema(t, v1, s.register(s.Registry, "order.placed", "json-schema", def))
	require.Len(t, s.versions(s.Registry, "order.placed"), 1, "registering on every start adds no version")
	sameSchema(t, v1, s.latest(s.other(), "order.placed"))
	sameSchema(t, v1, s.byID(s.other(), v1.ID))
}

func schemaWhitespace(t *testing.T, open SchemasOpen) {
	s := openSchemas(t, open)
	v1 := s.register(s.Registry, "order.placed", "avro", `{"a":1}`)
	v2 := s.register(s.Registry, "order.placed", "avro", `{"a": 1}`)
	require.NotEqual(t, v1.ID, v2.ID, "whitespace makes a different definition")
	require.NotEqual(t, v1.Fingerprint, v2.Fingerprint)
	require.Equal(t, 2, v2.Version)
	sameSchema(t, v2, s.latest(s.other(), "order.placed"))
	vs := s.versions(s.other(), "order.placed")
	require.Len(t, vs, 2)
	sameSchema(t, v1, vs[0])
	sameSchema(t, v2, vs[1])
	sameSchema(t, v1, s.byID(s.other(), v1.ID))
}

func schemaOtherSubject(t *testing.T, open SchemasOpen) {
	s := openSchemas(t, open)
	def := `{"a":1}`
	placed := s.register(s.Registry, "order.placed", "avro", def)
	s.register(s.Registry, "order.placed", "avro", `{"a":2}`)
	shipped := s.register(s.Registry, "order.shipped", "avro", def)
	require.NotEqual(t, placed.ID, shipped.ID, "a schema is a subject's definition")
	require.Equal(t, placed.Fingerprint, shipped.Fingerprint)
	require.Equal(t, 1, shipped.Version, "versions count per subject")
	sameSchema(t, shipped, s.latest(s.Registry, "order.shipped"))
	require.Len(t, s.versions(s.Registry, "order.shipped"), 1)
}

func schemaOlderAgain(t *testing.T, open SchemasOpen) {
	s := openSchemas(t, open)
	v1 := s.register(s.Registry, "order.placed", "avro", `{"v":1}`)
	v2 := s.register(s.Registry, "order.placed", "avro", `{"v":2}`)
	sameSchema(t, v1, s.register(s.other(), "order.placed", "avro", `{"v":1}`))
	// An old service starting again does not make its schema the latest.
	sameSchema(t, v2, s.latest(s.Registry, "order.placed"))
	require.Len(t, s.versions(s.Registry, "order.placed"), 2)
}

func schemaFingerprint(t *testing.T, open SchemasOpen) {
	s := openSchemas(t, open)
	def := "syntax = \"proto3\";\nmessage Order {}\n"
	sum := sha256.Sum256([]byte(def))
	sc := s.register(s.Registry, "order", "protobuf", def)
	require.Equal(t, hex.EncodeToString(sum[:]), sc.Fingerprint, "lower-case hex SHA-256 of the exact bytes")
	require.Equal(t, patterns.SchemaFingerprint([]byte(def)), sc.Fingerprint)
	require.Equal(t, sc.Fingerprint, s.byID(s.other(), sc.ID).Fingerprint)
}

func schemaBytes(t *testing.T, open SchemasOpen) {
	s := openSchemas(t, open)
	want := []byte{0xff, 0x00, '{', '}', 0xc3, 0x28, '\n'}
	given := append([]byte(nil), want...)
	sc, err := s.Registry.Register(s.ctx, "blob", "binary", given)
	require.NoError(t, err)
	given[0] = 'X'
	require.Equal(t, want, sc.Definition)
	sc.Definition[1] = 'Y'
	got := s.byID(s.Registry, sc.ID)
	require.Equal(t, want, got.Definition, "what was given, whatever the caller or a reader changed since")
	got.Definition[2] = 'Z'
	require.Equal(t, want, s.latest(s.other(), "blob").Definition)
	again, err := s.Registry.Register(s.ctx, "blob", "binary", want)
	require.NoError(t, err)
	require.Equal(t, sc.ID, again.ID)
}

func schemaNotFound(t *testing.T, open SchemasOpen) {
	s := openSchemas(t, open)
	known := s.register(s.Registry, "known", "avro", "x")
	for _, tc := range []struct {
		name string
		call func() error
	}{
		{"latest of an unknown subject", func() error { _, err := s.Registry.Latest(s.ctx, "unknown"); return err }},
		{"versions of an unknown subject", func() error { _, err := s.Registry.Versions(s.ctx, "unknown"); return err }},
		{"an unknown id", func() error { _, err := s.Registry.ByID(s.ctx, known.ID+1<<40); return err }},
		{"id 0", func() error { _, err := s.Registry.ByID(s.ctx, 0); return err }},
		{"a negative id", func() error { _, err := s.Registry.ByID(s.ctx, -known.ID); return err }},
		{"a subject differing in case", func() error { _, err := s.Registry.Latest(s.ctx, "Known"); return err }},
		{"latest of a subject that is not text", func() error { _, err := s.Registry.Latest(s.ctx, "\xff"); return err }},
		{"versions of a subject with a NUL", func() error { _, err := s.Registry.Versions(s.ctx, "a\x00b"); return err }},
	} {
		require.ErrorIs(t, tc.call(), patterns.ErrSchemaNotFound, tc.name)
	}
}

func schemaInvalid(t *testing.T, open SchemasOpen) {
	s := openSchemas(t, open)
	for _, tc := range []struct {
		name                string
		subject, format, df string
	}{
		{"empty subject", "", "avro", "x"},
		{"empty format", "s", "", "x"},
		{"empty definition", "s", "avro", ""},
		{"a subject that is not UTF-8", "\xff", "avro", "x"},
		{"a subject with a NUL", "a\x00b", "avro", "x"},
		{"a format that is not UTF-8", "s", "\xff", "x"},
		{"a format with a NUL", "s", "a\x00b", "x"},
	} {
		_, err := s.Registry.Register(s.ctx, tc.subject, tc.format, []byte(tc.df))
		require.ErrorIs(t, err, patterns.ErrInvalidSchema, tc.name)
	}
	_, err := s.Registry.Versions(s.ctx, "s")
	require.ErrorIs(t, err, patterns.ErrSchemaNotFound, "nothing refused was registered")
}

func schemaConcurrent(t *testing.T, open SchemasOpen) {
	s := openSchemas(t, open)
	rs := s.registries(3)
	const n, subjects = 40, 4
	got := make([]patterns.Schema, n)
	errs := make([]error, n)
	var wg sync.WaitGroup
	for i := range n {
		wg.Go(func() {
			got[i], errs[i] = rs[i%len(rs)].Register(s.ctx, fmt.Sprintf("subject-%d", i%subjects), "json-schema", fmt.Appendf(nil, `{"v":%d}`, i))
		})
	}
	wg.Wait()
	seen := map[int64]bool{}
	for i, sc := range got {
		require.NoError(t, errs[i])
		require.False(t, seen[sc.ID], "id %d handed out twice", sc.ID)
		seen[sc.ID] = true
	}
	for k := range subjects {
		vs := s.versions(s.Registry, fmt.Sprintf("subject-%d", k))
		require.Len(t, vs, n/subjects)
		for i, v := range vs {
			require.Equal(t, i+1, v.Version, "versions are gapless per subject")
		}
	}
}

func schemaConcurrentSame(t *testing.T, open SchemasOpen) {
	s := openSchemas(t, open)
	rs := s.registries(2)
	def := []byte(`{"type":"record","name":"OrderPlaced"}`)
	got := make([]patterns.Schema, 20)
	errs := make([]error, len(got))
	var wg sync.WaitGroup
	for i := range got {
		wg.Go(func() { got[i], errs[i] = rs[i%len(rs)].Register(s.ctx, "order.placed", "avro", def) })
	}
	wg.Wait()
	for i, sc := range got {
		require.NoError(t, errs[i])
		require.Equal(t, got[0].ID, sc.ID, "the same bytes from any process are the same id")
	}
	require.Len(t, s.versions(s.Registry, "order.placed"), 1)
}
