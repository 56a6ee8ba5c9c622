package persistence

import (
	"context"
	"errors"
	"fmt"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/acemq/acemq-flow/broker"
	"github.com/acemq/acemq-flow/engine/journal"
	"github.com/acemq/acemq-flow/patterns"
)

// Defaults of SQLIdempotencyStoreConfig.
const (
	DefaultClaimTimeout         = 5 * time.Minute
	DefaultIdempotencyRetention = 24 * time.Hour
	DefaultPurgeBatch           = 1000
)

// idemClaimTries bounds Claim's loop: a key that is forgotten or expires
// between the insert and the look is simply tried again.
const idemClaimTries = 5

// SQLIdempotencyStoreConfig configures a SQLIdempotencyStore. The zero
// value is the defaults.
type SQLIdempotencyStoreConfig struct {
	// Tables names the tables (only Idempotency is used here).
	Tables Tables
	// ClaimTimeout is a claim's lease (0 = 5 min). Too short and two
	// consumers work on one message at once; too long and a crashed
	// consumer stalls that message for the duration. It should
	// comfortably exceed the slowest handler.
	ClaimTimeout time.Duration
	// Retention is how long a confirmed key is remembered (0 = 24 h); a
	// duplicate arriving later than that is handled again.
	Retention time.Duration
	// PurgeBatch is how many rows one DELETE of PurgeExpired removes
	// (0 = 1000).
	PurgeBatch int
}

// SQLIdempotencyStore is the idempotency store consumers on several
// processes share: a key is held under a lease (ClaimTimeout), so a
// consumer that dies mid-handler costs that message one lease, not the
// message; Confirm holds a key for Retention once its work is done.
//
// It implements patterns.IdempotencyStore, patterns.Claimer,
// patterns.Confirmer and patterns.ResultStore (a kept result lives in the
// key's row until Confirm clears it). Nothing on the message path deletes anything: run
// PurgeExpired on a schedule (hourly is ample). Keys are stored as bytes,
// exactly as given. A store instance is one holder: Forget gives up only
// this instance's own live claim, so give each consumer process its own
// instance (over the same table). The goroutines of one consumer share
// their instance's claims: a handler that outlives ClaimTimeout can see its
// key taken over by another delivery of the same message in the same
// process, and its Forget would then give up that newer claim too. Keep
// ClaimTimeout above the longest handler (a lease that runs out mid-handler
// already means the work may run twice). A claim this instance let go of
// while the database was away (its Forget failed) is taken back by its
// next Claim of the key, instead of stalling the message for a lease.
//
// Each Claim and Confirm is one autocommitted statement, so its cost is a
// durable commit, and concurrent consumers only overlap their commits if
// the pool has a connection for each (pgxpool's default is max(4, CPUs)).
// A pool whose sessions set synchronous_commit=off roughly doubles the rate
// (BenchmarkSQLIdempotencyClaimConfirm); what a database crash then forgets
// is the last instant's claims and confirmations, which costs a duplicate
// run, never a message.
type SQLIdempotencyStore struct {
	db         DB
	t          Tables
	sql        idemStatements
	lease      time.Duration
	retention  time.Duration
	purgeBatch int
	holder     string

	// own says, per key, what this instance has to do with it: a live
	// claim of its own that it neither holds nor is claiming right now
	// was left behind by a Forget the database never got, and Claim
	// takes it back.
	mu  sync.Mutex
	own map[string]*idemOwn
	// places are the ClaimPlace and ConfirmReleasing statements rendered
	// so far.
	places placeClaims
	// claims and keeps group the claims' inserts, and the results and
	// confirmations kept, of calls made at once (idempotency_group.go);
	// recordKept are RecordKept's statements.
	claims     group[*claimReq]
	keeps      group[*keptReq]
	recordKept keptStatements
}

// idemOwn is what one SQLIdempotencyStore has to do with one key.
type idemOwn struct {
	// claiming counts the instance's Claims of the key running now: one
	// of them may have won the claim in the database and not yet said so.
	claiming int
	// held: the instance claimed the key and has not let go of it
	// (Confirm, Complete or Forget, whether or not the database took it).
	held bool
}

