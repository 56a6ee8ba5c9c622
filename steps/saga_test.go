package steps_test

import (
	"context"
	"errors"
	"slices"
	"strings"
	"sync"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/acemq/acemq-flow/broker"
	"github.com/acemq/acemq-flow/patterns"
	"github.com/acemq/acemq-flow/steps"
)

// parcel is the payload of the test sagas: each part adds to its trail.
type parcel struct {
	ID    string   `json:"id"`
	Trail []string `json:"trail"`
}

// calls records what the parts and their undos did, in order.
type calls struct {
	mu  sync.Mutex
	log []string
}

func (c *calls) add(s string) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.log = append(c.log, s)
}

// count is how many times s was recorded.
func (c *calls) count(s string) int {
	c.mu.Lock()
	defer c.mu.Unlock()
	n := 0
	for _, x := range c.log {
		if x == s {
			n++
		}
	}
	return n
}

func (c *calls) list() []string {
	c.mu.Lock()
	defer c.mu.Unlock()
	return slices.Clone(c.log)
}

// part is a saga part that adds name to the trail, or fails with err.
func part(c *calls, name string, err error) func(context.Context, parcel) (parcel, error) {
	return func(_ context.Context, p parcel) (parcel, error) {
		c.add(name)
		if err != nil {
			return p, err
		}
		p.Trail = append(slices.Clone(p.Trail), name)
		return p, nil
	}
}

// undo records that name was undone, with the trail it was given.
func undo(c *calls, name string, err error) func(context.Context, parcel) error {
	return func(_ context.Context, p parcel) error {
		c.add("undo " + name + " [" + strings.Join(p.Trail, " ") + "]")
		return err
	}
}

func TestSaga(t *testing.T) {
	t.Parallel()
	errNoCourier := errors.New("no courier today")
	errRelease := errors.New("stock service down")
	for _, tc := range []struct {
		name  string
		parts func(c *calls) []*steps.SagaPart[parcel]
		// trail is what a complete saga returns; calls what ran.
		trail []string
		calls []string
		// failedAt is the SagaError's step ("" for a complete saga);
		// fatal whether the step is to be given up; unresolved names
		// the parts left undone; text is in the error's text.
		failedAt   string
		fatal      bool
		unresolved []string
		text       string
	}{{
		name: "complete: each part gets what the one before returned",
		parts: func(c *calls) []*steps.SagaPart[parcel] {
			return []*steps.SagaPart[parcel]{
				steps.Do("reserve", part(c, "reserve", nil)).Undo(undo(c, "reserve", nil)),
				steps.Do("book", part(c, "book", nil)),
			}
		},
		trail: []string{"reserve", "book"},
		calls: []string{"reserve", "book"},
	}, {
		name: "a part fails: the parts before it are undone in reverse, each with what it returned, and the step retries",
		parts: func(c *calls) []*steps.SagaPart[parcel] {
			return []*steps.SagaPart[parcel]{
				steps.Do("reserve", part(c, "reserve", nil)).Undo(undo(c, "reserve", nil)),
				steps.Do("note", part(c, "note", nil)),
				steps.Do("hold", part(c, "hold", nil)).Undo(undo(c, "hold", nil)),
				steps.Do("book", part(c, "book", errNoCourier)).Undo(undo(c, "book", nil)),
			}
		},
		calls:    []string{"reserve", "note", "hold", "book", "undo hold [reserve note hold]", "undo reserve [reserve]"},
		failedAt: "book",
		text:     `saga reserve failed at "book": no courier today; undone: hold, reserve`,
	}, {
		name: "the first part fails: nothing to undo",
		parts: func(c *calls) []*steps.SagaPart[parcel] {
			return []*steps.SagaPart[parcel]{
				steps.Do("reserve", part(c, "reserve", errNoCourier)).Undo(undo(c, "reserve", nil)),
			}
		},
		calls:    []string{"reserve"},
		failedAt: "reserve",
		text:     "no courier today; nothing to undo",
	}, {
		name: "a part fails with broker.Fatal: undone, and given up at once",
		parts: func(c *calls) []*steps.SagaPart[parcel] {
			return []*steps.SagaPart[parcel]{
				steps.Do("reserve", part(c, "reserve", nil)).Undo(undo(c, "reserve", nil)),
				steps.Do("book", part(c, "book", broker.Fatal(errNoCourier))),
			}
		},
		calls:    []string{"reserve", "book", "undo reserve [reserve]"},
		failedAt: "book",
		fatal:    true,
		text:     "fatal: no courier today; undone: reserve",
	}, {
		name: "an undo fails: given up at once with what is unresolved; the other undos still run",
		parts: func(c *calls) []*steps.SagaPart[parcel] {
			return []*steps.SagaPart[parcel]{
				steps.Do("charge", part(c, "charge", nil)).Undo(undo(c, "charge", nil)),
				steps.Do("reserve", part(c, "reserve", nil)).Undo(undo(c, "reserve", errRelease)),
				steps.Do("book", part(c, "book", errNoCourier)),
			}
		},
		calls:      []string{"charge", "reserve", "book", "undo reserve [charge reserve]", "undo charge [charge]"},
		failedAt:   "book",
		fatal:      true,
		unresolved: []string{"reserve"},
		text:       "1 compensation(s) failed",
	}} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			c := &calls{}
			fn := steps.Saga("reserve", tc.parts(c)...)
			out, err := fn(t.Context(), parcel{ID: "p-1"})
			require.Equal(t, tc.calls, c.list())
			if tc.failedAt == "" {
				require.NoError(t, err)
				require.Equal(t, parcel{ID: "p-1", Trail: tc.trail}, out)
				return
			}
			require.Error(t, err)
			var se *patterns.SagaError
			require.ErrorAs(t, err, &se)
			require.Equal(t, "reserve", se.Saga)
			require.Equal(t, tc.failedAt, se.Step)
			require.ErrorIs(t, err, errNoCourier, "the part's own error is seen through")
			var fatal *broker.FatalError
			require.Equal(t, tc.fatal, errors.As(err, &fatal), "given up at once")
			var unresolved []string
			for _, u := range se.Unresolved {
				unresolved = append(unresolved, u.Step)
				require.ErrorIs(t, u.Err, errRelease)
			}
			require.Equal(t, tc.unresolved, unresolved)
			require.Contains(t, err.Error(), tc.text)
		})
	}
}

