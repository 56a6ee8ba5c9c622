package patterns

import (
	"context"
	"fmt"
	"sync"
	"time"
)

// outboxLeases renews, every Lease/3, the leases of the records a sweep
// holds (its current batch and the one claimed ahead), so that a batch
// slower than a lease is not taken over halfway. It is owned by one sweep:
// start it with keepLeases, stop it with stop.
type outboxLeases struct {
	r     *OutboxRelay
	store OutboxLeaseExtender

	mu   sync.Mutex
	held map[string]struct{}

	done chan struct{}
	wg   sync.WaitGroup
}

// keepLeases starts renewing leases for a sweep; it returns nil (whose
// methods do nothing) when the store cannot extend them.
func (r *OutboxRelay) keepLeases(ctx context.Context) *outboxLeases {
	if r.extender == nil || r.extender.Lease() <= 0 {
		return nil
	}
	l := &outboxLeases{r: r, store: r.extender, held: map[string]struct{}{}, done: make(chan struct{})}
	l.wg.Go(func() { l.run(ctx) })
	return l
}

func (l *outboxLeases) run(ctx context.Context) {
	t := time.NewTicker(max(l.store.Lease()/3, time.Millisecond))
	defer t.Stop()
	for {
		select {
		case <-l.done:
			return
		case <-t.C:
		}
		ids := l.ids()
		if len(ids) == 0 {
			continue
		}
		sctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), outboxStoreTimeout)
		err := l.store.Extend(sctx, ids...)
		cancel()
		if err != nil {
			l.r.report(ctx, fmt.Errorf("outbox relay: renew the leases of %d records (another relay may take them over): %w", len(ids), err), OutboxDestination{})
		}
	}
}

func (l *outboxLeases) ids() []string {
	l.mu.Lock()
	defer l.mu.Unlock()
	ids := make([]string, 0, len(l.held))
	for id := range l.held {
		ids = append(ids, id)
	}
	return ids
}

// hold adds recs to the records renewed.
func (l *outboxLeases) hold(recs []OutboxRecord) {
	if l == nil {
		return
	}
	l.mu.Lock()
	defer l.mu.Unlock()
	for _, rec := range recs {
		l.held[rec.ID] = struct{}{}
	}
}

// drop stops renewing recs: they were marked or released.
func (l *outboxLeases) drop(recs []OutboxRecord) {
	if l == nil {
		return
	}
	l.mu.Lock()
	defer l.mu.Unlock()
	for _, rec := range recs {
		delete(l.held, rec.ID)
	}
}

// stop ends the renewals and waits for the one in progress.
func (l *outboxLeases) stop() {
	if l == nil {
		return
	}
	close(l.done)
	l.wg.Wait()
}
