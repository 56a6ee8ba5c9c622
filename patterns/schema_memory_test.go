package patterns_test

import (
	"context"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/acemq/acemq-flow/patterns"
)

func TestInMemorySchemaRegistry(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	r := patterns.NewInMemorySchemaRegistry()
	v1, err := r.Register(ctx, "order.placed", "avro", []byte(`{"a":1}`))
	require.NoError(t, err)
	again, err := r.Register(ctx, "order.placed", "avro", []byte(`{"a":1}`))
	require.NoError(t, err)
	require.Equal(t, v1.ID, again.ID, "same definition, same id")
	v2, err := r.Register(ctx, "order.placed", "avro", []byte(`{"a": 1}`))
	require.NoError(t, err)
	require.NotEqual(t, v1.ID, v2.ID, "whitespace counts")
	require.Equal(t, 2, v2.Version)
	other, err := r.Register(ctx, "order.shipped", "avro", []byte(`{"a":1}`))
	require.NoError(t, err)
	require.Equal(t, 1, other.Version)
	require.Equal(t, v1.Fingerprint, other.Fingerprint)
	require.NotEqual(t, v1.ID, other.ID, "ids are per subject and definition")
	require.Len(t, v1.Fingerprint, 64)

	latest, err := r.Latest(ctx, "order.placed")
	require.NoError(t, err)
	require.Equal(t, v2.ID, latest.ID)
	byID, err := r.ByID(ctx, v1.ID)
	require.NoError(t, err)
	require.Equal(t, []byte(`{"a":1}`), byID.Definition)
	versions, err := r.Versions(ctx, "order.placed")
	require.NoError(t, err)
	require.Equal(t, []int64{v1.ID, v2.ID}, []int64{versions[0].ID, versions[1].ID})

	for _, tc := range []struct {
		name string
		call func() error
	}{
		{"latest of unknown", func() error { _, err := r.Latest(ctx, "x"); return err }},
		{"unknown id", func() error { _, err := r.ByID(ctx, 999); return err }},
		{"versions of unknown", func() error { _, err := r.Versions(ctx, "x"); return err }},
	} {
		require.ErrorIs(t, tc.call(), patterns.ErrSchemaNotFound, tc.name)
	}
	for _, bad := range [][3]string{{"", "avro", "x"}, {"s", "", "x"}, {"s", "avro", ""}} {
		_, err := r.Register(ctx, bad[0], bad[1], []byte(bad[2]))
		require.ErrorIs(t, err, patterns.ErrInvalidSchema)
	}
}
