package patterns

import (
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"sync"

	"github.com/acemq/acemq-flow/broker"
)

// ErrInvalidClaimCheckKey is what a store's *broker.FatalError wraps for a
// key that is not of the contract's form: a key read from a message is
// input, and "../../etc/passwd" is a key too.
var ErrInvalidClaimCheckKey = errors.New("claim check: invalid key")

// claimCheckMaxKeyLen is the longest key, in bytes, the contract allows.
const claimCheckMaxKeyLen = 200

// claimCheckValidKey refuses, as fatal, a key outside the contract
// (docs/wire.md, "Claim check"): 1-200 bytes from [A-Za-z0-9._-], not
// starting with a dot. Every store of every language takes any such key,
// whatever form its own keys have, so that they can share a directory; and
// such a key is always one plain file name in it, never a path out of it
// (no separator, and no ".", ".." or hidden name).
func claimCheckValidKey(key string) error {
	if len(key) == 0 || len(key) > claimCheckMaxKeyLen || key[0] == '.' {
		return claimCheckInvalidKey(key)
	}
	for i := range len(key) {
		c := key[i]
		if !('a' <= c && c <= 'z' || 'A' <= c && c <= 'Z' || '0' <= c && c <= '9' || c == '.' || c == '_' || c == '-') {
			return claimCheckInvalidKey(key)
		}
	}
	return nil
}

func claimCheckInvalidKey(key string) error {
	return broker.Fatal(fmt.Errorf("%w: %q: want 1-%d bytes from [A-Za-z0-9._-], not starting with a dot",
		ErrInvalidClaimCheckKey, key, claimCheckMaxKeyLen))
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
// held. A key outside the contract's form is a *broker.FatalError wrapping
// ErrInvalidClaimCheckKey.
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

// Delete forgets key; a key not held is not an error. A key outside the
// contract's form is refused as Get refuses it.
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

// Get reads the payload under key (the file <dir>/<key>, whichever store,
// of whichever language, wrote it), or returns false when there is no such
// file. A key outside the contract's form is a *broker.FatalError wrapping
// ErrInvalidClaimCheckKey, checked before it comes near a path.
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
// key outside the contract's form is refused as Get refuses it.
func (s *FilesystemClaimCheckStore) Delete(_ context.Context, key string) error {
	if err := claimCheckValidKey(key); err != nil {
		return err
	}
	if err := os.Remove(filepath.Join(s.dir, key)); err != nil && !errors.Is(err, os.ErrNotExist) {
		return fmt.Errorf("claim-check store: delete %s: %w", key, err)
	}
	return nil
}