var _ patterns.TxStore = (*SQLIdempotencyStore)(nil)

// NewSQLIdempotencyStore returns a store running on db (a pool, usually).
// It refuses a nil db, invalid table names and negative settings.
func NewSQLIdempotencyStore(db DB, cfg SQLIdempotencyStoreConfig) (*SQLIdempotencyStore, error) {
	if db == nil {
		return nil, fmt.Errorf("%w: idempotency store: nil db", broker.ErrInvalidOption)
	}
	t, err := cfg.Tables.checked()
	if err != nil {
		return nil, err
	}
	if cfg.ClaimTimeout < 0 || cfg.Retention < 0 || cfg.PurgeBatch < 0 {
		return nil, fmt.Errorf("%w: idempotency store: negative setting", broker.ErrInvalidOption)
	}
	s := &SQLIdempotencyStore{db: db, t: t, sql: renderIdemStatements(t), lease: cfg.ClaimTimeout, retention: cfg.Retention, purgeBatch: cfg.PurgeBatch,
		holder: broker.NewID(), own: map[string]*idemOwn{}}
	if s.lease == 0 {
		s.lease = DefaultClaimTimeout
	}
	if s.retention == 0 {
		s.retention = DefaultIdempotencyRetention
	}
	if s.purgeBatch == 0 {
		s.purgeBatch = DefaultPurgeBatch
	}
	return s, nil
}

// Claim takes key under a lease when nobody holds it live
// (patterns.ClaimClaimed); otherwise it answers ClaimDuplicate for a
// confirmed key and ClaimInProgress for a live claim. The insert decides,
// atomically: of N callers claiming one key at once exactly one is told
// ClaimClaimed, whether they share this instance or not.
func (s *SQLIdempotencyStore) Claim(ctx context.Context, key string) (patterns.Claim, error) {
	s.claiming(key)
	won, err := s.claimKey(ctx, key)
	return s.claimFrom(ctx, key, won, err)
}

// insertClaim is a claim's insert: whether it took key.
func (s *SQLIdempotencyStore) insertClaim(ctx context.Context, key string) (bool, error) {
	rows, err := s.db.Query(ctx, s.sql.claim, []byte(key), s.holder, s.lease.Seconds())
	if err != nil {
		return false, fmt.Errorf("idempotency %s: claim: %w", s.t.Idempotency, err)
	}
	won := rows.Next()
	rows.Close()
	if err := rows.Err(); err != nil {
		return false, fmt.Errorf("idempotency %s: claim: %w", s.t.Idempotency, err)
	}
	return won, nil
}

// claimFrom finishes a Claim of key (begun with claiming) whose first
// insert answered won, or failed with first: a key it did not take is
// looked up, and taken again when it was forgotten or expired meanwhile;
// one held by an open ClaimInTx transaction is in progress.
func (s *SQLIdempotencyStore) claimFrom(ctx context.Context, key string, won bool, first error) (c patterns.Claim, err error) {
	defer func() { s.claimed(key, err == nil && c == patterns.ClaimClaimed) }()
	if first != nil {
		return 0, first
	}
	for try := range idemClaimTries {
		if try > 0 {
			if won, err = s.insertClaim(ctx, key); err != nil {
				return 0, err
			}
		}
		if won {
			return patterns.ClaimClaimed, nil
		}
		var (
			state, holder string
			live          bool
		)
		err = s.db.QueryRow(ctx, s.sql.look, []byte(key)).Scan(&state, &live, &holder)
		switch {
		case err != nil && isNoRows(err):
			continue
		case err != nil:
			return 0, fmt.Errorf("idempotency %s: look up a held key: %w", s.t.Idempotency, err)
		case !live:
			continue
		case state == "confirmed":
			return patterns.ClaimDuplicate, nil
		case holder == s.holder && s.leftBehind(key):
			// This instance's own claim, which it let go of while the
			// database was away: nobody works on it, take it back now
			// rather than in a lease.
			if taken, err := s.reclaim(ctx, key); err != nil || taken {
				return patterns.ClaimClaimed, err
			}
			continue
		default:
			return patterns.ClaimInProgress, nil
		}
	}
	// Not taken and never seen: held by a ClaimInTx transaction (its
	// row not yet visible), or changing hands faster than it can be
	// looked up. Either way somebody has it: ask again later.
	return patterns.ClaimInProgress, nil
}

