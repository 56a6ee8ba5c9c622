package engine_test

import (
	"context"
	"fmt"
	"os"
	"slices"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/acemq/acemq-flow/broker"
	"github.com/acemq/acemq-flow/dsl"
	"github.com/acemq/acemq-flow/engine"
	"github.com/acemq/acemq-flow/engine/journal"
	"github.com/acemq/acemq-flow/internal/brokertest"
	"github.com/acemq/acemq-flow/patterns"
)

// inStep counts, per key, the runs in a step at once and the most there
// ever were, and the order runs went in.
type inStep struct {
	mu     sync.Mutex
	now    map[string]int
	most   map[string]int
	order  map[string][]int
	starts []time.Time
}

func newInStep() *inStep {
	return &inStep{now: map[string]int{}, most: map[string]int{}, order: map[string][]int{}}
}

func (s *inStep) enter(key string, n int) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.now[key]++
	s.most[key] = max(s.most[key], s.now[key])
	s.order[key] = append(s.order[key], n)
	s.starts = append(s.starts, time.Now())
}

func (s *inStep) leave(key string) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.now[key]--
}

func (s *inStep) mostOf(key string) int {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.most[key]
}

func (s *inStep) entered() []time.Time {
	s.mu.Lock()
	defer s.mu.Unlock()
	return slices.Clone(s.starts)
}

// keyedFlow is reserve (compensable) -> export, at most n runs with the
// same order id in export at once; export holds runs of key "a" until
// gate is closed (when gate is not nil), and takes hold.
func keyedFlow(name string, n int, ef *effects, in *inStep, gate <-chan struct{}, hold time.Duration) *dsl.FlowDef {
	return dsl.Flow(name,
		dsl.Step("reserve", appendStep(ef, "reserve")).Compensate(func(ctx context.Context, _ Order) error {
			m, _ := broker.Handling(ctx)
			ef.add(m.RunID, "undo-reserve")
			return nil
		}),
		dsl.Step("export", func(ctx context.Context, o Order) (Order, error) {
			m, _ := broker.Handling(ctx)
			in.enter(o.ID, o.Amount)
			defer in.leave(o.ID)
			if gate != nil && o.ID == "a" {
				<-gate
			}
			time.Sleep(hold)
			ef.add(m.RunID, "export")
			return o, nil
		}).ConcurrencyKey("payload.id", n))
}

// TestConcurrencyKeyHoldsOthersOfItsKeyOnly: with one place per key, a
// run of key a in the step makes the next runs of a wait (status waiting,
// their timeline saying for what), not fail, while a run of key b goes
// through; once the first leaves, the waiters go in one at a time in the
// order they came. A waiting run that is cancelled stops at once, its
// reserve undone, without waiting for a place.
func TestConcurrencyKeyHoldsOthersOfItsKeyOnly(t *testing.T) {
	brokertest.Each(t, func(t *testing.T, h *brokertest.Harness) {
		fx := newFixture(t, h, engine.Config{})
		ef, in, gate := newEffects(), newInStep(), make(chan struct{})
		fx.register(keyedFlow(fx.name, 1, ef, in, gate, 0))
		fx.work()
		first := fx.start(Order{ID: "a", Amount: 1})
		require.Eventually(t, func() bool { return in.mostOf("a") == 1 }, 10*time.Second, 10*time.Millisecond)
		var waiting []string
		for i := 2; i <= 4; i++ {
			run := fx.start(Order{ID: "a", Amount: i})
			r := fx.waitStatus(run, journal.Waiting, 10*time.Second)
			require.Equal(t, "export", r.Step)
			require.True(t, hasOutcome(fx, run, `step:export:waiting for a place: at most 1 at once with key "a"`), "%v", fx.outcomes(run))
			waiting = append(waiting, run)
		}
		other := fx.start(Order{ID: "b", Amount: 9})
		fx.waitStatus(other, journal.Completed, 10*time.Second)
		require.Equal(t, 1, ef.get(other, "export"), "a run of another key is not held behind a")

		ctx := brokertest.Ctx(t)
		cancelled := waiting[1]
		_, err := fx.eng.CancelRun(ctx, cancelled, engine.CancelRequest{Reason: "not needed", Actor: "test"})
		require.NoError(t, err)
		fx.waitStatus(cancelled, journal.Cancelled, 10*time.Second)
		require.Eventually(t, func() bool { return ef.get(cancelled, "undo-reserve") == 1 }, 10*time.Second, 10*time.Millisecond,
			"the cancelled waiter is compensated while a still holds the place")
		require.Equal(t, 1, in.mostOf("a"))

		close(gate)
		for _, run := range []string{first, waiting[0], waiting[2]} {
			fx.waitStatus(run, journal.Completed, 10*time.Second)
			require.Equal(t, 1, ef.get(run, "export"), "run %s", run)
		}
		require.Equal(t, 0, ef.get(cancelled, "export"))
		require.Equal(t, 1, in.mostOf("a"), "never two runs of a in export at once")
		in.mu.Lock()
		require.Equal(t, []int{1, 2, 4}, in.order["a"], "a's runs went in in the order they came")
		in.mu.Unlock()
		left, err := fx.journal.Granted(ctx, 0)
		require.NoError(t, err)
		require.Empty(t, left, "no place left handed out")
	})
}

