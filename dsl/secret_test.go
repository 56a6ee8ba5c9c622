package dsl_test

import (
	"context"
	"errors"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/acemq/acemq-flow/dsl"
)

// TestSecret: Secret keeps the paths and names it is given, once each,
// and a flow refuses one it cannot follow.
func TestSecret(t *testing.T) {
	t.Parallel()
	step := dsl.Step("a", func(_ context.Context, o Order) (Order, error) { return o, nil })
	f := dsl.Flow("secrets", step, dsl.Secret("payload.card.number", "cvv"), dsl.Secret("cvv", "payload.items.*.pin", "payload"))
	require.NoError(t, f.Err())
	require.Equal(t, []string{"payload.card.number", "cvv", "payload.items.*.pin", "payload"}, f.Secrets())
	require.Empty(t, dsl.Flow("none", step).Secrets())

	for _, bad := range [][]string{{}, {""}, {" cvv"}, {"payload..card"}, {"card.number"}, {"c*"}, {"payload.ca*"}} {
		err := dsl.Flow("bad", step, dsl.Secret(bad...)).Err()
		require.Error(t, err, "%q", bad)
		require.True(t, errors.Is(err, dsl.ErrInvalidFlow), "%q: %v", bad, err)
	}
}
