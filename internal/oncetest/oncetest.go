// Package oncetest is the crash suite of patterns.Once, the executor of
// units of work that must happen once: a worker dies at each point of the
// sequence (claim, do, keep, carry out, confirm), another takes the unit
// up, and the suite checks what every store implementation must give: the
// work done once (at least once when the worker died inside it, unless it
// ran in the store's transaction), what it produced carried out, every
// copy with one message id, and nothing done or sent by a later delivery.
// It runs on a broker harness, so on both transports, with each store.
package oncetest

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/acemq/acemq-flow/broker"
	"github.com/acemq/acemq-flow/internal/brokertest"
	"github.com/acemq/acemq-flow/patterns"
)

// Point is where in Once's sequence a worker dies.
type Point string

// The points a worker dies at.
const (
	// AfterClaim: the key is claimed, the work not begun.
	AfterClaim Point = "after the claim"
	// InDo: the work's effect happened, nothing is kept.
	InDo Point = "inside the work"
	// AfterKeep: the work is done and kept, nothing carried out.
	AfterKeep Point = "after keeping"
	// AfterCarryOut: what the work produced is sent, the key not
	// confirmed.
	AfterCarryOut Point = "after carrying out"
	// AfterConfirm: the key is confirmed, the delivery not acknowledged.
	AfterConfirm Point = "after confirming"
)

// Points lists every point, in the sequence's order.
func Points() []Point { return []Point{AfterClaim, InDo, AfterKeep, AfterCarryOut, AfterConfirm} }

// Config says what the suite runs against.
type Config struct {
	// Store returns the store one worker uses: each call a store of its
	// own over what the workers share (an instance per worker over one
	// table), or the one store when it lives in the process's memory.
	Store func(t *testing.T) patterns.IdempotencyStore
	// Lease is how long a dead worker's claim holds the key: the next
	// worker is put back until then.
	Lease time.Duration
	// InTx runs the work in the store's transaction, Effect its effect
	// (through the transaction in ctx) and Effects counts the effects that
	// committed. Without them the work's effect is a counter, which a
	// worker dying inside it cannot take back.
	InTx    bool
	Effect  func(ctx context.Context, key string) error
	Effects func(t *testing.T, key string) int
}

// Run runs the suite: for each point, on h's broker, a worker that dies
// there and one that takes the unit up after it.
func Run(t *testing.T, h *brokertest.Harness, cfg Config) {
	for _, p := range Points() {
		t.Run(string(p), func(t *testing.T) {
			crashAt(t, h, cfg, p)
		})
	}
}

// errDead is what a dead worker's hooks answer once the test releases
// them: it does nothing more.
var errDead = errors.New("this worker died")

// worker is one process running units through its own Once.
type worker struct {
	once  *patterns.Once
	dead  atomic.Bool
	froze chan struct{}
	// release lets a frozen worker return, dead, when the test ends.
	release chan struct{}
	at      Point
}

// freeze stops the worker for good if it is the one dying at p.
func (w *worker) freeze(p Point) {
	if w.at != p || w.dead.Load() {
		return
	}
	w.dead.Store(true)
	close(w.froze)
	<-w.release
}

// freezingStore is a store whose worker dies right after it kept a
// result, when that is its point.
type freezingStore struct {
	patterns.ResultStore
	w *worker
}

func (s freezingStore) Complete(ctx context.Context, key string, result []byte) error {
	err := s.ResultStore.Complete(ctx, key, result)
	s.w.freeze(AfterKeep)
	return err
}

