package patterns

import (
	"context"
	"fmt"
	"slices"
	"sync"
	"time"

	"github.com/acemq/acemq-flow/broker"
)

// DefaultIdempotencyWindow is how long an InMemoryIdempotencyStore made
// with a zero window remembers a key: six hours.
const DefaultIdempotencyWindow = 6 * time.Hour

// InMemoryIdempotencyStore remembers keys in this process's memory. It is
// right behind one worker and wrong the moment there are two: each has its
// own memory, so both are told they are first; and a restart forgets every
// key. Use a shared store (persistence.SQLIdempotencyStore) behind more
// than one worker.
//
// Its window is how long a key is remembered and also a claim's lease: an
// unconfirmed claim older than the window is taken over, a confirmed key
// is a duplicate for a window after its confirmation. Expired keys are swept
// as the store is used, so it never grows beyond the keys of one window. It
// implements Claimer, Confirmer and ResultStore (a result is held only
// until Confirm, so only the results of hops in flight take memory), and
// is safe for concurrent use.
type InMemoryIdempotencyStore struct {
	window time.Duration
	now    func() time.Time

	mu   sync.Mutex
	keys map[string]idemEntry
	// expiries lists keys in the order they expire (every entry lives
	// exactly one window, so that is the order they were written); an
	// item whose key was rewritten since is stale and skipped.
	expiries []idemExpiry
}

type idemEntry struct {
	confirmed bool
	expires   time.Time
	// result is what Complete kept, until Confirm.
	result []byte
}

type idemExpiry struct {
	key     string
	expires time.Time
}

// NewInMemoryIdempotencyStore returns a store remembering keys for window
// (DefaultIdempotencyWindow when zero). A negative window is refused.
func NewInMemoryIdempotencyStore(window time.Duration) (*InMemoryIdempotencyStore, error) {
	if window < 0 {
		return nil, fmt.Errorf("%w: idempotency window %s, want a positive duration (or 0 for the default)", broker.ErrInvalidOption, window)
	}
	if window == 0 {
		window = DefaultIdempotencyWindow
	}
	return &InMemoryIdempotencyStore{window: window, now: time.Now, keys: map[string]idemEntry{}}, nil
}

// Claim takes key when it is unknown or expired (ClaimClaimed), and
// otherwise says whether its work was confirmed (ClaimDuplicate) or is
// still held (ClaimInProgress). It never fails.
func (s *InMemoryIdempotencyStore) Claim(_ context.Context, key string) (Claim, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	now := s.now()
	s.sweepLocked(now)
	if e, ok := s.keys[key]; ok && now.Before(e.expires) {
		if e.confirmed {
			return ClaimDuplicate, nil
		}
		return ClaimInProgress, nil
	}
	s.putLocked(key, idemEntry{expires: now.Add(s.window)})
	return ClaimClaimed, nil
}

// FirstTime is Claim(key) == ClaimClaimed.
func (s *InMemoryIdempotencyStore) FirstTime(ctx context.Context, key string) (bool, error) {
	c, err := s.Claim(ctx, key)
	return c == ClaimClaimed, err
}

// Confirm records that key's work was done: it is a duplicate for a window
// from now.
func (s *InMemoryIdempotencyStore) Confirm(_ context.Context, key string) error {
	s.mu.Lock()
	defer s.mu.Unlock()
	now := s.now()
	s.sweepLocked(now)
	s.putLocked(key, idemEntry{confirmed: true, expires: now.Add(s.window)})
	return nil
}

// Complete records that key's work was done, as Confirm does, and keeps a
// copy of result with it until Confirm (the caller may reuse its buffer);
// a nil result is kept as an empty one. It never fails.
func (s *InMemoryIdempotencyStore) Complete(_ context.Context, key string, result []byte) error {
	kept := slices.Clone(result)
	if kept == nil {
		// nil is "nothing kept" to Result.
		kept = []byte{}
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	now := s.now()
	s.sweepLocked(now)
	s.putLocked(key, idemEntry{confirmed: true, expires: now.Add(s.window), result: kept})
	return nil
}

// Result is a copy of what Complete kept under key, if the key is live and
// not confirmed since. It never fails.
func (s *InMemoryIdempotencyStore) Result(_ context.Context, key string) ([]byte, bool, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	e, ok := s.keys[key]
	if !ok || e.result == nil || !s.now().Before(e.expires) {
		return nil, false, nil
	}
	return slices.Clone(e.result), true, nil
}

// Forget gives up a live, unconfirmed claim on key. A confirmation is never
// forgotten: that would undo work that was done.
func (s *InMemoryIdempotencyStore) Forget(_ context.Context, key string) error {
	s.mu.Lock()
	defer s.mu.Unlock()
	if e, ok := s.keys[key]; ok && !e.confirmed {
		delete(s.keys, key)
	}
	return nil
}

// Len is how many keys the store holds, expired ones not yet swept
// included.
func (s *InMemoryIdempotencyStore) Len() int {
	s.mu.Lock()
	defer s.mu.Unlock()
	return len(s.keys)
}

func (s *InMemoryIdempotencyStore) putLocked(key string, e idemEntry) {
	s.keys[key] = e
	s.expiries = append(s.expiries, idemExpiry{key: key, expires: e.expires})
}

// sweepLocked drops what has expired by now, oldest first, stopping at the
// first key still live: each call costs only what it removes.
func (s *InMemoryIdempotencyStore) sweepLocked(now time.Time) {
	i := 0
	for ; i < len(s.expiries) && !now.Before(s.expiries[i].expires); i++ {
		x := s.expiries[i]
		if e, ok := s.keys[x.key]; ok && e.expires.Equal(x.expires) {
			delete(s.keys, x.key)
		}
	}
	if i == 0 {
		return
	}
	clear(s.expiries[:i])
	s.expiries = s.expiries[i:]
	// Re-slicing alone would keep the dropped prefix's array alive for
	// ever; copy once the live part is the smaller half.
	if cap(s.expiries) > 64 && len(s.expiries) < cap(s.expiries)/2 {
		s.expiries = append([]idemExpiry(nil), s.expiries...)
	}
}
