// Package fakeclock is a clock that stands still until it is moved: the
// clock of package engine/flowtest, and of the tests of the broker and
// the loopback that need time to pass at once.
package fakeclock

import (
	"container/heap"
	"sync"
	"time"
)

// Clock stands still until it is moved (Fire, Set), and its timers fire
// only then, one at a time, on the goroutine that moves it, which waits
// for each. It is a broker.Clock and a loopback.Clock. Safe for
// concurrent use.
type Clock struct {
	mu     sync.Mutex
	now    time.Time
	seq    uint64
	timers timers
}

// New is a clock standing at start.
func New(start time.Time) *Clock { return &Clock{now: start} }

// Now is the clock's time.
func (c *Clock) Now() time.Time {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.now
}

// AfterFunc has f called when the clock is moved to now + d or past it
// (for d <= 0, by the next Fire), on the goroutine moving the clock, which
// waits for it; the function it returns stops that.
func (c *Clock) AfterFunc(d time.Duration, f func()) func() bool {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.seq++
	t := &timer{at: c.now.Add(d), seq: c.seq, f: f}
	heap.Push(&c.timers, t)
	return func() bool {
		c.mu.Lock()
		defer c.mu.Unlock()
		if t.index < 0 {
			return false
		}
		heap.Remove(&c.timers, t.index)
		return true
	}
}

// Next is when the earliest timer is due; false when none is armed.
func (c *Clock) Next() (time.Time, bool) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if len(c.timers) == 0 {
		return time.Time{}, false
	}
	return c.timers[0].at, true
}

// Fire moves the clock to the earliest timer, if it is due at or before
// limit, and calls it (the clock never goes back: a timer due in the past
// fires at the clock's time). It reports whether it called one. Timers due
// at the same time fire in the order they were armed.
func (c *Clock) Fire(limit time.Time) bool {
	c.mu.Lock()
	if len(c.timers) == 0 || c.timers[0].at.After(limit) {
		c.mu.Unlock()
		return false
	}
	t := heap.Pop(&c.timers).(*timer)
	if t.at.After(c.now) {
		c.now = t.at
	}
	c.mu.Unlock()
	// Unlocked: f reads the clock and arms timers (the loopback does,
	// under its own lock, which it also holds when it stops one).
	t.f()
	return true
}

// Set moves the clock forward to t, firing nothing; never back.
func (c *Clock) Set(t time.Time) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if t.After(c.now) {
		c.now = t
	}
}

// timer is one call AfterFunc armed; index is its place in the heap, -1
// once it fired or was stopped.
type timer struct {
	at    time.Time
	seq   uint64
	f     func()
	index int
}

// timers is a heap of timers, soonest (then first armed) first.
type timers []*timer

func (h timers) Len() int { return len(h) }

func (h timers) Less(i, j int) bool {
	if !h[i].at.Equal(h[j].at) {
		return h[i].at.Before(h[j].at)
	}
	return h[i].seq < h[j].seq
}

func (h timers) Swap(i, j int) {
	h[i], h[j] = h[j], h[i]
	h[i].index, h[j].index = i, j
}

func (h *timers) Push(x any) {
	t := x.(*timer)
	t.index = len(*h)
	*h = append(*h, t)
}

func (h *timers) Pop() any {
	old := *h
	t := old[len(old)-1]
	old[len(old)-1] = nil
	*h = old[:len(old)-1]
	t.index = -1
	return t
}
