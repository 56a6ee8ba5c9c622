package patterns

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"sync"
	"time"

	"github.com/acemq/acemq-flow/broker"
)

// Defaults of OutboxRelayConfig.
const (
	DefaultOutboxInterval       = time.Second
	DefaultOutboxBatchSize      = 100
	DefaultOutboxInFlight       = 1
	DefaultOutboxPublishTimeout = 30 * time.Second
)

// outboxListenBackoff is the first wait before listening again after a
// store's listener failed; it doubles up to the relay's interval.
const outboxListenBackoff = 100 * time.Millisecond

// OutboxRelayConfig configures an OutboxRelay. The zero value is the
// defaults; Validate says what is wrong with one that is not usable.
type OutboxRelayConfig struct {
	// Interval is how often the relay sweeps when nothing wakes it sooner
	// (0 = 1 s). With a store that notifies (OutboxNotifier) it is the
	// fallback for a notification that was lost.
	Interval time.Duration
	// BatchSize is how many records one claim takes (0 = 100).
	BatchSize int
	// InFlight is how many publishes of a batch wait for their confirm at
	// once (0 = 1). With 1, records reach the broker strictly in the order
	// they were added. Above 1 the relay is much faster but the records of
	// one batch may reach the broker in any order among themselves; batches
	// still follow each other in order (see OutboxRelay).
	InFlight int
	// PublishTimeout bounds one publish and its confirm (0 = 30 s).
	PublishTimeout time.Duration
	// OnError hears every failure of a sweep: the error, and where the
	// record was going (both empty when the store itself failed). It is
	// called from the relay's goroutine and must not block for long.
	OnError func(err error, dest OutboxDestination)
	// Logger receives the relay's logs (nil = the connection's logger).
	Logger *slog.Logger
}

// Validate refuses negative values.
func (c OutboxRelayConfig) Validate() error {
	switch {
	case c.Interval < 0, c.PublishTimeout < 0:
		return fmt.Errorf("%w: outbox relay: negative duration", broker.ErrInvalidOption)
	case c.BatchSize < 0:
		return fmt.Errorf("%w: outbox relay: batch size %d, want at least 1 (or 0 for the default)", broker.ErrInvalidOption, c.BatchSize)
	case c.InFlight < 0:
		return fmt.Errorf("%w: outbox relay: in-flight %d, want at least 1 (or 0 for the default)", broker.ErrInvalidOption, c.InFlight)
	}
	return nil
}

func (c OutboxRelayConfig) withDefaults(conn *broker.Conn) OutboxRelayConfig {
	if c.Interval == 0 {
		c.Interval = DefaultOutboxInterval
	}
	if c.BatchSize == 0 {
		c.BatchSize = DefaultOutboxBatchSize
	}
	if c.InFlight == 0 {
		c.InFlight = DefaultOutboxInFlight
	}
	if c.PublishTimeout == 0 {
		c.PublishTimeout = DefaultOutboxPublishTimeout
	}
	if c.Logger == nil {
		c.Logger = conn.Logger()
	}
	return c
}

// OutboxRelay publishes what an OutboxStore holds. It is deliberately
// at-least-once: a record is removed only after the broker confirmed it, so
// a crash in between sends it again, and consumers of anything sent this
// way need to be idempotent (see Idempotent).
//
// Every record is published mandatory, whatever the record says: a record
// nothing is bound to receive is a failed publish, not one the broker
// confirms and drops.
//
// # Order
//
// A sweep claims a batch of the oldest records, publishes it, and marks as
// published the records up to the first failure, in order. A failure stops
// the batch: the failed record and everything after it stay in the outbox
// (released for the next sweep, which starts again from the failed record),
// even records after it that the broker had already confirmed, which are
// therefore published again. Stepping over a failing record to publish the
// next would invent a reordering nobody asked for. With InFlight 1 records
// reach the broker in the order they were added; with more, in batch order
// but in any order within a batch. The stores shipped here let one relay
// at a time claim (others stand by until its leases expire), so several
// relays over one outbox keep that order between them.
//
// A failure the broker answered (returned, nacked, a channel error, a
// message it can never take) counts an attempt on an OutboxFailureMarker;
// a failure whose outcome is unknown (connection lost, timeout) does not,
// so that an outage does not use up every record's attempts. A record
// refused its maximum number of times is no longer claimed and stays for
// inspection: that is where order gives way, on purpose, so that one poison
// record cannot hold back every record after it for ever.
//
// With a store that can claim ahead (OutboxLookahead and OutboxReleaser,
// as both stores shipped here can), the relay claims each next batch while
// the current one waits for its confirms. It publishes that batch only once
// the current one is settled, and gives it back unpublished when the
// current one fails or the relay is closing: the claim costs no time of its
// own, and nothing above changes.
//
// With a store that can renew leases (OutboxLeaseExtender, as both stores
// shipped here can), the relay renews the leases of the records it holds
// while it publishes them, so a batch slower than a lease is not taken
// over by another relay halfway; a relay that dies stops renewing, and its
// records are taken over once their leases run out.
//
// Start runs sweeps in the background every Interval, and at once whenever
// a notifying store says a record was added; Sweep runs one now.
type OutboxRelay struct {
	conn      *broker.Conn
	store     OutboxStore
	marker    OutboxFailureMarker
	releaser  OutboxReleaser
	lookahead OutboxLookahead
	extender  OutboxLeaseExtender
	cfg       OutboxRelayConfig
	log       *slog.Logger

	sweepMu sync.Mutex
	wake    chan struct{}
	stop    chan struct{}

	mu           sync.Mutex
	started      bool
	closed       bool
	cancelRun    context.CancelFunc
	cancelListen context.CancelFunc
	wg           sync.WaitGroup
}

