package patterns

import (
	"context"
	"fmt"
	"slices"
	"sync"
	"time"
)

// InMemorySchemaRegistry keeps schemas in this process's memory. It is for
// tests and for seeing the shape of the thing: nothing is shared between
// processes, which is the entire point of a registry, and a restart hands
// out fresh ids, which silently makes every message written before it
// unreadable. persistence.SQLSchemaRegistry is the one whose ids survive.
// It is safe for concurrent use; the zero value is not usable, use
// NewInMemorySchemaRegistry.
type InMemorySchemaRegistry struct {
	mu        sync.Mutex
	nextID    int64
	byID      map[int64]Schema
	bySubject map[string][]int64 // ids in version order
}

// NewInMemorySchemaRegistry returns an empty registry.
func NewInMemorySchemaRegistry() *InMemorySchemaRegistry {
	return &InMemorySchemaRegistry{byID: map[int64]Schema{}, bySubject: map[string][]int64{}}
}

// Register adds definition as the subject's next version, or returns the
// schema already registered with exactly these bytes. It refuses what
// CheckSchema refuses.
func (r *InMemorySchemaRegistry) Register(_ context.Context, subject, format string, definition []byte) (Schema, error) {
	if err := CheckSchema(subject, format, definition); err != nil {
		return Schema{}, err
	}
	fp := SchemaFingerprint(definition)
	r.mu.Lock()
	defer r.mu.Unlock()
	for _, id := range r.bySubject[subject] {
		if s := r.byID[id]; s.Fingerprint == fp {
			return schemaCopy(s), nil
		}
	}
	r.nextID++
	s := Schema{
		ID:           r.nextID,
		Subject:      subject,
		Format:       format,
		Definition:   slices.Clone(definition),
		Fingerprint:  fp,
		Version:      len(r.bySubject[subject]) + 1,
		RegisteredAt: time.Now(),
	}
	r.byID[s.ID] = s
	r.bySubject[subject] = append(r.bySubject[subject], s.ID)
	return schemaCopy(s), nil
}

// Latest is the subject's highest version.
func (r *InMemorySchemaRegistry) Latest(_ context.Context, subject string) (Schema, error) {
	r.mu.Lock()
	defer r.mu.Unlock()
	ids := r.bySubject[subject]
	if len(ids) == 0 {
		return Schema{}, fmt.Errorf("%w: subject %q", ErrSchemaNotFound, subject)
	}
	return schemaCopy(r.byID[ids[len(ids)-1]]), nil
}

// ByID is the schema registered under id.
func (r *InMemorySchemaRegistry) ByID(_ context.Context, id int64) (Schema, error) {
	r.mu.Lock()
	defer r.mu.Unlock()
	s, ok := r.byID[id]
	if !ok {
		return Schema{}, fmt.Errorf("%w: id %d", ErrSchemaNotFound, id)
	}
	return schemaCopy(s), nil
}

// Versions is every schema of the subject, oldest first.
func (r *InMemorySchemaRegistry) Versions(_ context.Context, subject string) ([]Schema, error) {
	r.mu.Lock()
	defer r.mu.Unlock()
	ids := r.bySubject[subject]
	if len(ids) == 0 {
		return nil, fmt.Errorf("%w: subject %q", ErrSchemaNotFound, subject)
	}
	out := make([]Schema, len(ids))
	for i, id := range ids {
		out[i] = schemaCopy(r.byID[id])
	}
	return out, nil
}

// schemaCopy hands a schema out without sharing its definition's bytes.
func schemaCopy(s Schema) Schema {
	s.Definition = slices.Clone(s.Definition)
	return s
}