// claiming records that one of this instance's Claims of key started.
func (s *SQLIdempotencyStore) claiming(key string) {
	s.mu.Lock()
	defer s.mu.Unlock()
	o := s.own[key]
	if o == nil {
		o = &idemOwn{}
		s.own[key] = o
	}
	o.claiming++
}

// claimed records that one of this instance's Claims of key ended, and
// whether it won the key.
func (s *SQLIdempotencyStore) claimed(key string, won bool) {
	s.mu.Lock()
	defer s.mu.Unlock()
	o := s.own[key]
	o.claiming--
	o.held = o.held || won
	if o.claiming == 0 && !o.held {
		delete(s.own, key)
	}
}

// letGo records that this instance let go of key's claim.
func (s *SQLIdempotencyStore) letGo(key string) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if o := s.own[key]; o != nil {
		o.held = false
		if o.claiming == 0 {
			delete(s.own, key)
		}
	}
}

// leftBehind reports, from inside a Claim of key, whether this instance's
// claim on key was let go of: it does not hold it, and no other of its
// Claims of key is running (one that won in the database and has not yet
// said so would look the same).
func (s *SQLIdempotencyStore) leftBehind(key string) bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	o := s.own[key]
	return o != nil && !o.held && o.claiming == 1
}

// reclaim renews this instance's own claim on key; false when it is no
// longer there to renew.
func (s *SQLIdempotencyStore) reclaim(ctx context.Context, key string) (bool, error) {
	tag, err := s.db.Exec(ctx, s.sql.reclaim, []byte(key), s.holder, s.lease.Seconds())
	if err != nil {
		return false, fmt.Errorf("idempotency %s: take back a claim: %w", s.t.Idempotency, err)
	}
	return tag.RowsAffected() > 0, nil
}

// FirstTime is Claim(key) == patterns.ClaimClaimed.
func (s *SQLIdempotencyStore) FirstTime(ctx context.Context, key string) (bool, error) {
	c, err := s.Claim(ctx, key)
	return c == patterns.ClaimClaimed, err
}

// Confirm records that key's work was done: it is a duplicate for
// Retention from now, whoever held the claim.
func (s *SQLIdempotencyStore) Confirm(ctx context.Context, key string) error {
	if err := s.keep(ctx, journal.Kept{Key: key, Confirmed: true}); err != nil {
		return fmt.Errorf("idempotency %s: confirm: %w", s.t.Idempotency, err)
	}
	return nil
}

// Complete records that key's work was done, as Confirm does, and keeps
// result in its row until Confirm; a nil result is kept as an empty one.
func (s *SQLIdempotencyStore) Complete(ctx context.Context, key string, result []byte) error {
	if err := s.keep(ctx, journal.Kept{Key: key, Result: result}); err != nil {
		return fmt.Errorf("idempotency %s: complete: %w", s.t.Idempotency, err)
	}
	return nil
}

// CompleteInTx runs work in a transaction on the store's database and
// completes key with work's result in the same transaction (see
// patterns.TxStore): work reads the transaction with Tx(ctx) and writes
// its effects there. Only this store's own claim on key is completed;
// when another holder took the key over, nothing commits and the error
// matches patterns.ErrClaimLost. A commit whose outcome is unknown (the
// connection dropped during it) returns an error; the key is then either
// done or still claimed by this store, never half done, and Forget
// followed by a retry is safe either way.
func (s *SQLIdempotencyStore) CompleteInTx(ctx context.Context, key string, work func(ctx context.Context) ([]byte, error)) error {
	if work == nil {
		return fmt.Errorf("%w: idempotency: nil work", broker.ErrInvalidOption)
	}
	defer s.letGo(key)
	return inTx(ctx, s.db, func(tx pgx.Tx) error {
		result, err := work(context.WithValue(ctx, txKey{}, tx))
		if err != nil {
			return err
		}
		if result == nil {
			// NULL would read as "nothing kept"; an empty result is kept.
			result = []byte{}
		}
		tag, err := tx.Exec(ctx, s.sql.completeHeld, []byte(key), s.holder, s.retention.Seconds(), result)
		if err != nil {
			return fmt.Errorf("idempotency %s: complete in transaction: %w", s.t.Idempotency, err)
		}
		if tag.RowsAffected() == 0 {
			return fmt.Errorf("idempotency %s: key %q: %w", s.t.Idempotency, key, patterns.ErrClaimLost)
		}
		return nil
	})
}

