package benchmark

import (
	"context"
	"fmt"
	"slices"
	"sync"
	"sync/atomic"
	"time"
)

// Measurement is one side of a figure: how many operations (runs,
// requests, records, messages) in how long, how many messages they moved,
// the CPU time this process spent, and, where it was measured, the latency
// of each operation.
type Measurement struct {
	// Ops counts the operations the rate is of.
	Ops int `json:"ops"`
	// Messages counts the messages the operations moved (a flow run is
	// three, a request/reply round trip two): CPU is divided by it.
	Messages int `json:"messages"`
	// Elapsed is the wall time from the first operation to the last.
	Elapsed time.Duration `json:"elapsed"`
	// CPU is this process's user+system CPU time over Elapsed (0 where it
	// could not be read).
	CPU time.Duration `json:"cpu"`
	// Latencies are the operations' latencies, sorted (nil when not
	// measured).
	Latencies []time.Duration `json:"-"`
}

// Rate is operations per second.
func (m Measurement) Rate() float64 {
	if m.Elapsed <= 0 {
		return 0
	}
	return float64(m.Ops) / m.Elapsed.Seconds()
}

// CPUPerMessage is the CPU time per message moved, in microseconds (0 when
// unknown).
func (m Measurement) CPUPerMessage() float64 {
	if m.Messages == 0 {
		return 0
	}
	return float64(m.CPU.Nanoseconds()) / 1000 / float64(m.Messages)
}

// Percentile is the latency below which a fraction p (0.5, 0.99) of the
// operations finished; 0 without latencies.
func (m Measurement) Percentile(p float64) time.Duration {
	if len(m.Latencies) == 0 {
		return 0
	}
	return m.Latencies[min(len(m.Latencies)-1, int(p*float64(len(m.Latencies))))]
}

// and is m and o measured as one: their operations, messages, times and
// latencies added up.
func (m Measurement) and(o Measurement) Measurement {
	lat := append(append([]time.Duration(nil), m.Latencies...), o.Latencies...)
	slices.Sort(lat)
	return Measurement{Ops: m.Ops + o.Ops, Messages: m.Messages + o.Messages, Elapsed: m.Elapsed + o.Elapsed, CPU: m.CPU + o.CPU, Latencies: lat}
}

// Millis is d in milliseconds.
func Millis(d time.Duration) float64 { return float64(d.Nanoseconds()) / 1e6 }

// clock measures wall and CPU time from its start.
type clock struct {
	wall   time.Time
	cpu    time.Duration
	cpuSet bool
}

func startClock() clock {
	cpu, ok := processCPU()
	return clock{wall: time.Now(), cpu: cpu, cpuSet: ok}
}

// stop is the measurement of ops operations moving messages since the
// clock started.
func (c clock) stop(ops, messages int) Measurement {
	m := Measurement{Ops: ops, Messages: messages, Elapsed: time.Since(c.wall)}
	if cpu, ok := processCPU(); ok && c.cpuSet {
		m.CPU = cpu - c.cpu
	}
	return m
}

// latencies collects latencies from many goroutines.
type latencies struct {
	mu sync.Mutex
	d  []time.Duration
}

func newLatencies(n int) *latencies { return &latencies{d: make([]time.Duration, 0, n)} }

func (l *latencies) add(d time.Duration) {
	l.mu.Lock()
	l.d = append(l.d, d)
	l.mu.Unlock()
}

// sorted is what was collected, sorted.
func (l *latencies) sorted() []time.Duration {
	l.mu.Lock()
	defer l.mu.Unlock()
	out := slices.Clone(l.d)
	slices.Sort(out)
	return out
}

// stallTimeout is how long a measurement may make no progress before it is
// given up as stuck (a lost message, a consumer that died).
const stallTimeout = 60 * time.Second

// countdown counts operations finished by any goroutine, up to n.
type countdown struct {
	n    int64
	c    atomic.Int64
	done chan struct{}
}

func newCountdown(n int) *countdown { return &countdown{n: int64(n), done: make(chan struct{})} }

// add counts one finished operation; it never blocks.
func (c *countdown) add() {
	if c.c.Add(1) == c.n {
		close(c.done)
	}
}

