package patterns

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"time"

	"github.com/acemq/acemq-flow/broker"
)

// DefaultStoreTimeout bounds each call Once makes to its store, unless
// OnceConfig says otherwise: a store that does not answer is an error the
// delivery is retried for, never a handler stuck on it.
const DefaultStoreTimeout = 10 * time.Second

// ErrStore is what Done.Err wraps when the store could not be asked (a
// claim or a lookup failed): nothing ran, and a retry can.
var ErrStore = errors.New("idempotency store")

// OnceConfig configures a Once (a config struct: the zero value is the
// defaults).
type OnceConfig struct {
	// StoreTimeout bounds each store call (0 = DefaultStoreTimeout).
	StoreTimeout time.Duration
	// Logger hears of a Forget or Confirm the store failed (nil =
	// slog.Default()).
	Logger *slog.Logger
}

// Once is the executor of units of work that must happen once: a step of a
// flow, its compensation, a message under the idempotency guard. Each unit
// goes through the same sequence, under its key in a ResultStore:
//
//  1. claim the key (ClaimInProgress: somebody else holds it; ClaimDuplicate:
//     done before);
//  2. do the work: in the store's database transaction when the unit is
//     InTx, so that its writes commit with the key's completion;
//  3. keep what it produced under the key (Complete): from here on the work
//     is done, and a redelivery passes on what was kept instead of doing it
//     again;
//  4. carry out what it produced: a value of the caller's (messages to send,
//     data to put), which must be safe to carry out twice;
//  5. confirm the key, once the caller has recorded the outcome (Confirm).
//
// An InTx unit on a TxClaimer store is claimed in the transaction that
// does its work: steps 1 to 3 are one commit.
//
// A unit found done with its result still kept (a redelivery after a crash
// between 3 and 5) has that result carried out again, the work not redone.
// Every store call is bounded by the config's StoreTimeout and made
// without the caller's cancellation: a consumer closing at its deadline
// still releases or confirms what it claimed. Safe for concurrent use.
//
// A store that is not a ResultStore cannot keep a result: a unit whose
// carrying out fails then has its key let go, so that a retry does the work
// again rather than lose what it produced (at least once, as the seeds'
// guard is). A store that is not a Claimer cannot tell work in progress
// from work done: its FirstTime answers claimed or duplicate.
type Once struct {
	store     IdempotencyStore
	claimer   Claimer
	confirmer Confirmer
	results   ResultStore
	tx        TxStore
	txClaimer TxClaimer
	timeout   time.Duration
	log       *slog.Logger
}

// NewOnce returns an executor on store. It refuses a nil store and a
// negative timeout.
func NewOnce(store IdempotencyStore, cfg OnceConfig) (*Once, error) {
	if store == nil {
		return nil, fmt.Errorf("%w: nil idempotency store", broker.ErrInvalidOption)
	}
	if cfg.StoreTimeout < 0 {
		return nil, fmt.Errorf("%w: store timeout %s, want 0 or more", broker.ErrInvalidOption, cfg.StoreTimeout)
	}
	if cfg.StoreTimeout == 0 {
		cfg.StoreTimeout = DefaultStoreTimeout
	}
	if cfg.Logger == nil {
		cfg.Logger = slog.Default()
	}
	o := &Once{store: store, timeout: cfg.StoreTimeout, log: cfg.Logger}
	o.claimer, _ = store.(Claimer)
	o.confirmer, _ = store.(Confirmer)
	o.results, _ = store.(ResultStore)
	o.tx, _ = store.(TxStore)
	o.txClaimer, _ = store.(TxClaimer)
	return o, nil
}

// Transactional reports whether the store can run a unit InTx.
func (o *Once) Transactional() bool { return o.tx != nil }