// errNotTaken is ClaimInTx's claim not taking its key: the transaction
// rolls back.
var errNotTaken = errors.New("key not taken")

// ClaimInTx claims key in a transaction and, when it takes it, runs work
// in that transaction and keeps what work returns under key, committing
// all of it (patterns.TxClaimer): one commit where Claim and CompleteInTx
// take two. When the key is not taken nothing runs: a confirmed key
// answers ClaimDuplicate, any other ClaimInProgress, also one whose
// transaction is open in another worker (a transaction-level advisory lock
// on the key says so without waiting for it).
//
// The claim is the transaction: it lapses when the transaction ends. A
// worker that dies ends it with its connection; one that stops talking to
// the database for the claim's lease (ClaimTimeout) while it is open has
// its session ended by PostgreSQL (idle_in_transaction_session_timeout,
// set for the transaction), so that a partitioned worker holds the key no
// longer than a claim made apart would. An error from work rolls
// everything back and is returned as it is; any other error comes with
// claim 0 when nothing ran.
func (s *SQLIdempotencyStore) ClaimInTx(ctx context.Context, key string, work func(ctx context.Context) ([]byte, error)) (patterns.Claim, error) {
	if work == nil {
		return 0, fmt.Errorf("%w: idempotency: nil work", broker.ErrInvalidOption)
	}
	var ran bool
	err := inTx(ctx, s.db, func(tx pgx.Tx) error {
		var free, held bool
		if err := tx.QueryRow(ctx, s.sql.claimTx, []byte(key), strconv.FormatInt(max(s.lease.Milliseconds(), 1), 10)).Scan(&free, &held); err != nil {
			return fmt.Errorf("idempotency %s: claim in a transaction: %w", s.t.Idempotency, err)
		}
		if !free || held {
			return errNotTaken
		}
		ran = true
		result, err := work(context.WithValue(ctx, txKey{}, tx))
		if err != nil {
			return err
		}
		if result == nil {
			// NULL would read as "nothing kept"; an empty result is kept.
			result = []byte{}
		}
		tag, err := tx.Exec(ctx, s.sql.keptTx, []byte(key), result, s.holder, s.retention.Seconds())
		if err != nil {
			return fmt.Errorf("idempotency %s: complete in transaction: %w", s.t.Idempotency, err)
		}
		if tag.RowsAffected() == 0 {
			// Done meanwhile by a transaction that committed while the
			// claim's statement ran: its snapshot did not see it.
			return fmt.Errorf("idempotency %s: key %q: %w", s.t.Idempotency, key, patterns.ErrClaimLost)
		}
		return nil
	})
	switch {
	case ran:
		return patterns.ClaimClaimed, err
	case !errors.Is(err, errNotTaken):
		return 0, err
	}
	var (
		state, holder string
		live          bool
	)
	switch err := s.db.QueryRow(ctx, s.sql.look, []byte(key)).Scan(&state, &live, &holder); {
	case err != nil && !isNoRows(err):
		return 0, fmt.Errorf("idempotency %s: look up a held key: %w", s.t.Idempotency, err)
	case err == nil && live && state == "confirmed":
		return patterns.ClaimDuplicate, nil
	}
	return patterns.ClaimInProgress, nil
}

