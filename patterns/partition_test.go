package patterns_test

import (
	"hash/fnv"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/acemq/acemq-flow/broker"
	"github.com/acemq/acemq-flow/patterns"
)

// TestPartitionVectors are docs/wire.md's test vectors, shared by every
// AceMQ library.
func TestPartitionVectors(t *testing.T) {
	t.Parallel()
	vectors := []struct {
		key               string
		fnv               uint32
		mod8, mod3, mod16 int
	}{
		{"", 0x811c9dc5, 5, 1, 5},
		{"order-42", 0x572446f4, 4, 2, 4},
		{"X-1", 0xf95ccc1d, 5, 1, 13},
		{"customer:7", 0x9025976a, 2, 0, 10},
		{"über", 0x7ba3e4cf, 7, 1, 15},
	}
	for _, v := range vectors {
		h := fnv.New32a()
		_, _ = h.Write([]byte(v.key))
		require.Equal(t, v.fnv, h.Sum32(), "FNV-1a of %q", v.key)
		for n, want := range map[int]int{8: v.mod8, 3: v.mod3, 16: v.mod16} {
			got, err := patterns.Partition(v.key, n)
			require.NoError(t, err)
			require.Equal(t, want, got, "partition(%q, %d)", v.key, n)
		}
	}
	rk, err := patterns.PartitionedRoutingKey("orders", "order-42", 8)
	require.NoError(t, err)
	require.Equal(t, "orders.4", rk)
}

func TestPartitionRefusesNoPartitions(t *testing.T) {
	t.Parallel()
	for _, n := range []int{0, -1} {
		_, err := patterns.Partition("k", n)
		require.ErrorIs(t, err, broker.ErrInvalidOption)
		_, err = patterns.PartitionedRoutingKey("orders", "k", n)
		require.ErrorIs(t, err, broker.ErrInvalidOption)
	}
	p, err := patterns.Partition("order-42", 1<<32)
	require.NoError(t, err, "a partition count wider than the hash is not a division by zero")
	require.Equal(t, 0x572446f4, p)
}
