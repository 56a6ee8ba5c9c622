package patterns

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"sync/atomic"
	"time"

	"github.com/acemq/acemq-flow/broker"
)

// outboxStoreTimeout bounds the store calls that settle a batch. They run
// detached from the sweep's cancellation: records the broker confirmed
// should still be marked when the relay is being closed.
const outboxStoreTimeout = 10 * time.Second

// errOutboxNotSent stands for the records after a failure that the sweep did
// not publish at all.
var errOutboxNotSent = errors.New("not sent: an earlier record of the batch failed")

// sweep runs batches until one comes back short, one fails, or stop closes.
// With a store that can claim ahead (see claimAhead), the claim of each next
// batch overlaps the publishing of the current one.
func (r *OutboxRelay) sweep(ctx context.Context, stop <-chan struct{}) (int, error) {
	r.sweepMu.Lock()
	defer r.sweepMu.Unlock()
	leases := r.keepLeases(ctx)
	defer leases.stop()
	recs, err := r.claim(ctx)
	leases.hold(recs)
	total := 0
	for err == nil && len(recs) > 0 {
		full := len(recs) == r.cfg.BatchSize
		var ahead <-chan outboxClaim
		if full && !stopped(stop) {
			ahead = r.claimAhead(ctx, recs, leases)
		}
		n, berr := r.batch(ctx, recs)
		leases.drop(recs)
		total += n
		var next outboxClaim
		if ahead != nil {
			next = <-ahead
		}
		if berr != nil || !full || stopped(stop) {
			// The batch looked ahead of goes back unpublished.
			r.release(ctx, next.recs)
			leases.drop(next.recs)
			return total, berr
		}
		if next.err == nil && len(next.recs) > 0 {
			recs = next.recs
			continue
		}
		// Nothing ahead, or the look-ahead failed: claim the usual way,
		// which also says what is wrong if the store is.
		recs, err = r.claim(ctx)
		leases.hold(recs)
	}
	return total, err
}

// outboxClaim is the outcome of a claim made ahead.
type outboxClaim struct {
	recs []OutboxRecord
	err  error
}

// claimAhead claims, in the background, the batch after held when the store
// can (OutboxLookahead and OutboxReleaser); it returns nil otherwise. The
// sweep receives exactly once from the channel it returns.
func (r *OutboxRelay) claimAhead(ctx context.Context, held []OutboxRecord, leases *outboxLeases) <-chan outboxClaim {
	if r.lookahead == nil || r.releaser == nil {
		return nil
	}
	ch := make(chan outboxClaim, 1)
	ids := outboxIDs(held)
	go func() {
		recs, err := r.lookahead.PendingAfter(ctx, ids, r.cfg.BatchSize)
		leases.hold(recs)
		ch <- outboxClaim{recs: recs, err: err}
	}()
	return ch
}

// claim claims the next batch, reporting a failure.
func (r *OutboxRelay) claim(ctx context.Context) ([]OutboxRecord, error) {
	recs, err := r.store.Pending(ctx, r.cfg.BatchSize)
	if err != nil {
		err = fmt.Errorf("outbox relay: claim pending records: %w", err)
		r.report(ctx, err, OutboxDestination{})
		return nil, err
	}
	return recs, nil
}

func stopped(stop <-chan struct{}) bool {
	select {
	case <-stop:
		return true
	default:
		return false
	}
}

// batch publishes and settles one claimed batch, and says how many records
// it published.
func (r *OutboxRelay) batch(ctx context.Context, recs []OutboxRecord) (published int, err error) {
	results := r.publishAll(ctx, recs)
	k := 0
	for k < len(recs) && results[k] == nil {
		k++
	}
	sctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), outboxStoreTimeout)
	defer cancel()
	if k > 0 {
		if err := r.store.MarkPublished(sctx, outboxIDs(recs[:k])...); err != nil {
			err = fmt.Errorf("outbox relay: mark %d confirmed records published (they will be published again): %w", k, err)
			r.report(ctx, err, OutboxDestination{})
			r.release(ctx, recs)
			return 0, err
		}
	}
	if k == len(recs) {
		return k, nil
	}
	failed, cause := recs[k], results[k]
	perr := fmt.Errorf("outbox relay: publish record %s to %s: %w", failed.ID, outboxDescribe(failed.Destination()), cause)
	rest := recs[k+1:]
	if r.marker != nil && broker.Refused(cause) {
		if err := r.marker.MarkFailed(sctx, failed.ID, cause); err != nil {
			r.report(ctx, fmt.Errorf("outbox relay: count the failed attempt of record %s: %w", failed.ID, err), OutboxDestination{})
		}
	} else {
		rest = recs[k:]
	}
	r.release(ctx, rest)
	r.report(ctx, perr, failed.Destination())
	return k, perr
}

// publishAll publishes recs with up to InFlight confirms outstanding and
// returns each one's outcome, index for index. After the first failure no
// further record is started.
func (r *OutboxRelay) publishAll(ctx context.Context, recs []OutboxRecord) []error {
	results := make([]error, len(recs))
	slots := make(chan struct{}, r.cfg.InFlight)
	var failed atomic.Bool
	var wg sync.WaitGroup
	for i := range recs {
		select {
		case slots <- struct{}{}:
		case <-ctx.Done():
		}
		if ctx.Err() != nil || failed.Load() {
			for j := i; j < len(recs); j++ {
				results[j] = errOutboxNotSent
			}
			if ctx.Err() != nil {
				results[i] = ctx.Err()
			}
			break
		}
		wg.Go(func() {
			defer func() { <-slots }()
			if err := r.publish(ctx, recs[i]); err != nil {
				results[i] = err
				failed.Store(true)
			}
		})
	}
	wg.Wait()
	return results
}

func (r *OutboxRelay) publish(ctx context.Context, rec OutboxRecord) error {
	ctx, cancel := context.WithTimeout(ctx, r.cfg.PublishTimeout)
	defer cancel()
	out := rec.Outgoing
	out.Mandatory = true
	return r.conn.Send(ctx, out)
}

// release gives back the leases of records the sweep did not finish, so
// that the next sweep starts again from the first of them. It runs
// detached from ctx's cancellation (a closing relay still gives its leases
// back), bounded by outboxStoreTimeout.
func (r *OutboxRelay) release(ctx context.Context, recs []OutboxRecord) {
	if r.releaser == nil || len(recs) == 0 {
		return
	}
	sctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), outboxStoreTimeout)
	defer cancel()
	if err := r.releaser.Release(sctx, outboxIDs(recs)...); err != nil {
		r.report(ctx, fmt.Errorf("outbox relay: release %d records (they wait for their lease to expire): %w", len(recs), err), OutboxDestination{})
	}
}

func outboxIDs(recs []OutboxRecord) []string {
	ids := make([]string, len(recs))
	for i, r := range recs {
		ids[i] = r.ID
	}
	return ids
}

func outboxDescribe(d OutboxDestination) string {
	if d.Exchange == "" {
		return fmt.Sprintf("the default exchange with routing key %q", d.RoutingKey)
	}
	return fmt.Sprintf("exchange %q with routing key %q", d.Exchange, d.RoutingKey)
}
