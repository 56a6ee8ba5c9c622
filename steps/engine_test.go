package steps_test

import (
	"context"
	"errors"
	"fmt"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/acemq/acemq-flow/broker"
	"github.com/acemq/acemq-flow/dsl"
	"github.com/acemq/acemq-flow/engine"
	"github.com/acemq/acemq-flow/engine/journal"
	"github.com/acemq/acemq-flow/internal/brokertest"
	"github.com/acemq/acemq-flow/internal/testenv"
	"github.com/acemq/acemq-flow/steps"
)

// TestSagaStepInAFlow runs a saga step through the engine on the
// loopback: a saga that failed and was undone is retried by the step's
// policy and completes, passing its value to the next step; one whose
// part gave up fatally fails the run at once, the journal saying what was
// undone.
func TestSagaStepInAFlow(t *testing.T) {
	t.Parallel()
	h := brokertest.New(t, "memory://"+testenv.Name(t, "broker"), false)
	conn := h.Open(broker.Config{})
	eng, err := engine.New(engine.Config{Conn: conn})
	require.NoError(t, err)
	t.Cleanup(func() { require.NoError(t, eng.Close(context.Background())) })

	c := &calls{}
	shipped := make(chan parcel, 1)
	name := testenv.Name(t, "flow")
	require.NoError(t, eng.Register(dsl.Flow(name,
		dsl.Step("reserve", steps.Saga("reserve",
			steps.Do("reserve-stock", part(c, "reserve-stock", nil)).Undo(undo(c, "reserve-stock", nil)),
			steps.Do("book-courier", func(ctx context.Context, p parcel) (parcel, error) {
				c.add("book-courier " + p.ID)
				switch {
				case p.ID == "refused":
					return p, broker.Fatal(errors.New("the courier does not deliver there"))
				case c.count("book-courier "+p.ID) == 1:
					return p, errors.New("courier busy")
				}
				p.Trail = append(p.Trail, "book-courier")
				return p, nil
			}))).Retry(broker.Constant(3, 0)),
		dsl.Step("ship", func(_ context.Context, p parcel) (parcel, error) { shipped <- p; return p, nil }))))
	w, err := eng.StartWorker(brokertest.Ctx(t))
	require.NoError(t, err)
	t.Cleanup(func() { require.NoError(t, w.Close(context.Background())) })

	ok, err := eng.Start(brokertest.Ctx(t), name, parcel{ID: "retried"})
	require.NoError(t, err)
	require.Equal(t, parcel{ID: "retried", Trail: []string{"reserve-stock", "book-courier"}}, brokertest.Next(t, shipped, 10*time.Second))
	waitStatus(t, eng, ok.RunID, journal.Completed)
	var tl []journal.Event
	require.Eventually(t, func() bool {
		// A step's record may reach the journal after the next step's.
		tl, err = eng.Journal().Timeline(context.Background(), ok.RunID)
		require.NoError(t, err)
		return len(tl) == 4
	}, 10*time.Second, 10*time.Millisecond)
	require.Equal(t, []string{"start::started", "step:reserve:retried", "step:reserve:completed", "step:ship:completed"}, outcomes(tl))
	require.Contains(t, tl[1].Error, `saga reserve failed at "book-courier": courier busy; undone: reserve-stock`)

	bad, err := eng.Start(brokertest.Ctx(t), name, parcel{ID: "refused"})
	require.NoError(t, err)
	r := waitStatus(t, eng, bad.RunID, journal.Failed)
	require.Contains(t, r.Error, `fatal: the courier does not deliver there; undone: reserve-stock`)
	require.Equal(t, []string{
		"reserve-stock", "book-courier retried", "undo reserve-stock [reserve-stock]", "reserve-stock", "book-courier retried",
		"reserve-stock", "book-courier refused", "undo reserve-stock [reserve-stock]",
	}, c.list(), "the retried saga was undone once and then completed; the refused one undone and given up on its first attempt")
}

// waitStatus waits until the journal shows run in status want.
func waitStatus(t *testing.T, eng *engine.Engine, run string, want journal.Status) journal.Run {
	t.Helper()
	var got journal.Run
	require.Eventually(t, func() bool {
		r, err := eng.Journal().Run(context.Background(), run)
		got = r
		return err == nil && r.Status == want
	}, 10*time.Second, 10*time.Millisecond, "run %s should be %s", run, want)
	return got
}

// outcomes lists a timeline as kind:step:outcome.
func outcomes(tl []journal.Event) []string {
	out := make([]string, len(tl))
	for i, e := range tl {
		out[i] = fmt.Sprintf("%s:%s:%s", e.Kind, e.Step, e.Outcome)
	}
	return out
}
