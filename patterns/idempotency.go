package patterns

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"time"

	"github.com/acemq/acemq-flow/broker"
)

// IdempotencyOutcomeDuplicate is the outcome label a duplicate accepted by
// Idempotent is reported under on acemq.consume.total and the span. A
// message found in progress is reported as broker.OutcomeLabelInProgress.
const IdempotencyOutcomeDuplicate = "duplicate"

// ErrNoIdempotencyKey is the reason a message is given up when the key
// function (by default: the message id) yields an empty key: without a key
// there is nothing to deduplicate by, and running it unguarded would drop
// the guarantee silently.
var ErrNoIdempotencyKey = errors.New("idempotency: the message has no key")

// IdempotencyStore is the least a store must do for Idempotent: FirstTime
// both asks and claims, atomically (two callers with the same key must not
// both be told true), and Forget gives a claim up so that a retry of work
// that failed can run.
//
// A store with only these two methods cannot tell work in progress from
// work done: a redelivery of a message being handled elsewhere is accepted
// as a duplicate. Implement Claimer (and Confirmer) to get the three-way
// answer.
type IdempotencyStore interface {
	FirstTime(ctx context.Context, key string) (bool, error)
	Forget(ctx context.Context, key string) error
}

// Claimer is an IdempotencyStore that can say why a key is not first:
// ClaimDuplicate (the work was done) or ClaimInProgress (somebody holds a
// live claim on it). Idempotent uses Claim instead of FirstTime when the
// store has it.
type Claimer interface {
	Claim(ctx context.Context, key string) (Claim, error)
}

// Confirmer is an IdempotencyStore that records that the work under a key
// was done, so that the key is held for the store's retention rather than
// for a claim's lease. Idempotent calls Confirm after the handler accepted.
type Confirmer interface {
	Confirm(ctx context.Context, key string) error
}

// ResultStore is a Claimer and Confirmer that can also keep what a piece
// of work produced until it has been passed on: what closes the gap in
// which a follower's step is done but the message it produced is lost with
// the connection (the confirm never arrives, the ack of the input fails,
// the broker redelivers the input). Under Idempotent, a follower
// (FollowSlip, Pipeline.Follow, ThenPublish) keeps its next message under
// the key before it sends it; a redelivery then finds the key done and
// the message kept, and sends that message again, with the same id, rather
// than running the step twice. Both shipped stores implement it.
type ResultStore interface {
	IdempotencyStore
	Claimer
	Confirmer
	// Complete records key's work as done, as Confirm does, and keeps
	// result with it until Confirm (the result has been passed on) or the
	// store's retention forgets the key. A nil result is kept as an empty
	// one, as TxStore.CompleteInTx keeps a work's nil result: Result then
	// answers it with true, so that "completed with nothing to pass on"
	// never reads as "not completed".
	Complete(ctx context.Context, key string, result []byte) error
	// Result is what Complete kept under key, and false when nothing is
	// kept (never completed, or confirmed since).
	Result(ctx context.Context, key string) ([]byte, bool, error)
}

// TxStore is a ResultStore that can do a piece of work and record it done
// in one database transaction: the work's own writes and the key's
// completion commit together or not at all. It is the only arrangement
// under which a worker killed at any instant applies the work once: killed
// before the commit, nothing happened and the work runs again; killed after
// it, the key is done and its kept result is what a redelivery passes on.
// persistence.SQLIdempotencyStore implements it.
type TxStore interface {
	ResultStore
	// CompleteInTx opens a transaction, calls work with a ctx that carries
	// it (persistence.Tx reads it back), and, when work returns a result
	// without error, completes key with that result in the same
	// transaction and commits. The caller must hold key's claim: when
	// another holder took it over meanwhile (the claim's lease ran out),
	// nothing commits and the error matches ErrClaimLost. An error from
	// work rolls everything back and is returned as it is.
	CompleteInTx(ctx context.Context, key string, work func(ctx context.Context) ([]byte, error)) error
}

