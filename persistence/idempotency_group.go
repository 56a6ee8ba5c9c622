package persistence

import (
	"bytes"
	"cmp"
	"context"
	"fmt"
	"slices"
	"sync"

	"github.com/acemq/acemq-flow/engine/journal"
)

// The store's claims, and the results and confirmations it keeps, are
// written in groups: the calls that arrive while a statement of their kind
// runs go together in the next (group), one round trip and one commit for
// all of them. Alone, a call is written at once; under load a statement
// carries what arrived during one round trip. Keys are written in sorted
// order, so that statements of several workers lock shared rows in one
// order.

// claimReq is one Claim's insert in a group: its key, and once written
// whether it took the key.
type claimReq struct {
	key string
	won bool
	err error
}

// keptReq is one Complete's or Confirm's row in a group.
type keptReq struct {
	k   journal.Kept
	err error
}

// keptStatements are RecordKept's statements per journal it records in
// (a worker has one).
type keptStatements struct {
	mu    sync.Mutex
	stmts map[*SQLJournal]string
}

// claimKey makes key's claim insert in a group, and says whether it took
// the key.
func (s *SQLIdempotencyStore) claimKey(ctx context.Context, key string) (bool, error) {
	r := &claimReq{key: key}
	if err := s.claims.do(ctx, r, s.insertClaims); err != nil {
		return false, fmt.Errorf("idempotency %s: claim: %w", s.t.Idempotency, err)
	}
	return r.won, r.err
}

// insertClaims is one statement claiming every key of reqs. A key asked
// twice in one group is inserted once: the first asker may win it, the
// other is told it did not, and looks the key up as any loser does.
func (s *SQLIdempotencyStore) insertClaims(ctx context.Context, reqs []*claimReq) {
	keys := make([][]byte, 0, len(reqs))
	for _, r := range reqs {
		keys = append(keys, []byte(r.key))
	}
	slices.SortFunc(keys, bytes.Compare)
	keys = slices.CompactFunc(keys, bytes.Equal)
	rows, err := s.db.Query(ctx, s.sql.claims, keys, s.holder, s.lease.Seconds())
	won := map[string]bool{}
	if err == nil {
		var k []byte
		for rows.Next() {
			if err = rows.Scan(&k); err != nil {
				break
			}
			won[string(k)] = true
		}
		rows.Close()
		err = cmp.Or(err, rows.Err())
	}
	for _, r := range reqs {
		if err != nil {
			r.err = fmt.Errorf("idempotency %s: claim: %w", s.t.Idempotency, err)
			continue
		}
		r.won = won[r.key]
		delete(won, r.key)
	}
}

// keep writes k (a result to keep, or a confirmation) in a group.
func (s *SQLIdempotencyStore) keep(ctx context.Context, k journal.Kept) error {
	// Held until written: a claim of the key looked up meanwhile must not
	// take it for one left behind (leftBehind).
	defer s.letGo(k.Key)
	r := &keptReq{k: k}
	if err := s.keeps.do(ctx, r, s.writeKeptReqs); err != nil {
		return err
	}
	return r.err
}

func (s *SQLIdempotencyStore) writeKeptReqs(ctx context.Context, reqs []*keptReq) {
	kept := make([]journal.Kept, len(reqs))
	for i, r := range reqs {
		kept[i] = r.k
	}
	err := s.writeKept(ctx, kept)
	for _, r := range reqs {
		r.err = err
	}
}

// keptArgs are kept's keys and results as the kept statements take them:
// sorted by key, a key kept twice as the later says, a confirmation's
// result NULL and a result never NULL (NULL reads as "nothing kept").
func keptArgs(kept []journal.Kept) (keys, results [][]byte) {
	last := make(map[string]int, len(kept))
	for i, k := range kept {
		last[k.Key] = i
	}
	order := make([]int, 0, len(last))
	for _, i := range last {
		order = append(order, i)
	}
	slices.SortFunc(order, func(a, b int) int { return cmp.Compare(kept[a].Key, kept[b].Key) })
	keys, results = make([][]byte, len(order)), make([][]byte, len(order))
	for j, i := range order {
		keys[j] = []byte(kept[i].Key)
		switch {
		case kept[i].Confirmed:
		case kept[i].Result == nil:
			results[j] = []byte{}
		default:
			results[j] = kept[i].Result
		}
	}
	return keys, results
}

