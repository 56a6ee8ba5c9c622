package patterns

import (
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"regexp"
	"sync"

	"github.com/acemq/acemq-flow/broker"
)

// ErrInvalidClaimCheckKey is what a store's *broker.FatalError wraps for a
// key that is not of the form the store issues: a key read from a message
// is input, and "../../etc/passwd" is a key too.
var ErrInvalidClaimCheckKey = errors.New("claim check: not a key this store issued")

// claimCheckKeyForm is the form of the keys the built-in stores issue
// (broker.NewID: a UUIDv4 in lower-case canonical text).
var claimCheckKeyForm = regexp.MustCompile(`^[0-9a-f]{8}-[0-9a-f]{4}-4[0-9a-f]{3}-[89ab][0-9a-f]{3}-[0-9a-f]{12}$`)

// claimCheckValidKey refuses, as fatal, a key the built-in stores could not
// have issued.
func claimCheckValidKey(key string) error {
	if !claimCheckKeyForm.MatchString(key) {
		return broker.Fatal(fmt.Errorf("%w: %q", ErrInvalidClaimCheckKey, key))
	}
	return nil
}

// InMemoryClaimCheckStore keeps payloads in this process's memory. It takes
// them off the broker and does nothing else: a consumer in another process
// cannot read them, and a restart loses every payload a queue still refers
// to. For tests and single-process use. Safe for concurrent use.
type InMemoryClaimCheckStore struct {
	mu    sync.RWMutex
	items map[string][]byte
}

// NewInMemoryClaimCheckStore returns an empty store.
func NewInMemoryClaimCheckStore() *InMemoryClaimCheckStore {
	return &InMemoryClaimCheckStore{items: map[string][]byte{}}
}

// Put keeps a copy of content under a new random key.
func (s *InMemoryClaimCheckStore) Put(_ context.Context, content []byte) (string, error) {
	key := broker.NewID()
	s.mu.Lock()
	s.items[key] = append([]byte(nil), content...)
	s.mu.Unlock()
	return key, nil
}

// Get returns a copy of the payload under key, or false when it is not
// held. A key of another form is a *broker.FatalError.
func (s *InMemoryClaimCheckStore) Get(_ context.Context, key string) ([]byte, bool, error) {
	if err := claimCheckValidKey(key); err != nil {
		return nil, false, err
	}
	s.mu.RLock()
	b, ok := s.items[key]
	s.mu.RUnlock()
	if !ok {
		return nil, false, nil
	}
	return append([]byte(nil), b...), true, nil
}

// Delete forgets key; a key not held is not an error. A key of another
// form is a *broker.FatalError.
func (s *InMemoryClaimCheckStore) Delete(_ context.Context, key string) error {
	if err := claimCheckValidKey(key); err != nil {
		return err
	}
	s.mu.Lock()
	delete(s.items, key)
	s.mu.Unlock()
	return nil
}

// Len is how many payloads the store holds.
func (s *InMemoryClaimCheckStore) Len() int {
	s.mu.RLock()
	defer s.mu.RUnlock()
	return len(s.items)
}

// FilesystemClaimCheckStore keeps each payload as a file in one directory.
// It is worth having where that directory is shared and durable (an NFS
// mount, a persistent volume); on a container's local disk it is the
// in-memory store with extra steps. Safe for concurrent use, also by
// several processes sharing the directory.
type FilesystemClaimCheckStore struct {
	dir string
}

// NewFilesystemClaimCheckStore uses dir, creating it if needed. It refuses
// an empty path.
func NewFilesystemClaimCheckStore(dir string) (*FilesystemClaimCheckStore, error) {
	if dir == "" {
		return nil, fmt.Errorf("%w: claim-check store directory is empty", broker.ErrInvalidOption)
	}
	if err := os.MkdirAll(dir, 0o750); err != nil {
		return nil, fmt.Errorf("claim-check store: %w", err)
	}
	return &FilesystemClaimCheckStore{dir: dir}, nil
}

// Dir is the directory the store keeps its files in.
func (s *FilesystemClaimCheckStore) Dir() string { return s.dir }

// Put writes content to a temporary file and renames it into place under a
// new random key, so that a reader fast enough to see the key before the
// writer finished finds the whole payload or none.
func (s *FilesystemClaimCheckStore) Put(ctx context.Context, content []byte) (string, error) {
	if err := ctx.Err(); err != nil {
		return "", err
	}
	tmp, err := os.CreateTemp(s.dir, ".claim-*.tmp")
	if err != nil {
		return "", fmt.Errorf("claim-check store: %w", err)
	}
	_, werr := tmp.Write(content)
	if werr == nil {
		werr = tmp.Sync()
	}
	if cerr := tmp.Close(); werr == nil {
		werr = cerr
	}
	key := broker.NewID()
	if werr == nil {
		werr = os.Rename(tmp.Name(), filepath.Join(s.dir, key))
	}
	if werr != nil {
		_ = os.Remove(tmp.Name())
		return "", fmt.Errorf("claim-check store: write %s: %w", key, werr)
	}
	return key, nil
}

// Get reads the payload under key, or returns false when there is no such
// file. A key that is not of the form Put issues is a *broker.FatalError
// wrapping ErrInvalidClaimCheckKey, checked before it comes near a path.
func (s *FilesystemClaimCheckStore) Get(ctx context.Context, key string) ([]byte, bool, error) {
	if err := claimCheckValidKey(key); err != nil {
		return nil, false, err
	}
	if err := ctx.Err(); err != nil {
		return nil, false, err
	}
	b, err := os.ReadFile(filepath.Join(s.dir, key))
	switch {
	case errors.Is(err, os.ErrNotExist):
		return nil, false, nil
	case err != nil:
		return nil, false, fmt.Errorf("claim-check store: read %s: %w", key, err)
	}
	return b, true, nil
}

// Delete removes the payload under key; a missing one is not an error. A
// key of another form is refused as Get refuses it.
func (s *FilesystemClaimCheckStore) Delete(_ context.Context, key string) error {
	if err := claimCheckValidKey(key); err != nil {
		return err
	}
	if err := os.Remove(filepath.Join(s.dir, key)); err != nil && !errors.Is(err, os.ErrNotExist) {
		return fmt.Errorf("claim-check store: delete %s: %w", key, err)
	}
	return nil
}