// Result is what Complete kept under key, while the key is live and not
// confirmed since.
func (s *SQLIdempotencyStore) Result(ctx context.Context, key string) ([]byte, bool, error) {
	var result []byte
	err := s.db.QueryRow(ctx, s.sql.result, []byte(key)).Scan(&result)
	switch {
	case err != nil && isNoRows(err):
		return nil, false, nil
	case err != nil:
		return nil, false, fmt.Errorf("idempotency %s: result: %w", s.t.Idempotency, err)
	}
	return result, true, nil
}

// Forget gives up this store's own live claim on key, so a retry can run.
// It never removes a confirmation (that would undo work that was done) nor
// another holder's claim (that would put two consumers on one message).
func (s *SQLIdempotencyStore) Forget(ctx context.Context, key string) error {
	s.letGo(key)
	_, err := s.db.Exec(ctx, s.sql.forget, []byte(key), s.holder)
	if err != nil {
		return fmt.Errorf("idempotency %s: forget: %w", s.t.Idempotency, err)
	}
	return nil
}

// PurgeExpired deletes expired keys (confirmations past retention, claims
// past their lease) PurgeBatch rows per statement, so that a large table is
// never locked by one DELETE, and says how many went. Rows somebody is
// claiming at that moment are skipped, not waited for.
func (s *SQLIdempotencyStore) PurgeExpired(ctx context.Context) (int64, error) {
	var total int64
	for {
		tag, err := s.db.Exec(ctx, s.sql.purge, s.purgeBatch)
		if err != nil {
			return total, fmt.Errorf("idempotency %s: purge expired: %w", s.t.Idempotency, err)
		}
		total += tag.RowsAffected()
		if tag.RowsAffected() < int64(s.purgeBatch) {
			return total, nil
		}
	}
}

// idemStatements are the store's statements, rendered for its tables once
// (rendering builds a strings.Replacer, which cost more Go time than the
// rest of a claim did).
type idemStatements struct {
	claim, look, reclaim, completeHeld, result, forget, purge string
	// claims is the claims' insert of a group of keys ($1), kept the
	// upsert of a group of results and confirmations (keptUpsert).
	claims, kept string
	// claimTx is ClaimInTx's claim, keptTx its keeping of the result.
	claimTx, keptTx string
}

// keyLock is the advisory lock of the key k.key of the store's table (an
// advisory lock is the database's, whatever the table): ClaimInTx holds it
// while its transaction is open.
const keyLock = `('x' || left(md5(convert_to('{{idempotency}}', 'UTF8') || k.key), 16))::bit(64)::bigint`

// claimInsert is the claim's upsert of the rows %s gives (key, holder,
// lease in seconds): a key nobody holds live is taken, and with a
// RETURNING clause the statement returns a row for each key taken.
// confirmUpsert is the confirm's. ClaimPlace
// and ConfirmReleasing use them with parameters of their own.
const (
	claimInsert = `
			INSERT INTO {{idempotency}} AS cur (key, state, holder, expires_at)
			%s
			ON CONFLICT (key) DO UPDATE
			SET state = 'claimed', holder = EXCLUDED.holder, expires_at = EXCLUDED.expires_at
			WHERE cur.expires_at <= now()`
	confirmUpsert = `
			INSERT INTO {{idempotency}} (key, state, holder, expires_at)
			VALUES (%s, 'confirmed', %s, now() + %s * interval '1 second')
			ON CONFLICT (key) DO UPDATE
			SET state = 'confirmed', holder = EXCLUDED.holder, expires_at = EXCLUDED.expires_at, result = NULL`
	// keptUpsert writes keys (%[1]s, sorted, distinct) as confirmed by
	// holder (%[3]s) for the retention (%[4]s seconds), each with its
	// result (%[2]s: NULL for a confirmation, which drops what was kept).
	keptUpsert = `
			INSERT INTO {{idempotency}} AS cur (key, state, holder, expires_at, result)
			SELECT k.key, 'confirmed', %[3]s, now() + %[4]s * interval '1 second', k.result
			FROM unnest(%[1]s::bytea[], %[2]s::bytea[]) WITH ORDINALITY AS k(key, result, ord)
			ORDER BY k.ord
			ON CONFLICT (key) DO UPDATE
			SET state = 'confirmed', holder = EXCLUDED.holder, expires_at = EXCLUDED.expires_at, result = EXCLUDED.result`
)

