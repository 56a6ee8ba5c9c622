package patterns

import (
	"context"
	"fmt"
	"slices"
	"strconv"
	"sync"
	"time"

	"github.com/acemq/acemq-flow/broker"
)

// Defaults of the outbox stores.
const (
	// DefaultOutboxLease is how long a claim on a record lasts before
	// another relay may take it over.
	DefaultOutboxLease = 30 * time.Second
	// DefaultOutboxMaxAttempts is how many refused publishes a record gets
	// before it is no longer claimed.
	DefaultOutboxMaxAttempts = 10
)

// InMemoryOutboxStore keeps records in this process's memory. It does not
// close the gap the outbox pattern exists to close: Add does not join
// anybody's database transaction, so a business write that rolls back
// after Add leaves its message queued, and a crash loses every record not
// yet relayed. It is for tests and for seeing the shape of the thing;
// persistence.SQLOutboxStore is the one that joins the caller's
// transaction.
//
// It claims, counts and gives up records the way the SQL store does (see
// OutboxStore, OutboxLookahead, OutboxFailureMarker, OutboxReleaser,
// OutboxLeaseExtender), is one claimant, and is safe for concurrent use.
type InMemoryOutboxStore struct {
	now         func() time.Time
	lease       time.Duration
	maxAttempts int

	mu      sync.Mutex
	nextID  int64
	records []*outboxMemRecord // in id order
}

type outboxMemRecord struct {
	rec        OutboxRecord
	leaseUntil time.Time
}

// InMemoryOutboxStoreConfig configures an InMemoryOutboxStore. The zero
// value is the defaults.
type InMemoryOutboxStoreConfig struct {
	// Lease is how long a claim on records lasts (0 = DefaultOutboxLease).
	Lease time.Duration
	// MaxAttempts is how many refused publishes a record gets before it is
	// no longer claimed (0 = DefaultOutboxMaxAttempts).
	MaxAttempts int
}

// Validate refuses a negative lease or max attempts.
func (c InMemoryOutboxStoreConfig) Validate() error {
	if c.Lease < 0 || c.MaxAttempts < 0 {
		return fmt.Errorf("%w: outbox store: negative lease or max attempts", broker.ErrInvalidOption)
	}
	return nil
}

// NewInMemoryOutboxStore returns an empty store configured by cfg. It
// refuses what cfg.Validate refuses.
func NewInMemoryOutboxStore(cfg InMemoryOutboxStoreConfig) (*InMemoryOutboxStore, error) {
	if err := cfg.Validate(); err != nil {
		return nil, err
	}
	s := &InMemoryOutboxStore{now: time.Now, lease: cfg.Lease, maxAttempts: cfg.MaxAttempts}
	if s.lease == 0 {
		s.lease = DefaultOutboxLease
	}
	if s.maxAttempts == 0 {
		s.maxAttempts = DefaultOutboxMaxAttempts
	}
	return s, nil
}

// Add stores a copy of rec and returns its id. A record with neither an
// exchange nor a routing key is refused: it could never be routed.
func (s *InMemoryOutboxStore) Add(_ context.Context, rec OutboxRecord) (string, error) {
	if rec.Exchange == "" && rec.RoutingKey == "" {
		return "", fmt.Errorf("%w: outbox record with no exchange and no routing key", ErrInvalidOutboxRecord)
	}
	rec.Message.Headers = rec.Message.Headers.Clone()
	rec.Message.Body = slices.Clone(rec.Message.Body)
	s.mu.Lock()
	defer s.mu.Unlock()
	s.nextID++
	rec.ID = strconv.FormatInt(s.nextID, 10)
	rec.Attempts = 0
	rec.CreatedAt = s.now()
	s.records = append(s.records, &outboxMemRecord{rec: rec})
	return rec.ID, nil
}