// NewOutboxRelay returns a relay, not started, publishing store's records
// on conn. It refuses a nil conn or store and an invalid config.
func NewOutboxRelay(conn *broker.Conn, store OutboxStore, cfg OutboxRelayConfig) (*OutboxRelay, error) {
	if conn == nil || store == nil {
		return nil, fmt.Errorf("%w: outbox relay needs a connection and a store", broker.ErrInvalidOption)
	}
	if err := cfg.Validate(); err != nil {
		return nil, err
	}
	cfg = cfg.withDefaults(conn)
	r := &OutboxRelay{
		conn:  conn,
		store: store,
		cfg:   cfg,
		log:   cfg.Logger,
		wake:  make(chan struct{}, 1),
		stop:  make(chan struct{}),
	}
	r.marker, _ = store.(OutboxFailureMarker)
	r.releaser, _ = store.(OutboxReleaser)
	r.lookahead, _ = store.(OutboxLookahead)
	r.extender, _ = store.(OutboxLeaseExtender)
	return r, nil
}

// Start runs the relay in the background until Close, or until ctx is
// done. Cancelling ctx stops it abruptly (a sweep in progress is abandoned
// and its unmarked records are published again later); Close stops it
// gracefully. Start refuses a relay already started (ErrOutboxRelayStarted)
// or closed (ErrOutboxRelayClosed).
func (r *OutboxRelay) Start(ctx context.Context) error {
	r.mu.Lock()
	defer r.mu.Unlock()
	switch {
	case r.closed:
		return ErrOutboxRelayClosed
	case r.started:
		return ErrOutboxRelayStarted
	}
	r.started = true
	runCtx, cancelRun := context.WithCancel(ctx)
	listenCtx, cancelListen := context.WithCancel(runCtx)
	r.cancelRun, r.cancelListen = cancelRun, cancelListen
	r.wg.Go(func() { r.loop(runCtx) })
	if n, ok := r.store.(OutboxNotifier); ok {
		r.wg.Go(func() { r.listen(listenCtx, n) })
	}
	return nil
}

// Close stops the relay: no new sweep starts, and the one in progress
// finishes its current batch, bounded by ctx; at ctx's deadline it is
// cancelled and Close returns an error. Records it did not mark are
// published again by the next relay. Idempotent; a relay never started
// closes at once.
func (r *OutboxRelay) Close(ctx context.Context) error {
	r.mu.Lock()
	if r.closed {
		r.mu.Unlock()
		return nil
	}
	r.closed = true
	started := r.started
	r.mu.Unlock()
	close(r.stop)
	if !started {
		return nil
	}
	r.cancelListen()
	done := make(chan struct{})
	go func() {
		r.wg.Wait()
		close(done)
	}()
	defer r.cancelRun()
	select {
	case <-done:
		return nil
	case <-ctx.Done():
		r.cancelRun()
		<-done
		return fmt.Errorf("outbox relay: close: a sweep was still running at the deadline: %w", ctx.Err())
	}
}

// Sweep publishes what is pending now, batch after batch, until the store
// has nothing more to give or a batch fails, and says how many records it
// published. An application can flush its outbox at the end of a request
// with it, and a test can drive a relay that was never started. It returns
// what the broker or the store said, so a flush fails loudly. Sweeps of
// one relay never overlap: a Sweep waits for the background one.
func (r *OutboxRelay) Sweep(ctx context.Context) (int, error) {
	return r.sweep(ctx, nil)
}

func (r *OutboxRelay) loop(ctx context.Context) {
	t := time.NewTicker(r.cfg.Interval)
	defer t.Stop()
	for {
		// Errors were reported (logged, OnError) where they happened.
		_, _ = r.sweep(ctx, r.stop)
		select {
		case <-r.stop:
			return
		case <-ctx.Done():
			return
		case <-t.C:
		case <-r.wake:
		}
	}
}

// poke asks the loop for a sweep without waiting; wakes that arrive while
// one is pending merge into it.
func (r *OutboxRelay) poke() {
	select {
	case r.wake <- struct{}{}:
	default:
	}
}

func (r *OutboxRelay) listen(ctx context.Context, n OutboxNotifier) {
	backoff := outboxListenBackoff
	for {
		err := n.Listen(ctx, r.poke)
		if ctx.Err() != nil {
			return
		}
		if errors.Is(err, ErrOutboxCannotListen) {
			r.log.Info("outbox relay: the store cannot listen; polling only", slog.Duration("interval", r.cfg.Interval), slog.Any("reason", err))
			return
		}
		r.report(ctx, fmt.Errorf("outbox relay: listen for new records: %w", err), OutboxDestination{})
		select {
		case <-ctx.Done():
			return
		case <-time.After(backoff):
		}
		backoff = min(backoff*2, max(r.cfg.Interval, outboxListenBackoff))
	}
}

// report logs a sweep's failure and hands it to OnError.
func (r *OutboxRelay) report(ctx context.Context, err error, dest OutboxDestination) {
	r.log.WarnContext(ctx, "outbox relay", slog.Any("error", err),
		slog.String("exchange", dest.Exchange), slog.String("routing_key", dest.RoutingKey))
	if r.cfg.OnError != nil {
		r.cfg.OnError(err, dest)
	}
}
