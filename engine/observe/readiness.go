package observe

import (
	"context"
	"fmt"
	"time"

	"github.com/acemq/acemq-flow/engine"
	"github.com/acemq/acemq-flow/engine/journal"
)

// CheckWorker names the readiness check of a worker's own consumers
// (WorkerCheck, WorkerGate).
const CheckWorker = "worker"

// Results runs checks in order, all of them within timeout (0 =
// DefaultCheckTimeout), and says what each found: what /readyz answers,
// acemq.worker.ready serves and a worker's heartbeat reports
// (ReportReadiness). A check still running when the time is up, or one
// that passed only after it, has failed.
func Results(ctx context.Context, checks []Check, timeout time.Duration) []journal.Check {
	if timeout <= 0 {
		timeout = DefaultCheckTimeout
	}
	ctx, cancel := context.WithTimeout(ctx, timeout)
	defer cancel()
	out := make([]journal.Check, len(checks))
	for i, c := range checks {
		out[i].Name = c.Name
		err := c.Run(ctx)
		if err == nil && ctx.Err() != nil {
			err = fmt.Errorf("checks took longer than %s", timeout)
		}
		if err != nil {
			out[i].Error = err.Error()
		}
	}
	return out
}

// WorkerCheck is w's own readiness, named "worker": every one of its
// consumers runs (engine.Worker.Err).
func WorkerCheck(w *engine.Worker) Check {
	return Check{Name: CheckWorker, Run: func(context.Context) error { return w.Err() }}
}

// ReportReadiness is the engine.Config.Readiness of workers whose process
// serves /readyz with checks (the broker, the database): a worker's
// report says what those checks, and the worker's own (WorkerCheck), found
// when it was made, within DefaultCheckTimeout. A check without a name or
// a function is reported failed, as NewServer refuses it.
func ReportReadiness(checks ...Check) func(context.Context, *engine.Worker) []journal.Check {
	return func(ctx context.Context, w *engine.Worker) []journal.Check {
		all := make([]Check, 0, len(checks)+1)
		for _, c := range checks {
			if c.Run == nil {
				c.Run = func(context.Context) error { return fmt.Errorf("check %q has no function", c.Name) }
			}
			all = append(all, c)
		}
		return Results(ctx, append(all, WorkerCheck(w)), 0)
	}
}