// Pending claims up to limit records (all claimable ones when limit <= 0)
// under a lease. Only the oldest records are claimable:
// those before the first record somebody holds under a live lease, skipping
// records whose attempts are spent. So one claimant at a time relays, in
// order, and a claimant that died is taken over when its lease expires.
func (s *InMemoryOutboxStore) Pending(ctx context.Context, limit int) ([]OutboxRecord, error) {
	return s.PendingAfter(ctx, nil, limit)
}

// PendingAfter claims like Pending, except that the records in held neither
// stop the claim nor are claimed again (see OutboxLookahead).
func (s *InMemoryOutboxStore) PendingAfter(_ context.Context, held []string, limit int) ([]OutboxRecord, error) {
	skip := make(map[string]bool, len(held))
	for _, id := range held {
		skip[id] = true
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	now := s.now()
	var out []OutboxRecord
	for _, r := range s.records {
		if r.rec.Attempts >= s.maxAttempts || skip[r.rec.ID] {
			continue
		}
		if now.Before(r.leaseUntil) || (limit > 0 && len(out) == limit) {
			break
		}
		r.leaseUntil = now.Add(s.lease)
		out = append(out, outboxMemCopy(r.rec))
	}
	return out, nil
}

// Lease is how long a claim lasts.
func (s *InMemoryOutboxStore) Lease() time.Duration { return s.lease }

// Extend renews the leases on the records with the given ids for another
// Lease, also one that ran out (nobody took the record over since);
// records not under a lease (released, marked failed) are left alone.
func (s *InMemoryOutboxStore) Extend(_ context.Context, ids ...string) error {
	held := make(map[string]bool, len(ids))
	for _, id := range ids {
		held[id] = true
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	now := s.now()
	for _, r := range s.records {
		if held[r.rec.ID] && !r.leaseUntil.IsZero() {
			r.leaseUntil = now.Add(s.lease)
		}
	}
	return nil
}

// MarkPublished removes the records with the given ids; unknown ids are
// ignored (another relay may have removed them first).
func (s *InMemoryOutboxStore) MarkPublished(_ context.Context, ids ...string) error {
	s.mu.Lock()
	defer s.mu.Unlock()
	gone := make(map[string]bool, len(ids))
	for _, id := range ids {
		gone[id] = true
	}
	s.records = slices.DeleteFunc(s.records, func(r *outboxMemRecord) bool { return gone[r.rec.ID] })
	return nil
}

// MarkFailed counts one refused attempt of the record, remembers why, and
// releases its lease. It does nothing to a record not under a lease (never
// claimed, or released or marked failed since): that claim was settled.
func (s *InMemoryOutboxStore) MarkFailed(_ context.Context, id string, cause error) error {
	s.mu.Lock()
	defer s.mu.Unlock()
	for _, r := range s.records {
		if r.rec.ID == id && !r.leaseUntil.IsZero() {
			r.rec.Attempts++
			r.leaseUntil = time.Time{}
			if cause != nil {
				r.rec.LastError = cause.Error()
			}
		}
	}
	return nil
}

// Release gives up the leases on the given records without counting an
// attempt.
func (s *InMemoryOutboxStore) Release(_ context.Context, ids ...string) error {
	s.mu.Lock()
	defer s.mu.Unlock()
	for _, r := range s.records {
		if slices.Contains(ids, r.rec.ID) {
			r.leaseUntil = time.Time{}
		}
	}
	return nil
}

// Records returns a copy of every record not yet published, in order,
// including those whose attempts are spent: what somebody inspecting the
// outbox would look at.
func (s *InMemoryOutboxStore) Records() []OutboxRecord {
	s.mu.Lock()
	defer s.mu.Unlock()
	out := make([]OutboxRecord, len(s.records))
	for i, r := range s.records {
		out[i] = outboxMemCopy(r.rec)
	}
	return out
}

// outboxMemCopy hands a record out without sharing its headers or body
// with the store.
func outboxMemCopy(r OutboxRecord) OutboxRecord {
	r.Message.Headers = r.Message.Headers.Clone()
	r.Message.Body = slices.Clone(r.Message.Body)
	return r
}