// keptWrite is what RecordKept hands the journal it records in, in the
// context of its Record: the store and the keys to keep with the events.
// A *SQLJournal on the store's database writes them in its statement
// (reached, written), however the journal is wrapped, as long as the
// wrapper passes the context on.
type keptWrite struct {
	store *SQLIdempotencyStore
	kept  []journal.Kept
	// reached says a *SQLJournal on the store's database was called with
	// it; written that the keys are written.
	reached, written bool
}

type keptWriteKey struct{}

func keptWriteOf(ctx context.Context) *keptWrite {
	w, _ := ctx.Value(keptWriteKey{}).(*keptWrite)
	return w
}

// RecordKept records events in j and keeps kept in this store (results as
// Complete keeps them, confirmations as Confirm writes them), as
// journal.Keeper says: in one statement, and so one commit, when j is a
// *SQLJournal on this store's database, or wraps one and passes the
// context of its Record on; otherwise the results first, then the events,
// then the confirmations. It refuses what j refuses of the events
// (wrapping journal.ErrInvalidEvent), keeping nothing then.
func (s *SQLIdempotencyStore) RecordKept(ctx context.Context, j journal.Journal, events []journal.Event, kept []journal.Kept) error {
	defer func() {
		// Held until written, as keep says.
		for _, k := range kept {
			s.letGo(k.Key)
		}
	}()
	w := &keptWrite{store: s, kept: kept}
	kctx := context.WithValue(ctx, keptWriteKey{}, w)
	// Whether j writes the keys in its statement: a Record of nothing
	// says so without a statement.
	if err := j.Record(kctx, nil); err != nil || !w.reached || len(events) == 0 {
		return s.recordKeptApart(ctx, j, events, kept)
	}
	if err := j.Record(kctx, events); err != nil {
		return err
	}
	if !w.written {
		// j reached the store's journal with its probe and not with the
		// events: the keys are written apart, results and confirmations
		// alike, now that the events are recorded.
		return s.writeKept(ctx, kept)
	}
	return nil
}

// recordKeptIn is j's Record of the batch b (of n events) with w's keys, in
// one statement.
func (s *SQLIdempotencyStore) recordKeptIn(ctx context.Context, j *SQLJournal, b journalBatch, n int, w *keptWrite) error {
	keys, results := keptArgs(w.kept)
	args := append(b.args(), keys, results, s.holder, s.retention.Seconds())
	if _, err := s.db.Exec(ctx, s.keptStatement(j), args...); err != nil {
		return fmt.Errorf("journal %s: record %d events keeping %d results and confirmations in %s: %w",
			j.t.Runs, n, len(keys), s.t.Idempotency, err)
	}
	w.written = true
	return nil
}

// recordKeptApart is RecordKept on a journal it cannot write in its
// statement: the results kept first (a confirmation's too), then the
// events, then the confirmations, as journal.Keeper says.
func (s *SQLIdempotencyStore) recordKeptApart(ctx context.Context, j journal.Journal, events []journal.Event, kept []journal.Kept) error {
	var results, confirms []journal.Kept
	for _, k := range kept {
		if k.Result != nil || !k.Confirmed {
			results = append(results, journal.Kept{Key: k.Key, Result: k.Result})
		}
		if k.Confirmed {
			confirms = append(confirms, k)
		}
	}
	if err := s.writeKept(ctx, results); err != nil {
		return err
	}
	if err := j.Record(ctx, events); err != nil {
		return err
	}
	return s.writeKept(ctx, confirms)
}

// writeKept writes kept in one statement; nothing for none.
func (s *SQLIdempotencyStore) writeKept(ctx context.Context, kept []journal.Kept) error {
	if len(kept) == 0 {
		return nil
	}
	keys, results := keptArgs(kept)
	if _, err := s.db.Exec(ctx, s.sql.kept, keys, results, s.holder, s.retention.Seconds()); err != nil {
		return fmt.Errorf("idempotency %s: keep %d results and confirmations: %w", s.t.Idempotency, len(keys), err)
	}
	return nil
}

// keptStatement is RecordKept's statement on j: the kept rows' upsert
// ($39 keys, $40 results, $41 holder, $42 retention in seconds), then j's
// record statement.
func (s *SQLIdempotencyStore) keptStatement(j *SQLJournal) string {
	s.recordKept.mu.Lock()
	defer s.recordKept.mu.Unlock()
	if q, ok := s.recordKept.stmts[j]; ok {
		return q
	}
	q := "WITH kept AS (" + s.t.render(fmt.Sprintf(keptUpsert, "$39", "$40", "$41", "$42")) + "), " + j.t.render(recordCTEs)
	if s.recordKept.stmts == nil {
		s.recordKept.stmts = map[*SQLJournal]string{}
	}
	s.recordKept.stmts[j] = q
	return q
}
