package patterns

import (
	"fmt"
	"hash/fnv"
	"strconv"

	"github.com/acemq/acemq-flow/broker"
)

// Partition is the partition of n that key belongs to: FNV-1a 32-bit over
// the key's UTF-8 bytes, mod n, the same number in every AceMQ library
// (docs/wire.md), so a Go publisher and a Ruby consumer agree where a key
// lives. n < 1 is refused with an error matching broker.ErrInvalidOption.
func Partition(key string, n int) (int, error) {
	if n < 1 {
		return 0, fmt.Errorf("%w: %d partitions, want at least 1", broker.ErrInvalidOption, n)
	}
	h := fnv.New32a()
	_, _ = h.Write([]byte(key)) // a hash.Hash never returns an error
	return int(uint64(h.Sum32()) % uint64(n)), nil
}

// PartitionedRoutingKey is prefix + "." + Partition(key, n), e.g.
// "orders.4" for ("orders", "order-42", 8): the routing key of the
// partition's queue.
func PartitionedRoutingKey(prefix, key string, n int) (string, error) {
	p, err := Partition(key, n)
	if err != nil {
		return "", err
	}
	return prefix + "." + strconv.Itoa(p), nil
}