// TxClaimer is a TxStore that claims a key in the transaction that does
// its work (ClaimInTx): the claim, the work and what is kept commit
// together, in one commit where a claim and CompleteInTx take two, and a
// claim whose transaction rolls back is gone with it, nothing left to let
// go. A second claim of the key made meanwhile waits for that transaction,
// then finds the key done, or takes it. persistence.SQLIdempotencyStore
// implements it.
type TxClaimer interface {
	TxStore
	// ClaimInTx opens a transaction and claims key in it. When it takes
	// the key it calls work with a ctx that carries the transaction, keeps
	// what work returns under key and commits, answering ClaimClaimed;
	// an error from work rolls everything back, the claim included, and is
	// returned as it is. When it does not take the key nothing runs, and
	// it answers ClaimDuplicate for a key done, ClaimInProgress for one
	// held (or let go a moment ago: asked again, it may be taken). When
	// another delivery completed the key while this one worked, nothing
	// commits and the error matches ErrClaimLost (with ClaimClaimed).
	ClaimInTx(ctx context.Context, key string, work func(ctx context.Context) ([]byte, error)) (Claim, error)
}

// ErrClaimLost is CompleteInTx finding that the caller no longer holds the
// key's claim: another delivery of the same work took it over after the
// lease ran out, and that one's outcome counts. Nothing was committed.
var ErrClaimLost = errors.New("idempotency claim lost to another holder")

// Claim is a store's answer to "may I do the work under this key?".
type Claim int

// The three answers of Claimer.Claim.
const (
	// ClaimClaimed: the caller now holds the key and must do the work.
	ClaimClaimed Claim = iota + 1
	// ClaimDuplicate: the work was done (confirmed, or remembered by a
	// store without confirmations).
	ClaimDuplicate
	// ClaimInProgress: somebody holds a live, unconfirmed claim.
	ClaimInProgress
)

// String names the claim as the seeds spell it.
func (c Claim) String() string {
	switch c {
	case ClaimClaimed:
		return "CLAIMED"
	case ClaimDuplicate:
		return "DUPLICATE"
	case ClaimInProgress:
		return "IN_PROGRESS"
	default:
		return fmt.Sprintf("Claim(%d)", int(c))
	}
}

// IdempotencyOption is a knob of Idempotent. An option given an unusable
// value makes Idempotent return an error matching broker.ErrInvalidOption.
type IdempotencyOption func(*idemConfig) error

type idemConfig struct {
	key             func(*broker.Message) string
	inProgressDelay time.Duration
	logger          *slog.Logger
}

// IdempotencyKey takes the key from the message with f instead of from its
// id: for when two different messages carry the same order and doing the
// order twice is what must not happen. A nil f is refused.
func IdempotencyKey(f func(*broker.Message) string) IdempotencyOption {
	return func(c *idemConfig) error {
		if f == nil {
			return fmt.Errorf("%w: nil idempotency key function", broker.ErrInvalidOption)
		}
		c.key = f
		return nil
	}
}

// InProgressDelay sets how long a message found in progress waits before
// it is looked at again (default broker.DefaultInProgressDelay, 5 s). A
// delay that is not positive is refused.
func InProgressDelay(d time.Duration) IdempotencyOption {
	return func(c *idemConfig) error {
		if d <= 0 {
			return fmt.Errorf("%w: in-progress delay %s, want a positive duration", broker.ErrInvalidOption, d)
		}
		c.inProgressDelay = d
		return nil
	}
}

// IdempotencyLogger sets where Idempotent reports a Forget or Confirm the
// store failed (default slog.Default()). A nil logger is refused.
func IdempotencyLogger(l *slog.Logger) IdempotencyOption {
	return func(c *idemConfig) error {
		if l == nil {
			return fmt.Errorf("%w: nil logger", broker.ErrInvalidOption)
		}
		c.logger = l
		return nil
	}
}