func renderIdemStatements(t Tables) idemStatements {
	return idemStatements{
		claim: t.render(fmt.Sprintf(claimInsert, `SELECT $1, 'claimed', $2, now() + $3 * interval '1 second'
			WHERE pg_try_advisory_xact_lock(`+strings.ReplaceAll(keyLock, "k.key", "$1::bytea")+`)`) + ` RETURNING 1`),
		// The claim of ClaimInTx, which writes nothing: the transaction's
		// idle timeout ($2, in milliseconds) set to the lease, the key's
		// advisory lock taken when no other transaction holds it (every
		// claim checks it, so none takes the key while this transaction
		// is open), and whether a claim made apart holds the key live or
		// it is done. The key's row is written once, with its result.
		claimTx: t.render(`SELECT pg_try_advisory_xact_lock(` + strings.ReplaceAll(keyLock, "k.key", "$1::bytea") + `),
			EXISTS (SELECT 1 FROM {{idempotency}} WHERE key = $1 AND expires_at > now())
			FROM set_config('idle_in_transaction_session_timeout', $2, true)`),
		// ClaimInTx's result, written unless the key was done or taken
		// by another meanwhile: the claim's look at the row read a
		// snapshot taken before its advisory lock, so a transaction
		// that committed the key between the two was not seen; the
		// upsert sees the row as committed.
		keptTx: t.render(`
			INSERT INTO {{idempotency}} AS cur (key, state, holder, expires_at, result)
			VALUES ($1, 'confirmed', $3, now() + $4 * interval '1 second', $2)
			ON CONFLICT (key) DO UPDATE
			SET state = 'confirmed', holder = EXCLUDED.holder, expires_at = EXCLUDED.expires_at, result = EXCLUDED.result
			WHERE cur.expires_at <= now() OR (cur.state = 'claimed' AND cur.holder = EXCLUDED.holder)`),
		// A key whose ClaimInTx transaction is open (its advisory lock
		// taken) is not inserted, which would wait for that transaction:
		// it is looked up, and in progress.
		claims: t.render(fmt.Sprintf(claimInsert,
			`SELECT k.key, 'claimed', $2, now() + $3 * interval '1 second' FROM unnest($1::bytea[]) WITH ORDINALITY AS k(key, ord)
			WHERE pg_try_advisory_xact_lock(`+keyLock+`) ORDER BY k.ord`) +
			` RETURNING key`),
		kept: t.render(fmt.Sprintf(keptUpsert, "$1", "$2", "$3", "$4")),
		look: t.render(`SELECT state, expires_at > now(), holder FROM {{idempotency}} WHERE key = $1`),
		reclaim: t.render(`
			UPDATE {{idempotency}} SET expires_at = now() + $3 * interval '1 second'
			WHERE key = $1 AND state = 'claimed' AND holder = $2`),
		// Only the holder's own claim: a claim taken over after its lease
		// ran out belongs to the new holder, whose work counts.
		completeHeld: t.render(`
			UPDATE {{idempotency}}
			SET state = 'confirmed', expires_at = now() + $3 * interval '1 second', result = $4
			WHERE key = $1 AND state = 'claimed' AND holder = $2`),
		result: t.render(`
			SELECT result FROM {{idempotency}}
			WHERE key = $1 AND state = 'confirmed' AND expires_at > now() AND result IS NOT NULL`),
		forget: t.render(`
			DELETE FROM {{idempotency}}
			WHERE key = $1 AND state = 'claimed' AND holder = $2 AND expires_at > now()`),
		purge: t.render(`
			DELETE FROM {{idempotency}}
			WHERE key IN (SELECT key FROM {{idempotency}} WHERE expires_at <= now()
			              LIMIT $1 FOR UPDATE SKIP LOCKED)
			  AND expires_at <= now()`),
	}
}