// wait returns once n operations have finished, the first error from
// errc, ctx's error, or an error when nothing finished for stallTimeout.
// what names the operations in that error.
func (c *countdown) wait(ctx context.Context, errc <-chan error, what string) error {
	if c.n <= 0 {
		return nil
	}
	watch := time.NewTicker(stallTimeout)
	defer watch.Stop()
	last := int64(-1)
	for {
		select {
		case <-c.done:
			return nil
		case err := <-errc:
			return err
		case <-ctx.Done():
			return fmt.Errorf("%s: %d of %d done: %w", what, c.c.Load(), c.n, context.Cause(ctx))
		case <-watch.C:
			now := c.c.Load()
			if now == last {
				return fmt.Errorf("%s: stalled at %d of %d for %s", what, now, c.n, stallTimeout)
			}
			last = now
		}
	}
}

// feeder calls an operation n times from several goroutines.
type feeder struct {
	wg   sync.WaitGroup
	errc chan error
	stop context.CancelFunc
}

// feed starts workers goroutines calling op(ctx, i) for i = 0..n-1 until
// all are done, one fails (the first failure is sent on errc) or ctx ends.
// Call wait before returning.
func feed(ctx context.Context, n, workers int, op func(ctx context.Context, i int) error) *feeder {
	ctx, stop := context.WithCancel(ctx)
	f := &feeder{errc: make(chan error, 1), stop: stop}
	var next atomic.Int64
	for range workers {
		f.wg.Go(func() {
			for ctx.Err() == nil {
				i := next.Add(1) - 1
				if i >= int64(n) {
					return
				}
				if err := op(ctx, int(i)); err != nil {
					select {
					case f.errc <- err:
					default:
					}
					stop()
					return
				}
			}
		})
	}
	return f
}

// wait stops the feed (if it is still going) and waits for its goroutines.
func (f *feeder) wait() {
	f.stop()
	f.wg.Wait()
}

// runFeed feeds n operations and waits for all of them, returning the
// first error.
func runFeed(ctx context.Context, n, workers int, op func(ctx context.Context, i int) error) error {
	f := feed(ctx, n, workers, op)
	f.wg.Wait()
	f.stop()
	select {
	case err := <-f.errc:
		return err
	default:
		return ctx.Err()
	}
}

// measureCalls times n operations that are done when op returns (a
// confirmed publish, a round trip), called from workers goroutines: the
// clock runs from the first call until every call has returned, and the
// measurement counts messages moved. lat (nil = none) holds latencies op
// added, sorted into the measurement.
func measureCalls(ctx context.Context, n, messages, workers int, lat *latencies,
	op func(ctx context.Context, i int) error) (Measurement, error) {
	c := startClock()
	err := runFeed(ctx, n, workers, op)
	m := c.stop(n, messages)
	if lat != nil {
		m.Latencies = lat.sorted()
	}
	return m, err
}

// measureCounted times n operations that op starts from workers goroutines
// and that finish elsewhere (a consumer calls done.add): the clock stops
// once done has counted n, or when the feed or the wait fails (what names
// the operations in that error); then the feed stops and its goroutines
// are waited for. The measurement counts messages moved, and lat's
// latencies (nil = none), sorted.
func measureCounted(ctx context.Context, n, messages, workers int, done *countdown, lat *latencies, what string,
	op func(ctx context.Context, i int) error) (Measurement, error) {
	c := startClock()
	fd := feed(ctx, n, workers, op)
	err := done.wait(ctx, fd.errc, what)
	m := c.stop(n, messages)
	fd.wait()
	if lat != nil {
		m.Latencies = lat.sorted()
	}
	return m, err
}

// window bounds how many operations are under way: acquire before one
// starts, release when it has finished.
type window chan struct{}

func newWindow(n int) window { return make(window, n) }

// acquire waits for room, or for ctx to end.
func (w window) acquire(ctx context.Context) error {
	select {
	case w <- struct{}{}:
		return nil
	case <-ctx.Done():
		return ctx.Err()
	}
}

// release makes room for one more; it never blocks.
func (w window) release() {
	select {
	case <-w:
	default:
	}
}
