package cli

import (
	"context"
	"fmt"
	"strings"

	"github.com/spf13/cobra"

	"github.com/acemq/acemq-flow/engine"
	"github.com/acemq/acemq-flow/engine/journal"
)

func (a *app) replayCommand() *cobra.Command {
	cmd := a.moveCommand(moveSpec{
		use:   "replay <run-id> [--from STEP] | replay --flow F --status failed [--from STEP] [--where EXPR] ...",
		short: "Send a failed run's message back to the step that gave it up, or re-run a run from any step; or many runs at once",
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
			"status 130.\n\n" +
			"--from STEP re-runs a completed, ended, failed or compensated run from STEP instead, on the\n" +
			"input STEP had in that run (the journal keeps each step's input, up to 64 KiB, as long as it\n" +
			"keeps the run), on the flow's current version: STEP and every step after it run again. Nothing\n" +
			"is compensated first; the compensations owed for the steps before STEP are carried on (none\n" +
			"for a compensated run); a failed run's given-up message leaves its dead-letter queue. With\n" +
			"the bulk flags, --status takes completed, ended, failed or compensated (comma-separated).\n" +
			"--reason is recorded in the run's timeline, with who asked (--actor, default the OS user).\n\n" + runIDHelp,
		verb: "replayed",
		from: true,
		move: (*engine.Engine).ReplayWith,
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
			"failed is refused. --reason is recorded in the run's timeline, with who asked (--actor,\n" +
			"default the OS user).\n\n" + runIDHelp,
		verb: "sent to be compensated",
		move: (*engine.Engine).CompensateWith,
	})
}

// moveSpec is a command that moves a failed run's message: replay or
// compensate.
type moveSpec struct {
	use, short, long string
	// verb says what happened to the run, for people.
	verb string
	move func(*engine.Engine, context.Context, string, engine.Action) (engine.Moved, error)
	// bulk, when set, adds the flags of a move of many runs, used when no
	// run id is given.
	bulk func(cmd *cobra.Command, s *session, f bulkFlags, output outputFormat) error
	// from adds --from: a replay from a step (ReplayFrom).
	from bool
}

func (a *app) moveCommand(spec moveSpec) *cobra.Command {
	var (
		bf     brokerFlags
		output outputFormat
		many   bulkFlags
		from   fromFlags
		by     actionFlags
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
				if err := many.check(from); err != nil {
					return fmt.Errorf("%s: %w", name, err)
				}
				s, err := a.openSession(cmd, sessionConfig{broker: bf})
				if err != nil {
					return err
				}
				defer s.close(cmd.Context(), &err)
				many.from, many.reason = from.step, by.reason
				return spec.bulk(cmd, s, many, output)
			}
			if from.step == "" && cmd.Flags().Changed("from") {
				return fmt.Errorf("%s: --from needs a step", name)
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
			if from.step != "" {
				return replayFrom(cmd, s, id, from.step, by, output)
			}
			moved, err := spec.move(s.eng, cmd.Context(), id, by.action())
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
	if spec.from {
		cmd.Flags().StringVar(&from.step, "from", "", "re-run the run from this step, on the input it had there, on the flow's current version")
	}
	by.add(cmd, "why, recorded in the run's timeline")
	return cmd
}

// fromFlags are a replay's --from.
type fromFlags struct{ step string }

// replayFrom re-runs run id from step and says what it did: a table, or
// one JSON document; by says who asked and why.
func replayFrom(cmd *cobra.Command, s *session, id, step string, by actionFlags, output outputFormat) error {
	a := by.action()
	res, err := s.eng.ReplayFrom(cmd.Context(), id, engine.ReplayFromRequest{Step: step, Reason: a.Reason, Actor: a.Actor})
	if err != nil {
		return fmt.Errorf("replay: %w", err)
	}
	if output == outputJSON {
		return writeJSON(cmd.OutOrStdout(), res)
	}
	carried := "none"
	if len(res.Carried) > 0 {
		carried = strings.Join(res.Carried, ", ")
	}
	t := newTable(cmd.OutOrStdout())
	t.row("RUN", res.RunID)
	t.row("FLOW", res.Flow)
	t.row("WAS", string(res.Was))
	t.row("FROM STEP", res.Step+" (sent to "+res.Queue+")")
	t.row("ROUTE", strings.Join(res.Route, " → "))
	if res.Version != "" {
		t.row("VERSION", res.Version)
	}
	t.row("INPUT", fmt.Sprintf("%d bytes, of replay %d (%s)", res.InputSize, res.InputReplay, res.InputFrom))
	t.row("REPLAYS", fmt.Sprint(res.Replays))
	t.row("COMPENSATIONS CARRIED", carried)
	if res.Was == journal.Failed {
		t.row("DEAD-LETTERED", count(res.Discarded, "message")+" taken out of the dead-letter queue")
	}
	return t.flush()
}
