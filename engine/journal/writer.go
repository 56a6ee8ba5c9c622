package journal

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"sync"
	"time"
)

// Defaults of WriterConfig.
const (
	DefaultQueue     = 10_000
	DefaultMaxBatch  = 500
	DefaultMaxLinger = 3 * time.Millisecond
)

// lingerWorthIt is the shortest write worth waiting to share: a journal
// that writes faster (in memory) has no cost per batch to save.
const lingerWorthIt = 200 * time.Microsecond

// ErrWriterClosed: the writer was closed.
var ErrWriterClosed = errors.New("journal writer closed")

// WriterConfig configures a Writer; the zero value is the defaults.
type WriterConfig struct {
	// Queue is how many Records may wait to be written (0 = 10,000);
	// past it, Record waits: backpressure rather than memory without
	// bound.
	Queue int
	// MaxBatch is the most events one Record of the journal carries
	// (0 = 500).
	MaxBatch int
	// MaxLinger bounds how long a batch waits for more events before it
	// is written (0 = 3 ms; negative: never). It waits only while events
	// come from several callers at once (the last batch had more than
	// one) and the journal's last write took 200 µs or more, and then no
	// longer than that write took: a journal with a cost per write (a
	// commit) writes batches about twice as large under load, so about
	// half as many, while the events of a lone caller are written at once.
	MaxLinger time.Duration
	// Logger hears about failed writes (nil = slog.Default()).
	Logger *slog.Logger
	// Keeper writes what units of work keep under their keys (Keep,
	// Confirm) with the events of the batch they are in; nil = the writer
	// records events only.
	Keeper Keeper
}

// Writer writes events to a journal off the caller's path: Record queues
// them and returns, one goroutine writes them in batches of whatever is
// waiting. Nothing queued is ever dropped: a batch the journal refuses is
// tried again, with backoff, until it is written or the writer is closed
// past its deadline, which reports how many events were not written.
type Writer struct {
	j   Journal
	cfg WriterConfig
	log *slog.Logger

	queue   chan item
	closing chan struct{}
	stop    chan struct{}
	stopped chan struct{}
	once    sync.Once

	mu       sync.RWMutex
	closed   bool
	closeCtx context.Context
	lost     int
}

// item is the events (and kept keys: Keep, Confirm) of one call on their
// way (written in one batch, so that a reader never sees some of them
// without the others), or a waiter that wants to hear once everything
// queued before it is written (nil) or could not be (an error).
type item struct {
	events []Event
	kept   []Kept
	done   chan error
	// lazy items (Confirm) wait for the next batch that has something
	// else to write, for at most confirmDelay.
	lazy bool
}

// confirmDelay bounds how long a confirmation (Confirm) waits for a batch
// to go with: under load there is always one, and alone it costs a write
// of its own.
const confirmDelay = 20 * time.Millisecond

// batch is what one write of the journal carries.
type batch struct {
	events []Event
	kept   []Kept
	// calls counts the calls (Record, Keep, Confirm) the batch holds, and
	// eager those that are not lazy.
	calls, eager int
}

// size is how much of MaxBatch the batch takes.
func (b *batch) size() int { return len(b.events) + len(b.kept) }

func (b *batch) reset() { b.events, b.kept, b.calls, b.eager = b.events[:0], b.kept[:0], 0, 0 }

// NewWriter starts a writer for j. Close it to flush and stop it.
func NewWriter(j Journal, cfg WriterConfig) (*Writer, error) {
	if j == nil {
		return nil, errors.New("journal writer: nil journal")
	}
	if cfg.Queue < 0 || cfg.MaxBatch < 0 {
		return nil, fmt.Errorf("journal writer: negative queue %d or batch %d", cfg.Queue, cfg.MaxBatch)
	}
	if cfg.Queue == 0 {
		cfg.Queue = DefaultQueue
	}
	if cfg.MaxBatch == 0 {
		cfg.MaxBatch = DefaultMaxBatch
	}
	if cfg.MaxLinger == 0 {
		cfg.MaxLinger = DefaultMaxLinger
	}
	if cfg.Logger == nil {
		cfg.Logger = slog.Default()
	}
	w := &Writer{j: j, cfg: cfg, log: cfg.Logger, queue: make(chan item, cfg.Queue),
		closing: make(chan struct{}), stop: make(chan struct{}), stopped: make(chan struct{})}
	go w.loop()
	return w, nil
}