// Unit is one unit of work that must happen once, producing an R to carry
// out.
type Unit[R any] struct {
	// Key names the work in the store.
	Key string
	// InTx does the work in the store's database transaction (a TxStore):
	// what it writes through the transaction commits with the key's
	// completion, or not at all.
	InTx bool
	// Claimed, when not 0, is the store's answer to a claim of Key the
	// caller made itself (together with work of its own, in one round
	// trip): Run does not claim Key again, and goes on from that answer.
	Claimed Claim
	// Do does the work and returns what follows it. An error means the work
	// did not happen (or was rolled back, InTx): the key is let go, and the
	// caller decides between a retry and giving up.
	Do func(ctx context.Context) (R, error)
	// Encode and Decode turn what Do produced into what is kept under the
	// key, and back.
	Encode func(R) ([]byte, error)
	Decode func([]byte) (R, error)
	// Keep, when set, keeps what Do produced (r, and b, what Encode made
	// of it) under Key in place of the store's Complete, so that the
	// caller can write it with writes of its own in one commit (the engine
	// keeps a step's result with its journal events). An error is a keep
	// that failed, as Complete's is: logged, and r carried out all the
	// same. Not used for an InTx unit, whose result is kept in its
	// transaction.
	Keep func(ctx context.Context, r R, b []byte) error
	// CarryOut carries out what Do produced, or what an earlier delivery
	// kept; it may run again for the same R (a redelivery), so what it
	// sends keeps its message ids.
	CarryOut func(ctx context.Context, r R) error
}

// Done is what Run did with a unit.
type Done[R any] struct {
	// Claim is the store's answer to the claim (0 when the claim failed).
	Claim Claim
	// Result is what was carried out (or was to be): what Do produced,
	// or what an earlier delivery kept (Resent).
	Result R
	// Kept says Result is the work's, done and kept: the caller confirms the
	// key once it has recorded the outcome, even when carrying out failed
	// (Err), since the work must not be done again.
	Kept bool
	// Resent says the work was done by an earlier delivery: its kept result
	// was carried out again.
	Resent bool
	// Lost says the claim was lost to another holder meanwhile (its lease
	// ran out during an InTx unit): nothing was committed, and the other
	// holder's outcome counts.
	Lost bool
	// Failed says Do failed: Err is its error, and the key was let go.
	Failed bool
	// Unreadable says what an earlier delivery kept cannot be read (Err
	// says why): nothing was carried out, and no retry can read it.
	Unreadable bool
	// Err is Do's error (Failed), the carry-out's (Kept: a redelivery
	// carries the result out again), or the store's (wrapping ErrStore;
	// nothing ran).
	Err error
	// Pending says Begin did the work and left keeping and carrying out
	// its Result to Finish.
	Pending bool
}

// Run takes u through the sequence: claim, do, keep, carry out. The caller
// confirms the key (Confirm) once it has recorded a Done that is Kept. It
// refuses an empty key, a unit without Do, Encode, Decode or CarryOut, and
// an InTx unit on a store that cannot run transactions, as an ErrStore.
func Run[R any](ctx context.Context, o *Once, u Unit[R]) Done[R] {
	return Finish(ctx, o, u, Begin(ctx, o, u))
}

// Begin is Run up to the work: it claims u's key and does the work, or
// (found done before) carries out again what was kept; an InTx unit is
// done whole. A unit whose work it did comes back Pending, its Result
// neither kept nor carried out: Finish does that, with the same u and ctx
// values, maybe on another goroutine (the engine keeps and sends a step's
// result off the handler's slot), and must be called once for it: until
// then the key stays claimed.
func Begin[R any](ctx context.Context, o *Once, u Unit[R]) Done[R] {
	var d Done[R]
	switch {
	case u.Key == "" || u.Do == nil || u.Encode == nil || u.Decode == nil || u.CarryOut == nil:
		d.Err = fmt.Errorf("%w: unit %q: a key, Do, Encode, Decode and CarryOut are all needed", ErrStore, u.Key)
		return d
	case u.InTx && o.tx == nil:
		d.Err = fmt.Errorf("%w: unit %q runs in a transaction, and the store (%T) cannot run one", ErrStore, u.Key, o.store)
		return d
	}
	claim := u.Claimed
	if claim == 0 && u.InTx && o.txClaimer != nil {
		return claimInTx(ctx, o, u, d)
	}
	if claim == 0 {
		var err error
		if claim, err = o.claim(ctx, u.Key); err != nil {
			d.Err = err
			return d
		}
	}
	d.Claim = claim
	switch claim {
	case ClaimClaimed:
		return do(ctx, o, u, d)
	case ClaimDuplicate:
		return again(ctx, o, u, d)
	default:
		return d
	}
}