// TestSagaBuiltWrongly: a saga step built wrongly runs nothing and is
// given up at once, saying what is wrong.
func TestSagaBuiltWrongly(t *testing.T) {
	t.Parallel()
	ok := func(_ context.Context, p parcel) (parcel, error) { return p, nil }
	for name, tc := range map[string]struct {
		parts []*steps.SagaPart[parcel]
		want  string
	}{
		"no parts":        {nil, "has no parts"},
		"a nil part":      {[]*steps.SagaPart[parcel]{steps.Do("a", ok), nil}, "part 1 is nil"},
		"a part unnamed":  {[]*steps.SagaPart[parcel]{steps.Do("", ok)}, "a part with no name"},
		"no function":     {[]*steps.SagaPart[parcel]{steps.Do[parcel]("a", nil)}, `part "a" has no function`},
		"a nil undo":      {[]*steps.SagaPart[parcel]{steps.Do("a", ok).Undo(nil)}, `part "a": nil undo`},
		"the first error": {[]*steps.SagaPart[parcel]{steps.Do[parcel]("a", nil).Undo(nil)}, `part "a" has no function`},
	} {
		t.Run(name, func(t *testing.T) {
			t.Parallel()
			_, err := steps.Saga("reserve", tc.parts...)(t.Context(), parcel{})
			require.ErrorIs(t, err, patterns.ErrInvalidSaga)
			var fatal *broker.FatalError
			require.ErrorAs(t, err, &fatal)
			require.ErrorContains(t, err, tc.want)
			require.ErrorContains(t, err, `"reserve"`)
		})
	}
}

// TestSagaCancelled: a saga whose context is done before a part starts
// fails there and undoes what ran, so a retry starts clean.
func TestSagaCancelled(t *testing.T) {
	t.Parallel()
	c := &calls{}
	ctx, cancel := context.WithCancel(t.Context())
	fn := steps.Saga("reserve",
		steps.Do("reserve", func(_ context.Context, p parcel) (parcel, error) {
			c.add("reserve")
			cancel()
			return p, nil
		}).Undo(undo(c, "reserve", nil)),
		steps.Do("book", part(c, "book", nil)))
	_, err := fn(ctx, parcel{})
	require.ErrorIs(t, err, context.Canceled)
	require.Equal(t, []string{"reserve", "undo reserve []"}, c.list())
	var fatal *broker.FatalError
	require.False(t, errors.As(err, &fatal))
}

// TestSagaConcurrentRuns: one saga step serves concurrent deliveries, each
// with its own payload and undo values.
func TestSagaConcurrentRuns(t *testing.T) {
	t.Parallel()
	fn := steps.Saga("tag",
		steps.Do("a", func(_ context.Context, p parcel) (parcel, error) { p.Trail = []string{p.ID + "/a"}; return p, nil }),
		steps.Do("b", func(_ context.Context, p parcel) (parcel, error) {
			p.Trail = append(slices.Clone(p.Trail), p.ID+"/b")
			return p, nil
		}))
	var wg sync.WaitGroup
	for i := range 50 {
		id := string(rune('A' + i%26))
		wg.Go(func() {
			out, err := fn(t.Context(), parcel{ID: id})
			require.NoError(t, err)
			require.Equal(t, []string{id + "/a", id + "/b"}, out.Trail)
		})
	}
	wg.Wait()
}
