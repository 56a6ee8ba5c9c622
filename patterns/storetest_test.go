package patterns_test

import (
	"context"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/acemq/acemq-flow/patterns"
	"github.com/acemq/acemq-flow/patterns/storetest"
)

// The in-memory stores pass the conformance suites the PostgreSQL ones
// pass (persistence's tests run them there). An instance is the only
// holder of its keys and the only claimant of its records, and adding to
// its outbox joins no transaction, so those rules are skipped.

func TestInMemoryIdempotencyStoreConformance(t *testing.T) {
	t.Parallel()
	storetest.Idempotency(t, func(t *testing.T, cfg storetest.IdempotencyConfig) storetest.IdempotencyStores {
		s, err := patterns.NewInMemoryIdempotencyStore(cfg.Lease)
		require.NoError(t, err)
		return storetest.IdempotencyStores{Store: s, OneWindow: true}
	})
}

func TestInMemoryOutboxStoreConformance(t *testing.T) {
	t.Parallel()
	storetest.Outbox(t, func(t *testing.T, cfg storetest.OutboxConfig) storetest.OutboxStores {
		s, err := patterns.NewInMemoryOutboxStore(patterns.InMemoryOutboxStoreConfig{Lease: cfg.Lease, MaxAttempts: cfg.MaxAttempts})
		require.NoError(t, err)
		return storetest.OutboxStores{
			Store:   s,
			Add:     s.Add,
			Records: func(context.Context) ([]patterns.OutboxRecord, error) { return s.Records(), nil },
		}
	})
}

func TestInMemorySchemaRegistryConformance(t *testing.T) {
	t.Parallel()
	storetest.Schemas(t, func(*testing.T) storetest.SchemaRegistries {
		return storetest.SchemaRegistries{Registry: patterns.NewInMemorySchemaRegistry()}
	})
}