// Finish keeps and carries out what Begin's work produced (d Pending),
// and returns what came of it; a d that is not Pending is returned as it
// is. A panic in keeping or carrying out lets the key go (unless what the
// work produced is kept), and carries on up.
func Finish[R any](ctx context.Context, o *Once, u Unit[R], d Done[R]) (out Done[R]) {
	if !d.Pending {
		return d
	}
	d.Pending = false
	defer func() {
		if p := recover(); p != nil {
			if !out.Kept {
				o.Forget(ctx, u.Key)
			}
			panic(p)
		}
	}()
	kept := keep(ctx, o, u, d.Result)
	d.Kept = true
	out = d
	if d.Err = u.CarryOut(ctx, d.Result); d.Err != nil && !kept {
		// Nothing a redelivery could pass on: the work is done again.
		d.Kept = false
		o.Forget(ctx, u.Key)
	}
	return d
}

// do does a unit whose key is held: its work, in its transaction (kept and
// carried out there) when it is InTx, or else left Pending for Finish. A
// panic in Do lets the key go (unless what it produced is kept), and
// carries on up: the consumer retries a handler that panicked.
func do[R any](ctx context.Context, o *Once, u Unit[R], d Done[R]) (out Done[R]) {
	defer func() {
		if p := recover(); p != nil {
			if !out.Kept {
				o.Forget(ctx, u.Key)
			}
			panic(p)
		}
	}()
	var doErr error
	if u.InTx {
		err := o.tx.CompleteInTx(ctx, u.Key, func(ctx context.Context) ([]byte, error) {
			if d.Result, doErr = u.Do(ctx); doErr != nil {
				return nil, doErr
			}
			return u.Encode(d.Result)
		})
		switch {
		case doErr != nil:
			d.Failed, d.Err = true, doErr
			o.Forget(ctx, u.Key)
			return d
		case errors.Is(err, ErrClaimLost):
			d.Lost = true
			return d
		case err != nil:
			// Committed or not, the key is done (a redelivery passes on what
			// was kept) or still ours to let go.
			d.Failed, d.Err = true, fmt.Errorf("transaction: %w", err)
			o.Forget(ctx, u.Key)
			return d
		}
		d.Kept = true
		out = d
		d.Err = u.CarryOut(ctx, d.Result)
		return d
	}
	if d.Result, doErr = u.Do(ctx); doErr != nil {
		d.Failed, d.Err = true, doErr
		o.Forget(ctx, u.Key)
		return d
	}
	d.Pending = true
	return d
}

// claimInTx claims an InTx unit's key in the transaction that does its
// work (TxClaimer), and goes on as Run does from the claim's answer.
func claimInTx[R any](ctx context.Context, o *Once, u Unit[R], d Done[R]) Done[R] {
	var doErr error
	claim, err := o.txClaimer.ClaimInTx(ctx, u.Key, func(ctx context.Context) ([]byte, error) {
		if d.Result, doErr = u.Do(ctx); doErr != nil {
			return nil, doErr
		}
		return u.Encode(d.Result)
	})
	d.Claim = claim
	switch {
	case doErr != nil:
		// Rolled back with the claim: nothing to let go.
		d.Failed, d.Err = true, doErr
		return d
	case claim == ClaimDuplicate && err == nil:
		return again(ctx, o, u, d)
	case claim == ClaimInProgress && err == nil:
		return d
	case claim == 0:
		d.Err = fmt.Errorf("%w: claim %q in a transaction: %w", ErrStore, u.Key, err)
		return d
	case errors.Is(err, ErrClaimLost):
		// Another delivery did it and committed first; this one's work
		// was rolled back.
		d.Lost = true
		return d
	case err != nil:
		// The work ran; its commit failed, or may have: the key is done
		// (a redelivery passes on what was kept) or was never taken.
		d.Failed, d.Err = true, fmt.Errorf("transaction: %w", err)
		return d
	}
	d.Kept = true
	d.Err = u.CarryOut(ctx, d.Result)
	return d
}

