package patterns_test

import (
	"context"
	"errors"
	"fmt"

	"github.com/acemq/acemq-flow/patterns"
)

// Registering the same definition again returns the same id; a new
// definition is the subject's next version.
func ExampleInMemorySchemaRegistry() {
	ctx := context.Background()
	registry := patterns.NewInMemorySchemaRegistry()
	v1, _ := registry.Register(ctx, "order.placed", "avro", []byte(`{"type":"record","name":"OrderPlaced"}`))
	again, _ := registry.Register(ctx, "order.placed", "avro", []byte(`{"type":"record","name":"OrderPlaced"}`))
	v2, _ := registry.Register(ctx, "order.placed", "avro", []byte(`{"type":"record","name":"OrderPlacedV2"}`))
	latest, _ := registry.Latest(ctx, "order.placed")
	fmt.Println(v1.ID == again.ID, v2.Version, latest.ID == v2.ID)

	_, err := registry.ByID(ctx, 404)
	fmt.Println(errors.Is(err, patterns.ErrSchemaNotFound))
	// Output:
	// true 2 true
	// true
}
