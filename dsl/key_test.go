package dsl_test

import (
	"context"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/acemq/acemq-flow/dsl"
)

type keyedOrder struct {
	Customer string `json:"customer"`
	OrderID  int    `json:"order_id"`
}

func keyedPass(_ context.Context, o keyedOrder) (keyedOrder, error) { return o, nil }

// TestKey: a flow's business key is compiled against its input and gives
// the key of a run's input; a second Key, an empty one and one that does
// not give a string or a number are refused.
func TestKey(t *testing.T) {
	f := dsl.Flow("keyed", dsl.Key(`payload.customer + "/" + string(payload.order_id)`), dsl.Step("a", keyedPass))
	require.NoError(t, f.Err())
	k, err := f.BusinessKey().Key(keyedOrder{Customer: "Ada", OrderID: 42})
	require.NoError(t, err)
	require.Equal(t, "Ada/42", k)

	n := dsl.Flow("numbered", dsl.Key(`payload.order_id`), dsl.Step("a", keyedPass))
	require.NoError(t, n.Err())
	k, err = n.BusinessKey().Key(keyedOrder{OrderID: 7})
	require.NoError(t, err)
	require.Equal(t, "7", k)

	require.Nil(t, dsl.Flow("plain", dsl.Step("a", keyedPass)).BusinessKey())
	for name, f := range map[string]*dsl.FlowDef{
		"twice":    dsl.Flow("k", dsl.Key(`payload.customer`), dsl.Key(`payload.customer`), dsl.Step("a", keyedPass)),
		"empty":    dsl.Flow("k", dsl.Key(``), dsl.Step("a", keyedPass)),
		"a bool":   dsl.Flow("k", dsl.Key(`payload.order_id > 1`), dsl.Step("a", keyedPass)),
		"no field": dsl.Flow("k", dsl.Key(`payload.nothing`), dsl.Step("a", keyedPass)),
	} {
		require.Error(t, f.Err(), name)
	}
}
