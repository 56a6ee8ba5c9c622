package benchmark

import (
	"context"
	"fmt"
)

// LimitKeys and LimitPlaces are the limits scenario's ConcurrencyKey: 100
// keys, one place each, so that runs of a key do meet (one worker has
// FlowConcurrency handlers) but most find their place free.
const (
	LimitKeys   = 100
	LimitPlaces = 1
)

// Limits measures runs of a one-step flow with the journal and the
// idempotency store on cfg.DB, against the same runs through the same step
// with a ConcurrencyKey over LimitKeys keys, LimitPlaces each (its places
// in the journal's tables, an acquire and a release per run): what the
// limit costs. Without cfg.DB, ErrNoDatabase.
func Limits(ctx context.Context, cfg Config) ([]Result, error) {
	cfg, err := cfg.withDefaults()
	if err != nil {
		return nil, err
	}
	if cfg.DB == nil {
		return nil, fmt.Errorf("limits: %w: it needs PostgreSQL", ErrNoDatabase)
	}
	cfg.step(fmt.Sprintf("limits: %d runs of a one-step flow", cfg.N))
	plain, err := engineRuns(ctx, cfg, allOnPostgres, []string{"ship"}, cfg.N, keyLimit{})
	if err != nil {
		return nil, err
	}
	cfg.step(fmt.Sprintf("limits: %d runs, the step with a ConcurrencyKey over %d keys", cfg.N, LimitKeys))
	keyed, err := engineRuns(ctx, cfg, allOnPostgres, []string{"ship"}, cfg.N, keyLimit{keys: LimitKeys, n: LimitPlaces})
	if err != nil {
		return nil, err
	}
	return []Result{
		figure("limits", "a step with a ConcurrencyKey", "runs/s", HigherIsBetter, keyed.Rate(), keyed).withCPU(keyed).
			compare("the same step without one", plain.Rate(), plain, true).
			noted(fmt.Sprintf("%d runs over %d keys, %d place each, %d handlers; journal, idempotency store and limits on PostgreSQL",
				cfg.N, LimitKeys, LimitPlaces, FlowConcurrency)),
	}, nil
}