// Journal is the journal the writer writes to, for reading.
func (w *Writer) Journal() Journal { return w.j }

// Record queues events to be written together, in one batch, waiting
// (bounded by ctx) while the queue is full. It returns ErrWriterClosed
// once Close has begun, also to a caller that was waiting for room.
func (w *Writer) Record(ctx context.Context, events ...Event) error {
	if len(events) == 0 {
		return nil
	}
	return w.queueItem(ctx, item{events: events})
}

// queueItem queues it, waiting (bounded by ctx) while the queue is full.
func (w *Writer) queueItem(ctx context.Context, it item) error {
	w.mu.RLock()
	defer w.mu.RUnlock()
	if w.closed {
		return ErrWriterClosed
	}
	select {
	case w.queue <- it:
		return nil
	case <-w.closing:
		return ErrWriterClosed
	case <-ctx.Done():
		return fmt.Errorf("journal: queue full: %w", ctx.Err())
	}
}

// RecordSync queues events and waits until they, and everything queued
// before them, are written: for the events a run must not be without
// (that it failed, that it ended), bounded by ctx.
func (w *Writer) RecordSync(ctx context.Context, events ...Event) error {
	if err := w.Record(ctx, events...); err != nil {
		return err
	}
	return w.Flush(ctx)
}

// Flush waits until everything queued so far is written, bounded by ctx.
func (w *Writer) Flush(ctx context.Context) error {
	done := make(chan error, 1)
	w.mu.RLock()
	if w.closed {
		w.mu.RUnlock()
		return ErrWriterClosed
	}
	select {
	case w.queue <- item{done: done}:
	case <-w.closing:
		w.mu.RUnlock()
		return ErrWriterClosed
	case <-ctx.Done():
		w.mu.RUnlock()
		return fmt.Errorf("journal: flush: %w", ctx.Err())
	}
	w.mu.RUnlock()
	select {
	case err := <-done:
		return err
	case <-ctx.Done():
		return fmt.Errorf("journal: flush: %w", ctx.Err())
	}
}

// Close stops taking events and writes what is queued, bounded by ctx; the
// error says how many events could not be written by then. Idempotent.
func (w *Writer) Close(ctx context.Context) error {
	w.once.Do(func() {
		// Release the callers waiting for room first: the lock below waits
		// for them, and a journal that stopped answering never makes room.
		close(w.closing)
		w.mu.Lock()
		w.closed = true
		w.closeCtx = ctx
		close(w.stop)
		w.mu.Unlock()
	})
	// The loop bounds what it still writes by the first Close's ctx.
	<-w.stopped
	if w.lost > 0 {
		return fmt.Errorf("journal: %d events were not written before the close deadline", w.lost)
	}
	return nil
}

func (w *Writer) loop() {
	defer close(w.stopped)
	b := &batch{events: make([]Event, 0, w.cfg.MaxBatch)}
	var waiters []chan error
	var lastWrite time.Duration
	var lastCalls int
	timer := time.NewTimer(time.Hour)
	timer.Stop()
	for {
		select {
		case it := <-w.queue:
			waiters = w.take(it, b, waiters)
		case <-w.stop:
			w.drain(b, waiters)
			return
		}
		// Take whatever else is already waiting, up to a batch.
	more:
		for b.size() < w.cfg.MaxBatch {
			select {
			case it := <-w.queue:
				waiters = w.take(it, b, waiters)
			default:
				break more
			}
		}
		if b.eager == 0 && len(waiters) == 0 && b.size() < w.cfg.MaxBatch {
			// Only confirmations: they wait for something to go with.
			timer.Reset(confirmDelay)
			waiters = w.gather(timer.C, b, waiters, true)
			timer.Stop()
		}
		if d := w.linger(lastWrite, lastCalls); d > 0 && b.size() > 0 && b.size() < w.cfg.MaxBatch {
			timer.Reset(d)
			waiters = w.gather(timer.C, b, waiters, false)
			timer.Stop()
		}
		lastCalls = b.calls
		began := time.Now()
		if !w.write(b) {
			w.drain(b, waiters)
			return
		}
		lastWrite = time.Since(began)
		for _, d := range waiters {
			d <- nil
		}
		b.reset()
		waiters = waiters[:0]
	}
}

