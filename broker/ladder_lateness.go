package broker

import (
	"math"
	"sync/atomic"
	"time"
)

// latenessBounds are the upper bounds of the buckets the ladder counts its
// deliveries' lateness in: with a running control consumer and no backlog
// a delivery is at most about a second late, so the buckets are fine below
// a second and coarse above.
var latenessBounds = [...]time.Duration{
	10 * time.Millisecond, 50 * time.Millisecond, 100 * time.Millisecond, 250 * time.Millisecond, 500 * time.Millisecond,
	time.Second, 2 * time.Second, 5 * time.Second, 10 * time.Second, 30 * time.Second, time.Minute, 5 * time.Minute,
}

// LatenessBuckets is the length of LadderStats.Late: a bucket per bound of
// LatenessBounds, and one for deliveries later than the last.
const LatenessBuckets = len(latenessBounds) + 1

// LatenessBounds returns the upper bounds of LadderStats.Late's buckets
// but the last, shortest first.
func LatenessBounds() []time.Duration { return append([]time.Duration(nil), latenessBounds[:]...) }

// lateness counts a ladder's deliveries by how late they were: counters a
// delivery adds one to, without a lock, and the last one's lateness.
type lateness struct {
	last    atomic.Int64
	buckets [LatenessBuckets]atomic.Int64
}

// add counts a delivery late by d.
func (l *lateness) add(d time.Duration) {
	l.last.Store(int64(d))
	i := 0
	for i < len(latenessBounds) && d > latenessBounds[i] {
		i++
	}
	l.buckets[i].Add(1)
}

// read is what the counters hold now.
func (l *lateness) read(s *LadderStats) {
	s.LastLateness = time.Duration(l.last.Load())
	for i := range l.buckets {
		s.Late[i] = l.buckets[i].Load()
	}
}

// LatenessQuantile is the q-quantile (0 < q ≤ 1) of the lateness of the
// messages the ladder delivered between before and s, two LadderStats of
// one connection with before read first: the upper bound of the bucket it
// falls in (an estimate from above), or, past the last bound, that bound
// (at least that late). ok is false when nothing was delivered in between
// or q is out of range.
func (s LadderStats) LatenessQuantile(before LadderStats, q float64) (d time.Duration, ok bool) {
	if q <= 0 || q > 1 {
		return 0, false
	}
	var n [LatenessBuckets]int64
	var total int64
	for i := range n {
		n[i] = max(s.Late[i]-before.Late[i], 0)
		total += n[i]
	}
	if total == 0 {
		return 0, false
	}
	// The smallest bucket holding at least q of the deliveries (the
	// epsilon keeps a product such as 0.99 × 100 from rounding up past 99).
	rank := int64(math.Ceil(q*float64(total) - 1e-9))
	var seen int64
	for i, c := range n {
		seen += c
		if seen >= rank && i < len(latenessBounds) {
			return latenessBounds[i], true
		}
	}
	return latenessBounds[len(latenessBounds)-1], true
}
