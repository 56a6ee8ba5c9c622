package persistence

import (
	"context"
	"errors"
	"fmt"
	"sync"

	"github.com/acemq/acemq-flow/engine/journal"
	"github.com/acemq/acemq-flow/patterns"
)

// ErrOtherDatabase is ClaimPlace's refusal of limits it cannot take a
// place of in its claim's statement: not a *SQLJournal, or one on another
// database (ClaimsPlaces says which beforehand).
var ErrOtherDatabase = errors.New("persistence: the limits are not a SQL journal on the idempotency store's database")

// placeClaims are the ClaimPlace and ConfirmReleasing statements of one
// store, per journal whose places it takes and gives back (a worker has
// one).
type placeClaims struct {
	mu    sync.Mutex
	stmts map[*SQLJournal]placeStatements
}

type placeStatements struct{ claim, confirm string }

// ClaimsPlaces reports whether ClaimPlace and ConfirmReleasing take and
// give back places of limits: a *SQLJournal over the database this store
// runs on.
func (s *SQLIdempotencyStore) ClaimsPlaces(limits journal.LimitStore) bool {
	j, ok := limits.(*SQLJournal)
	return ok && j.db == s.db
}

// ClaimPlace takes slot's place under its step's concurrency limit, as
// limits' Acquire does (parking slot's holder with parked when every place
// is taken), and when the place is given claims key, as Claim does, in one
// statement: one round trip and one commit, where Acquire and Claim take
// two each. A holder parked has claimed nothing (granted false, claim 0).
// The claim's answer is Claim's: a key it does not take at once is looked
// up as Claim looks it up. It refuses what journal.CheckSlot refuses, and
// limits that ClaimsPlaces refuses (ErrOtherDatabase).
func (s *SQLIdempotencyStore) ClaimPlace(ctx context.Context, limits journal.LimitStore, slot journal.Slot, parked []byte, key string) (granted bool, c patterns.Claim, err error) {
	if err := journal.CheckSlot(slot); err != nil {
		return false, 0, err
	}
	j, ok := limits.(*SQLJournal)
	if !ok || !s.ClaimsPlaces(j) {
		return false, 0, fmt.Errorf("claim %q with a place of %s/%s: %w", key, slot.Flow, slot.Step, ErrOtherDatabase)
	}
	s.claiming(key)
	var won bool
	err = s.db.QueryRow(ctx, s.placeStatements(j).claim, slot.Flow, slot.Step, slot.Holder, slot.Key, slot.Limit, slot.RunID, parked,
		[]byte(key), s.holder, s.lease.Seconds()).Scan(&granted, &won)
	if err != nil {
		err = fmt.Errorf("idempotency %s: claim %q with a place of %s/%s key %q: %w", s.t.Idempotency, key, slot.Flow, slot.Step, slot.Key, err)
	}
	if !granted {
		s.claimed(key, false)
		return false, 0, err
	}
	c, err = s.claimFrom(ctx, key, won, err)
	return true, c, err
}

// ConfirmReleasing confirms key, as Confirm does, and gives back slot's
// place, as limits' Release does, in one statement; then, when the key of
// the place has waiters, hands its free places to them, and returns their
// messages to send (as Release does). When the statement fails, neither
// happened. It refuses what journal.CheckSlot refuses, and limits that
// ClaimsPlaces refuses (ErrOtherDatabase).
func (s *SQLIdempotencyStore) ConfirmReleasing(ctx context.Context, key string, limits journal.LimitStore, slot journal.Slot) ([][]byte, error) {
	if err := journal.CheckSlot(slot); err != nil {
		return nil, err
	}
	j, ok := limits.(*SQLJournal)
	if !ok || !s.ClaimsPlaces(j) {
		return nil, fmt.Errorf("confirm %q giving back a place of %s/%s: %w", key, slot.Flow, slot.Step, ErrOtherDatabase)
	}
	s.letGo(key)
	var (
		freedKey string
		waiting  int
	)
	err := s.db.QueryRow(ctx, s.placeStatements(j).confirm, slot.Flow, slot.Step, slot.Holder,
		[]byte(key), s.holder, s.retention.Seconds()).Scan(&freedKey, &waiting)
	switch {
	case isNoRows(err):
		return nil, nil
	case err != nil:
		return nil, fmt.Errorf("idempotency %s: confirm %q giving back the place of %s in %s/%s: %w", s.t.Idempotency, key, slot.Holder, slot.Flow, slot.Step, err)
	case waiting == 0:
		return nil, nil
	}
	return j.handOut(ctx, slot.Flow, slot.Step, freedKey)
}

// placeStatements are the statements of ClaimPlace and ConfirmReleasing
// on j. ClaimPlace's: the acquire's common table expressions ($1 to $7),
// then the claim's insert ($8 key, $9 holder, $10 lease in seconds), made
// only when a place was given. ConfirmReleasing's: the release's ($1 to
// $3), then the confirm's upsert ($4 key, $5 holder, $6 retention in
// seconds).
func (s *SQLIdempotencyStore) placeStatements(j *SQLJournal) placeStatements {
	s.places.mu.Lock()
	defer s.places.mu.Unlock()
	if q, ok := s.places.stmts[j]; ok {
		return q
	}
	q := placeStatements{
		claim: j.limitSQL.acquireWith + s.t.render(`, granted AS (
				SELECT EXISTS (SELECT 1 FROM mine) OR COALESCE((SELECT took FROM k), false) AS ok
			), claimed AS (`+fmt.Sprintf(claimInsert, `SELECT $8, 'claimed', $9, now() + $10 * interval '1 second' FROM granted WHERE granted.ok`)+` RETURNING 1
			)
			SELECT (SELECT ok FROM granted), EXISTS (SELECT 1 FROM claimed)`),
		confirm: j.limitSQL.releaseWith + s.t.render(`, confirmed AS (`+fmt.Sprintf(confirmUpsert, "$4", "$5", "$6")+`
			)
			SELECT key, waiting FROM freed`),
	}
	if s.places.stmts == nil {
		s.places.stmts = map[*SQLJournal]placeStatements{}
	}
	s.places.stmts[j] = q
	return q
}