// linger is how long the next batch waits for more events, given how long
// the last write took and how many events it carried (see MaxLinger).
func (w *Writer) linger(lastWrite time.Duration, lastCalls int) time.Duration {
	if w.cfg.MaxLinger < 0 || lastCalls < 2 || lastWrite < lingerWorthIt {
		return 0
	}
	return min(lastWrite, w.cfg.MaxLinger)
}

// gather adds what arrives to b until it is full, until expired fires,
// or until the writer is stopped (the loop then drains); with
// confirmations, also once something that is not lazy arrives (or a
// waiter): a batch of confirmations waits for that.
func (w *Writer) gather(expired <-chan time.Time, b *batch, waiters []chan error, confirmations bool) []chan error {
	for b.size() < w.cfg.MaxBatch && (!confirmations || b.eager == 0 && len(waiters) == 0) {
		select {
		case it := <-w.queue:
			waiters = w.take(it, b, waiters)
		case <-expired:
			return waiters
		case <-w.stop:
			return waiters
		}
	}
	return waiters
}

func (w *Writer) take(it item, b *batch, waiters []chan error) []chan error {
	if it.done != nil {
		return append(waiters, it.done)
	}
	b.events = append(b.events, it.events...)
	b.kept = append(b.kept, it.kept...)
	b.calls++
	if !it.lazy {
		b.eager++
	}
	return waiters
}

// record writes b once: its events, and what it keeps with them through
// the Keeper.
func (w *Writer) record(ctx context.Context, b *batch) error {
	if len(b.kept) > 0 {
		return w.cfg.Keeper.RecordKept(ctx, w.j, b.events, b.kept)
	}
	return w.j.Record(ctx, b.events)
}

// write writes b, trying again with backoff until it is written; it
// returns false when the writer was closed while it kept failing (the
// batch is then still to write).
func (w *Writer) write(b *batch) bool {
	if b.size() == 0 {
		return true
	}
	backoff := 50 * time.Millisecond
	for {
		ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
		err := w.record(ctx, b)
		cancel()
		if err == nil {
			return true
		}
		if errors.Is(err, ErrInvalidEvent) {
			// It would be refused for ever: set the bad events aside and
			// write the rest.
			if b.events = w.setAside(b.events); b.size() == 0 {
				return true
			}
			continue
		}
		w.log.Warn("journal write failed; trying again", slog.Int("events", len(b.events)), slog.Int("kept", len(b.kept)),
			slog.Duration("in", backoff), slog.Any("error", err))
		select {
		case <-time.After(backoff):
		case <-w.stop:
			return false
		}
		backoff = min(backoff*2, 5*time.Second)
	}
}

// setAside drops from batch the events no journal can keep, logging each.
func (w *Writer) setAside(batch []Event) []Event {
	kept := batch[:0]
	for _, e := range batch {
		if err := e.Validate(); err != nil {
			w.log.Error("journal event set aside: no journal can keep it", slog.Any("error", err))
			continue
		}
		kept = append(kept, e)
	}
	return kept
}

// drain writes what is left once the writer is closed, the batch in hand
// and everything queued, trying again until Close's deadline.
func (w *Writer) drain(b *batch, waiters []chan error) {
	ctx := w.closeCtx
	backoff := 50 * time.Millisecond
	for {
	more:
		for b.size() < w.cfg.MaxBatch {
			select {
			case it := <-w.queue:
				waiters = w.take(it, b, waiters)
			default:
				break more
			}
		}
		if b.size() == 0 {
			break
		}
		err := w.record(ctx, b)
		if err == nil {
			b.reset()
			continue
		}
		if errors.Is(err, ErrInvalidEvent) {
			b.events = w.setAside(b.events)
			continue
		}
		select {
		case <-time.After(backoff):
			backoff = min(backoff*2, time.Second)
			continue
		case <-ctx.Done():
		}
		// Count what is still queued too: nothing takes it any more.
		w.lost = b.size()
	rest:
		for {
			select {
			case it := <-w.queue:
				w.lost += len(it.events) + len(it.kept)
				if it.done != nil {
					waiters = append(waiters, it.done)
				}
			default:
				break rest
			}
		}
		w.log.Error("journal events not written before the close deadline", slog.Int("events", w.lost), slog.Any("error", err))
		break
	}
	var err error
	if w.lost > 0 {
		err = fmt.Errorf("journal: %d events not written before the close deadline", w.lost)
	}
	for _, d := range waiters {
		d <- err
	}
}