// placeStore is an idempotency store that takes a limited step's place
// with its claim and gives it back with its confirm, as the PostgreSQL
// store does over a journal on its database, counting what it is asked.
type placeStore struct {
	*patterns.InMemoryIdempotencyStore
	limits journal.LimitStore

	mu        sync.Mutex
	claimed   map[string]bool // keys claimed through Claim
	placed    map[string]bool // keys claimed with a place
	confirmed int             // confirms that gave a place back
}

func (p *placeStore) Claim(ctx context.Context, key string) (patterns.Claim, error) {
	p.mu.Lock()
	p.claimed[key] = true
	p.mu.Unlock()
	return p.InMemoryIdempotencyStore.Claim(ctx, key)
}

func (p *placeStore) ClaimsPlaces(l journal.LimitStore) bool { return l == p.limits }

func (p *placeStore) ClaimPlace(ctx context.Context, l journal.LimitStore, s journal.Slot, parked []byte, key string) (bool, patterns.Claim, error) {
	granted, err := l.Acquire(ctx, s, parked)
	if err != nil || !granted {
		return false, 0, err
	}
	p.mu.Lock()
	p.placed[key] = true
	p.mu.Unlock()
	c, err := p.InMemoryIdempotencyStore.Claim(ctx, key)
	return true, c, err
}

func (p *placeStore) ConfirmReleasing(ctx context.Context, key string, l journal.LimitStore, s journal.Slot) ([][]byte, error) {
	if err := p.InMemoryIdempotencyStore.Confirm(ctx, key); err != nil {
		return nil, err
	}
	p.mu.Lock()
	p.confirmed++
	p.mu.Unlock()
	return l.Release(ctx, s)
}

// TestConcurrencyKeyClaimsWithItsPlace: on a store that can, a limited
// step's work is claimed with its place and confirmed giving it back
// (one round trip each on PostgreSQL), never claimed apart; the limit
// holds and every waiter gets in.
func TestConcurrencyKeyClaimsWithItsPlace(t *testing.T) {
	brokertest.Each(t, func(t *testing.T, h *brokertest.Harness) {
		const runs = 8
		j, err := journal.NewMemory(0)
		require.NoError(t, err)
		mem, err := patterns.NewInMemoryIdempotencyStore(time.Minute)
		require.NoError(t, err)
		store := &placeStore{InMemoryIdempotencyStore: mem, limits: j, claimed: map[string]bool{}, placed: map[string]bool{}}
		fx := newFixture(t, h, engine.Config{Journal: j, Store: store})
		fx.journal = j
		ef, in := newEffects(), newInStep()
		fx.register(keyedFlow(fx.name, 1, ef, in, nil, 20*time.Millisecond))
		fx.work()
		var ids []string
		for i := range runs {
			ids = append(ids, fx.start(Order{ID: fmt.Sprint("k", i%2), Amount: i}))
		}
		for _, run := range ids {
			fx.waitStatus(run, journal.Completed, 20*time.Second)
			require.Equal(t, 1, ef.get(run, "export"), "run %s", run)
		}
		require.LessOrEqual(t, in.mostOf("k0"), 1)
		require.LessOrEqual(t, in.mostOf("k1"), 1)
		store.mu.Lock()
		defer store.mu.Unlock()
		require.Len(t, store.placed, runs, "each run's export claimed with its place")
		for key := range store.placed {
			require.False(t, store.claimed[key], "export's key %s claimed apart too", key)
		}
		require.Equal(t, runs, store.confirmed, "each run's export confirmed giving its place back")
		require.Len(t, store.claimed, runs, "reserve, not limited, claimed as before")
	})
}

// TestConcurrencyKeyAcrossThreeWorkers: three workers over one database
// run 60 runs of 5 keys through a step with 2 places per key: every run
// completes, its step run once, and no key ever has more than 2 runs in
// the step at once (while some key has 2: the places are used).
func TestConcurrencyKeyAcrossThreeWorkers(t *testing.T) {
	brokertest.Each(t, func(t *testing.T, h *brokertest.Harness) {
		const keys, perKey, limit = 5, 12, 2
		ef, in := newEffects(), newInStep()
		name, fxs := sharedEngines(t, h, 3, func(name string) *dsl.FlowDef { return keyedFlow(name, limit, ef, in, nil, 15*time.Millisecond) })
		ctx := brokertest.Ctx(t)
		var runs []string
		for i := range keys * perKey {
			res, err := fxs[i%3].eng.Start(ctx, name, Order{ID: fmt.Sprint("k", i%keys), Amount: i})
			require.NoError(t, err)
			runs = append(runs, res.RunID)
		}
		for _, run := range runs {
			fxs[0].waitStatus(run, journal.Completed, 30*time.Second)
			require.Equal(t, 1, ef.get(run, "export"), "run %s", run)
		}
		most := 0
		for k := range keys {
			key := fmt.Sprint("k", k)
			require.LessOrEqual(t, in.mostOf(key), limit, "key %s", key)
			most = max(most, in.mostOf(key))
		}
		require.Equal(t, limit, most, "the places are used")
	})
}

