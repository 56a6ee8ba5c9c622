package dsl_test

import (
	"encoding/json"
	"reflect"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/acemq/acemq-flow/dsl"
)

// row is a value a condition sees beside the payload.
type row struct {
	Step string `expr:"step"`
	N    int    `expr:"n"`
}

// TestCondition: a condition outside a flow is checked as When is, against
// the payload's type by its JSON names and against the values beside it,
// with the column of what is wrong; without a payload type, payload is not
// there.
func TestCondition(t *testing.T) {
	t.Parallel()
	vars := map[string]any{"row": row{}}
	order := reflect.TypeFor[Order]()
	c, err := dsl.Condition(`row.step == "ship" && payload.amount_cents > 100`, order, vars)
	require.NoError(t, err)
	for payload, want := range map[string]bool{`{"amount_cents": 500}`: true, `{"amount_cents": 5}`: false} {
		ok, err := c.BoolWith(json.RawMessage(payload), map[string]any{"row": row{Step: "ship"}})
		require.NoError(t, err)
		require.Equal(t, want, ok, payload)
	}
	ok, err := c.BoolWith(Order{Amount: 500}, map[string]any{"row": row{Step: "charge"}})
	require.NoError(t, err)
	require.False(t, ok)
	_, err = c.BoolWith(json.RawMessage(`{"amount_cents": "lots"}`), map[string]any{"row": row{}})
	require.ErrorContains(t, err, "read the payload", "a payload that does not fit the type")

	for src, want := range map[string]string{
		`payload.amount_centz > 1`: `type dsl_test.Order has no field amount_centz (column 9)`,
		`row.n * 2`:                `gives int, want a bool (column 7)`,
		`row.stepp == ""`:          `has no field stepp (column 5)`,
	} {
		_, err := dsl.Condition(src, order, vars)
		require.ErrorContains(t, err, want, src)
	}
	_, err = dsl.Condition(`payload.amount_cents > 1`, nil, vars)
	require.ErrorContains(t, err, "unknown name payload (column 1)", "no payload without its type")
	c, err = dsl.Condition(`row.n > 1`, nil, vars)
	require.NoError(t, err)
	ok, err = c.BoolWith(nil, map[string]any{"row": row{N: 2}})
	require.NoError(t, err)
	require.True(t, ok)
}