func crashAt(t *testing.T, h *brokertest.Harness, cfg Config, p Point) {
	ctx := brokertest.Ctx(t)
	conn := h.Open(broker.Config{})
	q := h.Queue("once")
	require.NoError(t, conn.Declare(ctx, broker.ConsumerTopology(q)))
	key := fmt.Sprintf("%s/%d", q, time.Now().UnixNano())
	var mu sync.Mutex
	done := 0
	work := func(ctx context.Context) error {
		if cfg.Effect != nil {
			return cfg.Effect(ctx, key)
		}
		mu.Lock()
		done++
		mu.Unlock()
		return nil
	}
	effects := func() int {
		if cfg.Effects != nil {
			return cfg.Effects(t, key)
		}
		mu.Lock()
		defer mu.Unlock()
		return done
	}
	newWorker := func(at Point) *worker {
		store := cfg.Store(t)
		w := &worker{at: at, froze: make(chan struct{}), release: make(chan struct{})}
		if rs, ok := store.(patterns.ResultStore); ok && at == AfterKeep && !cfg.InTx {
			store = freezingStore{rs, w}
		}
		o, err := patterns.NewOnce(store, patterns.OnceConfig{})
		require.NoError(t, err)
		w.once = o
		return w
	}
	unit := func(w *worker) patterns.Unit[string] {
		return patterns.Unit[string]{
			Key: key, InTx: cfg.InTx,
			Do: func(ctx context.Context) (string, error) {
				w.freeze(AfterClaim)
				if w.dead.Load() {
					return "", errDead
				}
				if err := work(ctx); err != nil {
					return "", err
				}
				w.freeze(InDo)
				if w.dead.Load() {
					return "", errDead
				}
				return "m-" + key, nil
			},
			Encode: func(id string) ([]byte, error) { return []byte(id), nil },
			Decode: func(b []byte) (string, error) { return string(b), nil },
			CarryOut: func(ctx context.Context, id string) error {
				if cfg.InTx {
					// Kept, in the transaction that committed the work.
					w.freeze(AfterKeep)
				}
				if w.dead.Load() {
					return errDead
				}
				if err := conn.Publish(ctx, map[string]string{"done": key}, broker.To(q), broker.MessageID(id)); err != nil {
					return err
				}
				w.freeze(AfterCarryOut)
				return nil
			},
		}
	}

	// The worker that dies.
	first := newWorker(p)
	var wg sync.WaitGroup
	t.Cleanup(func() {
		close(first.release)
		wg.Wait()
	})
	wg.Go(func() {
		d := patterns.Run(ctx, first.once, unit(first))
		if d.Kept && d.Err == nil && !first.dead.Load() {
			first.once.Confirm(ctx, key)
			first.freeze(AfterConfirm)
		}
	})
	brokertest.Next(t, first.froze, 10*time.Second)

	// The worker the redelivery reaches: put back while the dead one's
	// claim holds, then it takes the unit up.
	next := newWorker("")
	var d patterns.Done[string]
	deadline := time.Now().Add(cfg.Lease + 10*time.Second)
	for {
		d = patterns.Run(ctx, next.once, unit(next))
		if d.Claim != patterns.ClaimInProgress && !d.Lost {
			break
		}
		require.True(t, time.Now().Before(deadline), "the dead worker's claim never lapsed")
		time.Sleep(cfg.Lease / 4)
	}
	require.NoError(t, d.Err, "%+v", d)
	if d.Kept {
		next.once.Confirm(ctx, key)
	}

	wantEffects, wantCopies := 1, 1
	switch {
	case p == InDo && !cfg.InTx:
		wantEffects = 2 // at least once: the effect was not in the store's transaction
	case p == AfterCarryOut:
		wantCopies = 2 // sent, then sent again by the redelivery: one id
	}
	switch p {
	case AfterClaim, InDo:
		require.Equal(t, patterns.ClaimClaimed, d.Claim, "the lapsed claim is taken over and the work done")
	case AfterKeep, AfterCarryOut:
		require.Equal(t, patterns.ClaimDuplicate, d.Claim)
		require.True(t, d.Resent, "what was kept is carried out again, the work not redone")
	case AfterConfirm:
		require.Equal(t, patterns.ClaimDuplicate, d.Claim)
		require.False(t, d.Kept, "confirmed: nothing is kept to carry out again")
	}
	require.Equal(t, wantEffects, effects(), "the work's effects")

	// A later delivery finds it done, and neither works nor sends.
	later := patterns.Run(ctx, next.once, unit(next))
	require.Equal(t, patterns.ClaimDuplicate, later.Claim)
	require.False(t, later.Kept)
	require.Equal(t, wantEffects, effects())

	h.WaitDepth(q, wantCopies, 10*time.Second)
	for _, got := range h.Drain(q) {
		require.Equal(t, "m-"+key, got.MessageID, "every copy carries the unit's message id")
	}
}
