package cli

import (
	"context"
	"fmt"
	"strings"

	"github.com/spf13/cobra"

	"github.com/acemq/acemq-flow/engine"
)

func (a *app) replayCommand() *cobra.Command {
	cmd := a.moveCommand(moveSpec{
		use:   "replay <run-id> | replay --flow F --status failed [--where EXPR] ...",
		short: "Send a failed run's message back to the step that gave it up; or many failed runs at once",
		long: "Take a failed run's given-up message from its step's dead-letter queue and send it back to\n" +
			"that step: the run goes back to running and continues from there. The run journal says\n" +
			"which queue holds the message; a run it does not know (no database) is looked for by its\n" +
			"x-acemq-run-id in every dead-letter queue of the flows. A run that is not failed is refused.\n\n" +
			"Without a run id, replay many failed runs chosen from the journal (needs a database):\n" +
			"  --flow F --status failed [--since 24h] [--where EXPR] [--limit N] [--rate 100/s] [--dry-run]\n" +
			"EXPR is an expr-lang condition on run (run_id, flow, step, error, attempt, started_at) and\n" +
			"payload (the run's input): 'run.step == \"ship\" && payload.amount_cents > 1000', checked\n" +
			"against --flow's input type before anything is read (a condition on payload needs --flow).\n" +
			"--limit N replays at most N of the runs EXPR accepts, the newest. A terminal shows a progress\n" +
			"bar with the time left; Ctrl-C stops between messages, reports what was done and exits with\n" +
			"status 130.\n\n" + runIDHelp,
		verb: "replayed",
		move: (*engine.Engine).Replay,
		bulk: a.bulkReplay,
	})
	return cmd
}

func (a *app) compensateCommand() *cobra.Command {
	return a.moveCommand(moveSpec{
		use:   "compensate <run-id>",
		short: "Compensate a failed run now instead of replaying it",
		long: "Take a failed run's given-up message from its step's dead-letter queue to the flow's\n" +
			"compensate queue, where a worker undoes the steps the run completed, newest first. A run\n" +
			"held for replay is compensated now rather than when its hold ends. A run that is not\n" +
			"failed is refused.\n\n" + runIDHelp,
		verb: "sent to be compensated",
		move: (*engine.Engine).Compensate,
	})
}

// moveSpec is a command that moves a failed run's message: replay or
// compensate.
type moveSpec struct {
	use, short, long string
	// verb says what happened to the run, for people.
	verb string
	move func(*engine.Engine, context.Context, string) (engine.Moved, error)
	// bulk, when set, adds the flags of a move of many runs, used when no
	// run id is given.
	bulk func(cmd *cobra.Command, s *session, f bulkFlags, output outputFormat) error
}

func (a *app) moveCommand(spec moveSpec) *cobra.Command {
	var (
		bf     brokerFlags
		output outputFormat
		many   bulkFlags
	)
	name, _, _ := strings.Cut(spec.use, " ")
	args := cobra.ExactArgs(1)
	if spec.bulk != nil {
		args = cobra.RangeArgs(0, 1)
	}
	cmd := &cobra.Command{
		Use:   spec.use,
		Short: spec.short,
		Long:  spec.long,
		Args:  args,
		RunE: func(cmd *cobra.Command, args []string) (err error) {
			if len(a.flows) == 0 {
				return fmt.Errorf("%s: %w", name, ErrNoFlows)
			}
			if len(args) == 0 {
				if err := many.check(); err != nil {
					return fmt.Errorf("%s: %w", name, err)
				}
				s, err := a.openSession(cmd, sessionConfig{broker: bf})
				if err != nil {
					return err
				}
				defer s.close(cmd.Context(), &err)
				return spec.bulk(cmd, s, many, output)
			}
			if many.given(cmd) {
				return fmt.Errorf("%s: give a run id or the flags choosing many runs, not both", name)
			}
			s, err := a.openSession(cmd, sessionConfig{broker: bf, noDatabase: noDatabaseMover})
			if err != nil {
				return err
			}
			defer s.close(cmd.Context(), &err)
			id, err := a.resolveRunID(cmd.Context(), s.eng.Journal(), args[0])
			if err != nil {
				return fmt.Errorf("%s: %w", name, err)
			}
			moved, err := spec.move(s.eng, cmd.Context(), id)
			if len(moved.Searched) > 0 {
				fmt.Fprintf(cmd.ErrOrStderr(), "run %s is not in the run journal: looked for it by x-acemq-run-id in %s\n",
					id, strings.Join(moved.Searched, ", "))
			}
			if err != nil {
				return fmt.Errorf("%s: %w", name, err)
			}
			if output == outputJSON {
				return writeJSON(cmd.OutOrStdout(), moved)
			}
			_, err = fmt.Fprintf(cmd.OutOrStdout(), "run %s of %s %s: %s moved from %s to %s\n",
				moved.RunID, moved.Flow, spec.verb, count(moved.Messages, "message"), moved.From, moved.To)
			return err
		},
	}
	bf.add(cmd)
	addOutputFlag(cmd, &output)
	if spec.bulk != nil {
		many.add(cmd)
	}
	return cmd
}