// Idempotent returns middleware that runs a handler at most once per key
// (the message id unless IdempotencyKey says otherwise), as far as store
// can tell:
//
//   - first time (CLAIMED): the handler runs. If it accepts, the key is
//     confirmed on a Confirmer; if it does anything else (retry, reject,
//     put back, or panic) the key is forgotten so that its retry can run.
//   - DUPLICATE: accepted without running, reported as outcome="duplicate".
//     The work was done; dead-lettering it would raise an alarm about
//     something that went right.
//   - IN_PROGRESS (stores that implement Claimer): neither run nor
//     accepted but put back with broker.InProgress after the in-progress
//     delay, attempt unchanged, reported as outcome="in_progress". Once the
//     claim is confirmed the next look is a duplicate; once its lease runs
//     out the message is taken over and run.
//
// A store that fails to claim is a retry, never an accept: an error must
// not pass as a duplicate. A failed Confirm is logged and the message still
// accepted (the work was done; the claim's lease expiring is then the worst
// case, a second run of a redelivery). A failed Forget is logged: on a
// Claimer the key frees itself when its lease expires, but a store with only
// FirstTime cannot tell the retry from a duplicate and will accept it
// unrun, which is why the three-way claim exists.
//
// With a store that implements ResultStore, a follower the guard wraps
// (FollowSlip, Pipeline.Follow, ThenPublish) keeps the message its step
// produced under the key before sending it. If that send fails (a lost
// confirm, a lost connection), the key is not forgotten: the work was
// done. The retry or redelivery finds the key done with its message kept,
// and the follower sends that same message again, with its message id,
// without running the step: a step whose work completed never runs again
// because its hop failed.
//
// A message whose key is empty is given up with ErrNoIdempotencyKey. This
// is a guard against duplicates, not exactly-once: only a store written in
// the same transaction as the work closes the gap between the work and the
// acknowledgement. Idempotent refuses a nil store and invalid options.
func Idempotent(store IdempotencyStore, opts ...IdempotencyOption) (broker.Middleware, error) {
	if store == nil {
		return nil, fmt.Errorf("%w: nil idempotency store", broker.ErrInvalidOption)
	}
	cfg := idemConfig{
		key:             func(m *broker.Message) string { return m.ID },
		inProgressDelay: broker.DefaultInProgressDelay,
		logger:          slog.Default(),
	}
	for _, o := range opts {
		if o == nil {
			return nil, fmt.Errorf("%w: nil idempotency option", broker.ErrInvalidOption)
		}
		if err := o(&cfg); err != nil {
			return nil, err
		}
	}
	once, err := NewOnce(store, OnceConfig{Logger: cfg.logger})
	if err != nil {
		return nil, err
	}
	g := &idemGuard{once: once, cfg: cfg}
	return g.wrap, nil
}

type idemGuard struct {
	once *Once
	cfg  idemConfig
}

// errDeclined is Do's error for a handler that did not accept: the key is
// let go, and the handler's own ack is what the consumer gets.
var errDeclined = errors.New("the handler did not accept")

func (g *idemGuard) wrap(next broker.Handler) broker.Handler {
	return func(ctx context.Context, m *broker.Message) broker.Ack {
		key := g.cfg.key(m)
		if key == "" {
			return broker.Reject(fmt.Errorf("%w (message %q)", ErrNoIdempotencyKey, m.ID))
		}
		var (
			handled, passed broker.Ack
			carried         bool
		)
		d := Run(ctx, g.once, Unit[guardedHop]{
			Key: key,
			Do: func(ctx context.Context) (guardedHop, error) {
				gd := &guarded{}
				if handled = next(withGuarded(ctx, gd), m); handled.Outcome() != broker.OutcomeAccept {
					return guardedHop{}, errDeclined
				}
				return gd.hop, nil
			},
			Encode: guardedHop.encode,
			Decode: decodeGuardedHop,
			CarryOut: func(ctx context.Context, h guardedHop) error {
				carried = true
				switch {
				case h.out == nil:
					passed = handled
				case h.send != nil:
					passed = h.send(ctx, *h.out)
				default:
					// Kept by an earlier delivery: the follower sends it again,
					// since the guard holds no connection.
					passed = next(withGuarded(ctx, &guarded{resend: h.out}), m)
				}
				if passed.Outcome() != broker.OutcomeAccept {
					return errDeclined
				}
				return nil
			},
		})
		switch {
		case d.Lost || d.Claim == ClaimInProgress:
			return broker.InProgress(g.cfg.inProgressDelay).As(broker.OutcomeLabelInProgress)
		case d.Failed:
			return handled
		case d.Unreadable:
			return broker.Reject(broker.Fatal(&HopError{To: "?", Err: d.Err}))
		case d.Err != nil && !carried:
			return broker.Retry(fmt.Errorf("idempotency: %w", d.Err))
		case d.Claim == ClaimDuplicate && !d.Kept:
			return broker.Accept().As(IdempotencyOutcomeDuplicate)
		case d.Err != nil:
			return passed
		}
		g.once.Confirm(ctx, key)
		if d.Resent {
			return passed.As(IdempotencyOutcomeDuplicate)
		}
		return passed
	}
}
