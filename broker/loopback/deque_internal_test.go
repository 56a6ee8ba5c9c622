package loopback

import (
	"math/rand/v2"
	"slices"
	"testing"

	"github.com/stretchr/testify/require"
)

// TestDequeInsert checks insert, at and popFront against a slice, across
// wrap-arounds and growth.
func TestDequeInsert(t *testing.T) {
	t.Parallel()
	rng := rand.New(rand.NewPCG(3, 4))
	var d deque
	var model []*message
	for step := range 3000 {
		switch op := rng.IntN(3); {
		case op == 0 && len(model) > 0:
			require.Same(t, model[0], d.popFront(), "step %d", step)
			model = model[1:]
		default:
			m := &message{pos: uint64(step)}
			i := rng.IntN(len(model) + 1)
			d.insert(i, m)
			model = slices.Insert(model, i, m)
		}
		require.Equal(t, len(model), d.len())
		for i, m := range model {
			if d.at(i) != m {
				t.Fatalf("step %d: index %d holds message %d, want %d", step, i, d.at(i).pos, m.pos)
			}
		}
	}
}