// again carries out again what a unit done before kept, if anything is
// kept: the work is done, and only passing it on may not have happened.
func again[R any](ctx context.Context, o *Once, u Unit[R], d Done[R]) Done[R] {
	if o.results == nil {
		return d
	}
	sctx, cancel := o.bounded(ctx)
	b, ok, err := o.results.Result(sctx, u.Key)
	cancel()
	switch {
	case err != nil:
		d.Err = fmt.Errorf("%w: result of %q: %w", ErrStore, u.Key, err)
		return d
	case !ok:
		return d
	}
	r, err := u.Decode(b)
	if err != nil {
		d.Unreadable, d.Err = true, fmt.Errorf("read what %q kept: %w", u.Key, err)
		return d
	}
	d.Result, d.Kept, d.Resent = r, true, true
	d.Err = u.CarryOut(ctx, r)
	return d
}

// keep keeps what the work produced under its key (through the unit's
// Keep, when it has one), and says whether it is kept (or was nothing to
// keep). A store that fails is logged and the result still carried out.
func keep[R any](ctx context.Context, o *Once, u Unit[R], r R) bool {
	b, err := u.Encode(r)
	switch {
	case err == nil && u.Keep != nil:
		sctx, cancel := o.bounded(ctx)
		err = u.Keep(sctx, r, b)
		cancel()
	case err == nil && b == nil:
		return true
	case err == nil && o.results == nil:
		return false
	case err == nil:
		sctx, cancel := o.bounded(ctx)
		err = o.results.Complete(sctx, u.Key, b)
		cancel()
	}
	if err != nil {
		o.log.WarnContext(ctx, "idempotency: cannot keep what the work produced; should passing it on fail, the work is done again",
			slog.String("key", u.Key), slog.Any("error", err))
		return false
	}
	return true
}

// claim asks the store for key.
func (o *Once) claim(ctx context.Context, key string) (Claim, error) {
	sctx, cancel := o.bounded(ctx)
	defer cancel()
	var (
		c   Claim
		err error
	)
	if o.claimer != nil {
		c, err = o.claimer.Claim(sctx, key)
	} else {
		var first bool
		first, err = o.store.FirstTime(sctx, key)
		c = ClaimDuplicate
		if first {
			c = ClaimClaimed
		}
	}
	if err != nil {
		return 0, fmt.Errorf("%w: claim %q: %w", ErrStore, key, err)
	}
	return c, nil
}

// Confirm records key's work as done and passed on: from now on it is a
// duplicate, its kept result dropped. A store that fails is logged: the
// key then stays held until its lease ends. A store that is not a
// Confirmer is not asked.
func (o *Once) Confirm(ctx context.Context, key string) {
	if o.confirmer == nil {
		return
	}
	sctx, cancel := o.bounded(ctx)
	defer cancel()
	if err := o.confirmer.Confirm(sctx, key); err != nil {
		o.log.WarnContext(ctx, "idempotency: confirm failed; the key stays claimed until its lease ends", slog.String("key", key), slog.Any("error", err))
	}
}

// Forget lets key go, so that a retry can do the work. A store that fails
// is logged: a Claimer frees the key when its lease ends.
func (o *Once) Forget(ctx context.Context, key string) {
	sctx, cancel := o.bounded(ctx)
	defer cancel()
	if err := o.store.Forget(sctx, key); err != nil {
		o.log.WarnContext(ctx, "idempotency: forget failed; a retry may find the key still held", slog.String("key", key), slog.Any("error", err))
	}
}

// bounded is ctx for one store call: its values, not its cancellation, and
// the store timeout.
func (o *Once) bounded(ctx context.Context) (context.Context, context.CancelFunc) {
	return context.WithTimeout(context.WithoutCancel(ctx), o.timeout)
}
