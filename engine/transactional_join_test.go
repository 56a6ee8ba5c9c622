package engine_test

import (
	"context"
	"errors"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/acemq/acemq-flow/dsl"
	"github.com/acemq/acemq-flow/engine/journal"
	"github.com/acemq/acemq-flow/internal/brokertest"
	"github.com/acemq/acemq-flow/patterns"
)

// joinCommitLost is a store whose first successful CompleteInTx of every
// join reports an error: the join committed and its worker never heard so.
type joinCommitLost struct {
	patterns.TxStore
	mu   sync.Mutex
	lost map[string]bool
}

func (c *joinCommitLost) CompleteInTx(ctx context.Context, key string, work func(context.Context) ([]byte, error)) error {
	err := c.TxStore.CompleteInTx(ctx, key, work)
	if err != nil || !strings.Contains(key, "/join/") {
		return err
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.lost[key] {
		return nil
	}
	c.lost[key] = true
	return errors.New("connection lost while committing the join")
}

// TestTransactionalJoinCommittedThenLost: the join of a Transactional
// Parallel and of a Transactional ForEach writes in the transaction that
// records it fired; when that commit's answer is lost, the redelivery
// finds the join done and goes on with what it kept: each join's write is
// applied once and the run completes.
func TestTransactionalJoinCommittedThenLost(t *testing.T) {
	brokertest.Each(t, func(t *testing.T, h *brokertest.Harness) {
		store := &joinCommitLost{lost: map[string]bool{}}
		fx, l := txFixture(t, h, func(s patterns.TxStore) patterns.TxStore { store.TxStore = s; return store })
		ef := newEffects()
		fx.register(dsl.Flow(fx.name,
			dsl.Parallel("fulfil",
				dsl.Branch(dsl.Step("reserve", appendStep(ef, "reserve"))),
				dsl.Branch(dsl.Step("book", appendStep(ef, "book"))),
			).Join(func(ctx context.Context, o Order, _, _ Order) (Order, error) {
				return o, l.write(ctx, "join-fulfil")
			}).Transactional(),
			dsl.ForEach("lines",
				func(context.Context, Order) ([]int, error) { return []int{1, 2, 3}, nil },
				dsl.Step("line", func(_ context.Context, i int) (int, error) { return i, nil }),
				func(ctx context.Context, o Order, outs []int) (Order, error) {
					o.Amount = outs[0] + outs[1] + outs[2]
					return o, l.write(ctx, "join-lines")
				}).Transactional(),
			dsl.Step("ship", appendStep(ef, "ship"))))
		fx.work()
		run := fx.start(Order{ID: "o-1"})
		fx.waitStatus(run, journal.Completed, 30*time.Second)
		require.Len(t, l.attempts(t, run, "join-fulfil"), 1, "the Parallel's join wrote once")
		require.Len(t, l.attempts(t, run, "join-lines"), 1, "the ForEach's join wrote once")
		require.Equal(t, 1, ef.get(run, "ship"), "the run went on from each join once")
		store.mu.Lock()
		require.Len(t, store.lost, 2, "both joins' commits were lost once")
		store.mu.Unlock()
	})
}
