package patterns_test

import (
	"fmt"
	"strings"

	"github.com/acemq/acemq-flow/broker"
	"github.com/acemq/acemq-flow/patterns"
)

func ExampleNewClaimCheckCodec() {
	store := patterns.NewInMemoryClaimCheckStore()
	codec, err := patterns.NewClaimCheckCodec(broker.JSON, store)
	if err != nil {
		fmt.Println(err)
		return
	}
	// Use it for a whole connection with broker.Config{Codec: codec}, or per
	// call with broker.WithCodec(codec).
	small, _ := codec.Encode(map[string]string{"id": "r-1"})
	fmt.Printf("% x\n", small[:3])
	big, _ := codec.Encode(map[string]string{"scan": strings.Repeat("x", 1<<20)})
	fmt.Printf("% x, %d bytes on the wire, %d in the store\n", big[:3], len(big), store.Len())

	key, ok := patterns.ClaimCheckKeyOf(big)
	fmt.Println(ok, len(key))
	var doc map[string]string
	fmt.Println(codec.Decode(big, &doc), len(doc["scan"]))
	// Output:
	// ac 01 00
	// ac 01 01, 39 bytes on the wire, 1 in the store
	// true 36
	// <nil> 1048576
}
