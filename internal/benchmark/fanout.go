package benchmark

import (
	"context"
	"fmt"
	"runtime"
	"runtime/debug"
	"sync/atomic"

	"github.com/acemq/acemq-flow/dsl"
)

// fanoutPayload is the fan-out run's payload: how many items its ForEach
// hands out (the items are made from it, so the payload stays small).
type fanoutPayload struct {
	Items int `json:"items"`
}

// fanoutSum is what the fan-out's join makes of every item's output.
type fanoutSum struct {
	Items   int  `json:"items"`
	InOrder bool `json:"in_order"`
}

// Fanout measures one run whose ForEach hands out cfg.FanoutItems items
// (at most dsl.DefaultForEachConcurrency in flight) to a step that passes
// each on, and joins them, against as many separate runs of a one-step
// flow: items/s against runs/s, and the peak resident set of this process
// (the worker, and the driver that starts the runs) during each. Both keep
// the run journal and the idempotency store on cfg.DB, as workers that
// share them do; without it, ErrNoDatabase.
func Fanout(ctx context.Context, cfg Config) ([]Result, error) {
	cfg, err := cfg.withDefaults()
	if err != nil {
		return nil, err
	}
	if cfg.DB == nil {
		return nil, fmt.Errorf("fanout: %w: it needs PostgreSQL", ErrNoDatabase)
	}
	n := cfg.FanoutItems
	cfg.step(fmt.Sprintf("fanout: one run, a ForEach over %d items", n))
	fan, fanPeak, err := withPeakRSS(func() (Measurement, error) { return FanoutEngine(ctx, cfg, n) })
	if err != nil {
		return nil, err
	}
	cfg.step(fmt.Sprintf("fanout: %d runs of a one-step flow", n))
	one, onePeak, err := withPeakRSS(func() (Measurement, error) {
		return engineRuns(ctx, cfg, AllOnPostgres, []string{"ship"}, n, keyLimit{})
	})
	if err != nil {
		return nil, err
	}
	const scenario = "fanout"
	out := []Result{
		figure(scenario, "ForEach in one run", "items/s", HigherIsBetter, fan.Rate(), fan).withCPU(fan).
			compare("one-step runs", one.Rate(), one, true).
			noted(fmt.Sprintf("%d items in one run, at most %d in flight, vs %d runs; journal and idempotency store on PostgreSQL; an item is 1 message (to its step, which settles it at the fork), a one-step run 1",
				n, dsl.DefaultForEachConcurrency, n)),
	}
	if fanPeak > 0 && onePeak > 0 {
		out = append(out, figure(scenario, "ForEach in one run, peak RSS", "MB", LowerIsBetter, megabytes(fanPeak), fan).
			compare("one-step runs, peak RSS", megabytes(onePeak), one, false).
			noted("this process's resident set at its highest during each (the worker and what starts the runs; the broker and the database are other processes)"))
	}
	return out, nil
}

// FanoutEngine runs one run of a flow whose ForEach hands out items items
// to a step that passes each on; the join checks that every output came
// back, in item order, and a last step ends the run. The measurement is of
// the items, from the run's start to its last step; it fails, as every
// measurement does, when nothing progresses for a minute.
func FanoutEngine(ctx context.Context, cfg Config, items int) (_ Measurement, err error) {
	if items < 1 {
		return Measurement{}, fmt.Errorf("fanout: %d items, want at least 1", items)
	}
	cfg, s, err := newScope(ctx, cfg)
	if err != nil {
		return Measurement{}, err
	}
	defer s.close(ctx, &err)
	eng, err := s.engine(ctx, AllOnPostgres)
	if err != nil {
		return Measurement{}, err
	}
	// Every item counts once, as its step first runs, and the run's end
	// once more: a run of many items shows progress, and its end is when
	// the count is full.
	done, got, seen := newCountdown(items+1), make(chan fanoutSum, 1), make([]atomic.Bool, items)
	name := cfg.name("fanout")
	f := dsl.Flow(name,
		dsl.ForEach("each",
			func(_ context.Context, p fanoutPayload) ([]int, error) {
				out := make([]int, p.Items)
				for i := range out {
					out[i] = i
				}
				return out, nil
			},
			dsl.Step("item", func(_ context.Context, i int) (int, error) {
				if i >= 0 && i < items && !seen[i].Swap(true) {
					done.add()
				}
				return i, nil
			}).Prefetch(FlowPrefetch),
			func(_ context.Context, p fanoutPayload, outs []int) (fanoutSum, error) {
				sum := fanoutSum{Items: len(outs), InOrder: true}
				for i, v := range outs {
					sum.InOrder = sum.InOrder && v == i
				}
				return sum, nil
			}),
		dsl.Step("done", func(_ context.Context, sum fanoutSum) (fanoutSum, error) {
			select {
			case got <- sum:
			default:
			}
			done.add()
			return sum, nil
		}))
	if err := s.serve(ctx, eng, f); err != nil {
		return Measurement{}, err
	}
	// An item is one message, to its step: the step settles it at the
	// fork where it ran, and only the last arrival goes to the fork's
	// queue.
	m, err := measureCounted(ctx, 1, items, 1, done, nil, "the fan-out run",
		func(ctx context.Context, _ int) error {
			if _, err := eng.Start(ctx, name, fanoutPayload{Items: items}); err != nil {
				return fmt.Errorf("start the run: %w", err)
			}
			return nil
		})
	if err != nil {
		return Measurement{}, err
	}
	m.Ops = items
	if sum := <-got; sum.Items != items || !sum.InOrder {
		return Measurement{}, fmt.Errorf("fanout: the join got %d outputs (in item order: %t), want %d in order", sum.Items, sum.InOrder, items)
	}
	return m, nil
}

// withPeakRSS runs measure and returns, with its measurement, the
// highest this process's resident set was meanwhile (0 where the system
// does not say). What earlier measurements left on the heap is collected
// and handed back first, so that the peak is measure's own.
func withPeakRSS(measure func() (Measurement, error)) (Measurement, int64, error) {
	runtime.GC()
	debug.FreeOSMemory()
	reset := resetPeakRSS()
	m, err := measure()
	if err != nil || !reset {
		return m, 0, err
	}
	peak, ok := peakRSS()
	if !ok {
		return m, 0, nil
	}
	return m, peak, nil
}

// megabytes is b in MB (10^6 bytes).
func megabytes(b int64) float64 { return float64(b) / 1e6 }
