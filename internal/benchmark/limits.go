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
// in the journal's tables, taken with the claim of the step's work and
// given back with its confirm): what the limit costs. Each side runs
// cfg.N runs in two halves, in the order plain, keyed, keyed, plain, so
// that a machine getting slower or faster over the measurement weighs on
// both alike. Without cfg.DB, ErrNoDatabase.
func Limits(ctx context.Context, cfg Config) ([]Result, error) {
	cfg, err := cfg.withDefaults()
	if err != nil {
		return nil, err
	}
	if cfg.DB == nil {
		return nil, fmt.Errorf("limits: %w: it needs PostgreSQL", ErrNoDatabase)
	}
	var plain, keyed Measurement
	half := []int{max(cfg.N/2, 1), max(cfg.N-cfg.N/2, 1)}
	for i, keys := range []bool{false, true, true, false} {
		n := half[i/2]
		lim, side, what := keyLimit{}, &plain, "runs of a one-step flow"
		if keys {
			lim, side, what = keyLimit{keys: LimitKeys, n: LimitPlaces}, &keyed, fmt.Sprintf("runs, the step with a ConcurrencyKey over %d keys", LimitKeys)
		}
		cfg.step(fmt.Sprintf("limits: %d %s (%d of 4)", n, what, i+1))
		m, err := engineRuns(ctx, cfg, AllOnPostgres, []string{"ship"}, n, lim)
		if err != nil {
			return nil, err
		}
		*side = side.and(m)
	}
	return []Result{
		figure("limits", "a step with a ConcurrencyKey", "runs/s", HigherIsBetter, keyed.Rate(), keyed).withCPU(keyed).
			compare("the same step without one", plain.Rate(), plain, true).
			noted(fmt.Sprintf("%d runs over %d keys, %d place each, %d handlers, in halves (plain, keyed, keyed, plain); journal, idempotency store and limits on PostgreSQL",
				cfg.N, LimitKeys, LimitPlaces, FlowConcurrency)),
	}, nil
}
