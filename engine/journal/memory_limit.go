package journal

import (
	"context"
	"errors"
	"slices"
	"sync"
	"time"
)

// memLimits is the limits a Memory journal keeps (LimitStore).
type memLimits struct {
	mu sync.Mutex
	// keys are the keys of limited steps with a place taken or a waiter.
	keys map[limitKey]*memLimit
	// holding is the key each holder with a place holds it under.
	holding map[limitHolder]string
	// tats are the rate-limited keys' next free turns; turns the
	// holders' reserved turns, kept until they come.
	tats  map[limitKey]time.Time
	turns map[limitHolder]time.Time
}

type limitKey struct{ flow, step, key string }

type limitHolder struct{ flow, step, holder string }

// memLimit is one key of a limited step: who holds its places, and who
// waits for one, in the order they came.
type memLimit struct {
	limit   int
	held    map[string]bool
	waiters []*memWaiter
}

type memWaiter struct {
	holder, runID string
	parked        []byte
	// granted is when the waiter was given a place (zero: not yet).
	granted time.Time
}

func (l *memLimits) init() {
	if l.keys == nil {
		l.keys = map[limitKey]*memLimit{}
		l.holding = map[limitHolder]string{}
		l.tats = map[limitKey]time.Time{}
		l.turns = map[limitHolder]time.Time{}
	}
}

// Acquire gives s.Holder a place, or parks it (see LimitStore).
func (m *Memory) Acquire(_ context.Context, s Slot, parked []byte) (bool, error) {
	if err := CheckSlot(s); err != nil {
		return false, err
	}
	l := &m.limits
	l.mu.Lock()
	defer l.mu.Unlock()
	l.init()
	k := limitKey{s.Flow, s.Step, s.Key}
	ml := l.keys[k]
	if ml == nil {
		ml = &memLimit{held: map[string]bool{}}
		l.keys[k] = ml
	}
	ml.limit = s.Limit
	if ml.held[s.Holder] || len(ml.held) < ml.limit {
		// A holder with its place keeps it; a waiter that comes again
		// while a place is free takes it.
		ml.held[s.Holder] = true
		l.holding[limitHolder{s.Flow, s.Step, s.Holder}] = s.Key
		ml.waiters = slices.DeleteFunc(ml.waiters, func(w *memWaiter) bool { return w.holder == s.Holder })
		return true, nil
	}
	if !slices.ContainsFunc(ml.waiters, func(w *memWaiter) bool { return w.holder == s.Holder }) {
		ml.waiters = append(ml.waiters, &memWaiter{holder: s.Holder, runID: s.RunID, parked: slices.Clone(parked)})
	}
	return false, nil
}

// Release frees s.Holder's place and hands free places to waiters (see
// LimitStore).
func (m *Memory) Release(_ context.Context, s Slot) ([][]byte, error) {
	if err := CheckSlot(s); err != nil {
		return nil, err
	}
	l := &m.limits
	l.mu.Lock()
	defer l.mu.Unlock()
	l.init()
	h := limitHolder{s.Flow, s.Step, s.Holder}
	key, ok := l.holding[h]
	if !ok {
		return nil, nil
	}
	delete(l.holding, h)
	k := limitKey{s.Flow, s.Step, key}
	ml := l.keys[k]
	delete(ml.held, s.Holder)
	send := l.grantLocked(k, ml, time.Now())
	return send, nil
}

// grantLocked gives ml's free places to its oldest waiters without one,
// and forgets ml once nobody holds or waits; the caller holds the lock.
func (l *memLimits) grantLocked(k limitKey, ml *memLimit, now time.Time) [][]byte {
	var send [][]byte
	for _, w := range ml.waiters {
		if len(ml.held) >= ml.limit {
			break
		}
		if !w.granted.IsZero() {
			continue
		}
		w.granted = now
		ml.held[w.holder] = true
		l.holding[limitHolder{k.flow, k.step, w.holder}] = k.key
		send = append(send, slices.Clone(w.parked))
	}
	if len(ml.held) == 0 && len(ml.waiters) == 0 {
		delete(l.keys, k)
	}
	return send
}

// Granted hands out again what a waiter given a place long ago has not
// come back with, and free places (see LimitStore).
func (m *Memory) Granted(_ context.Context, age time.Duration) ([][]byte, error) {
	l := &m.limits
	l.mu.Lock()
	defer l.mu.Unlock()
	l.init()
	now := time.Now()
	var send [][]byte
	for k, ml := range l.keys {
		for _, w := range ml.waiters {
			if !w.granted.IsZero() && now.Sub(w.granted) > age {
				w.granted = now
				send = append(send, slices.Clone(w.parked))
			}
		}
		send = append(send, l.grantLocked(k, ml, now)...)
	}
	for k, tat := range l.tats {
		if !tat.After(now) {
			delete(l.tats, k)
		}
	}
	return send, nil
}

// Unpark sends runID's waiters without a place, and takes out of their
// queue those sent (see LimitStore). The lock is not held while send
// runs.
func (m *Memory) Unpark(_ context.Context, runID string, send func([]byte) error) error {
	type parked struct {
		k      limitKey
		holder string
		msg    []byte
	}
	l := &m.limits
	l.mu.Lock()
	l.init()
	var found []parked
	for k, ml := range l.keys {
		for _, w := range ml.waiters {
			if w.runID == runID && w.granted.IsZero() {
				found = append(found, parked{k, w.holder, slices.Clone(w.parked)})
			}
		}
	}
	l.mu.Unlock()
	var errs []error
	for _, p := range found {
		if err := send(p.msg); err != nil {
			errs = append(errs, err)
			continue
		}
		l.mu.Lock()
		if ml := l.keys[p.k]; ml != nil {
			ml.waiters = slices.DeleteFunc(ml.waiters, func(w *memWaiter) bool { return w.holder == p.holder && w.granted.IsZero() })
			if len(ml.held) == 0 && len(ml.waiters) == 0 {
				delete(l.keys, p.k)
			}
		}
		l.mu.Unlock()
	}
	return errors.Join(errs...)
}

// Reserve gives r.Holder its turn (see LimitStore).
func (m *Memory) Reserve(_ context.Context, r Rate, now time.Time) (time.Time, error) {
	if err := CheckRate(r); err != nil {
		return time.Time{}, err
	}
	l := &m.limits
	l.mu.Lock()
	defer l.mu.Unlock()
	l.init()
	h := limitHolder{r.Flow, r.Step, r.Holder}
	if at, ok := l.turns[h]; ok {
		if !at.After(now) {
			delete(l.turns, h)
		}
		return at, nil
	}
	k := limitKey{r.Flow, r.Step, r.Key}
	at := now
	if tat := l.tats[k]; tat.After(at) {
		at = tat
	}
	l.tats[k] = at.Add(r.Interval)
	if at.After(now) {
		l.turns[h] = at
	}
	return at, nil
}