// TestRateLimitSpacesStarts: 12 runs started at once through a step
// limited to 5 starts a second start 200ms apart: no second holds more
// than 5, the last starts 2.2s after the first, schedule list shows the
// runs waiting for their turn, and a run that waited says in its
// timeline until when.
func TestRateLimitSpacesStarts(t *testing.T) {
	brokertest.Each(t, func(t *testing.T, h *brokertest.Harness) {
		fx := newFixture(t, h, engine.Config{})
		ef, in := newEffects(), newInStep()
		fx.register(dsl.Flow(fx.name, dsl.Step("call", func(ctx context.Context, o Order) (Order, error) {
			m, _ := broker.Handling(ctx)
			in.enter("", o.Amount)
			in.leave("")
			ef.add(m.RunID, "call")
			return o, nil
		}).RateLimit(5, time.Second)))
		fx.work()
		var runs []string
		for i := range 12 {
			runs = append(runs, fx.start(Order{ID: "o", Amount: i}))
		}
		require.Eventually(t, func() bool {
			s, err := fx.eng.Schedules(brokertest.Ctx(t), fx.name, 100)
			return err == nil && slices.ContainsFunc(s, func(s engine.Scheduled) bool {
				return s.Kind == engine.ScheduledRate && s.Step == "call" && s.DueAt.After(time.Now())
			})
		}, 10*time.Second, 20*time.Millisecond, "schedule list shows the runs waiting for their turn")
		for _, run := range runs {
			fx.waitStatus(run, journal.Completed, 20*time.Second)
			require.Equal(t, 1, ef.get(run, "call"))
		}
		starts := in.entered()
		require.Len(t, starts, 12)
		// A start is at or after its turn; one late by a timer's jitter
		// brings the next closer, so windows are judged with 50ms to spare.
		for i := 5; i < len(starts); i++ {
			require.GreaterOrEqual(t, starts[i].Sub(starts[i-5]), time.Second-50*time.Millisecond, "starts %d to %d: more than 5 in a second", i-5, i)
		}
		require.GreaterOrEqual(t, starts[11].Sub(starts[0]), 2200*time.Millisecond-50*time.Millisecond)
		waited := 0
		for _, run := range runs {
			if hasOutcome(fx, run, "step:call:rate limited: at most 5 per 1s; starts at ") {
				waited++
			}
		}
		require.GreaterOrEqual(t, waited, 10, "every run but the first few says it waited")
	})
}

// rateWindow is how long TestRateLimitAcrossThreeWorkers counts starts:
// 3s, or ACEMQ_RATE_PROOF_WINDOW (30s for the measure).
func rateWindow(t *testing.T) time.Duration {
	if s := os.Getenv("ACEMQ_RATE_PROOF_WINDOW"); s != "" {
		d, err := time.ParseDuration(s)
		require.NoError(t, err)
		return d
	}
	return 3 * time.Second
}

// TestRateLimitAcrossThreeWorkers: three workers over one database serve
// a step limited to 10 starts a second, with more runs waiting than the
// window takes: in the window from a second after the first start, the
// step starts 10 a second (within a thirtieth, at least 2), whichever workers start
// them, waiting on the ladder for turns more than a second away.
func TestRateLimitAcrossThreeWorkers(t *testing.T) {
	brokertest.Each(t, func(t *testing.T, h *brokertest.Harness) {
		window := rateWindow(t)
		const rate = 10
		in := newInStep()
		name, fxs := sharedEngines(t, h, 3, func(name string) *dsl.FlowDef {
			return dsl.Flow(name, dsl.Step("call", func(ctx context.Context, o Order) (Order, error) {
				in.enter("", o.Amount)
				in.leave("")
				return o, nil
			}).RateLimit(rate, time.Second))
		})
		ctx := brokertest.Ctx(t)
		want := int(window.Seconds() * rate)
		total := want + 4*rate
		for i := range total {
			_, err := fxs[i%3].eng.Start(ctx, name, Order{ID: "o", Amount: i})
			require.NoError(t, err)
		}
		require.Eventually(t, func() bool { return len(in.entered()) >= want+rate }, window+30*time.Second, 100*time.Millisecond)
		starts := in.entered()
		// From a second in: the first starts wait for connections to the
		// database, which the turns after them do not.
		got := 0
		for _, s := range starts {
			if since := s.Sub(starts[0]); since >= time.Second && since < time.Second+window {
				got++
			}
		}
		slack := max(2, want/30)
		t.Logf("%d starts in %s at %d/s (want %d ± %d)", got, window, rate, want, slack)
		require.InDelta(t, want, got, float64(slack))
	})
}
