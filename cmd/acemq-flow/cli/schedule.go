package cli

import (
	"errors"
	"fmt"
	"time"

	"github.com/spf13/cobra"

	"github.com/acemq/acemq-flow/broker"
	"github.com/acemq/acemq-flow/engine"
)

// errScheduleNeedsDatabase: what waits on the ladder is known only to the
// journal every worker writes, which lives in the database.
var errScheduleNeedsDatabase = errors.New("listing and cancelling what waits on the ladder need the run journal every worker writes: give " +
	databaseFlag + " (without a database, each process's journal is its own memory)")

func (a *app) scheduleCommand() *cobra.Command {
	cmd := &cobra.Command{
		Use:   "schedule",
		Short: "What waits on the scheduler ladder: delayed starts, delays, held failed runs and cron triggers",
	}
	cmd.AddCommand(a.scheduleListCommand(), a.scheduleCancelCommand())
	return cmd
}

// scheduleList is what `schedule list -o json` prints.
type scheduleList struct {
	Waiting  []engine.Scheduled   `json:"waiting"`
	Triggers []engine.TriggerInfo `json:"triggers"`
	// Ladder is the control queue's backlog: messages due and not yet
	// moved on. Not zero for long means no worker runs the ladder.
	Ladder ladderState `json:"ladder"`
}

type ladderState struct {
	Queue string `json:"queue"`
	// Backlog is how many messages wait in the control queue now.
	Backlog int `json:"backlog"`
	// Late is how many listed waits are past their due time.
	Late int `json:"late"`
	// BacklogError says why Backlog could not be read ("" when it was).
	BacklogError string `json:"backlog_error,omitempty"`
}

func (a *app) scheduleListCommand() *cobra.Command {
	var (
		bf     brokerFlags
		output outputFormat
		flow   string
		limit  int
	)
	cmd := &cobra.Command{
		Use:   "list",
		Short: "List delayed starts, delays and held failed runs with their due time, and the next firing of each cron trigger",
		Long: "List what waits on the scheduler ladder, soonest first: runs started to run later, runs\n" +
			"waiting before a delayed step, failed runs held for a replay (compensated when the hold\n" +
			"ends), with their due time and how late they are; the next firing of every cron trigger;\n" +
			"and the ladder's backlog (messages due and not yet moved on: it stays above zero when no\n" +
			"worker runs the ladder). Needs the database the workers write their journal to.",
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) (err error) {
			if len(a.flows) == 0 {
				return fmt.Errorf("schedule list: %w", ErrNoFlows)
			}
			s, err := a.openSession(cmd, sessionConfig{broker: bf})
			if err != nil {
				return err
			}
			defer s.close(cmd.Context(), &err)
			if !s.shared() {
				return fmt.Errorf("schedule list: %w", errScheduleNeedsDatabase)
			}
			waiting, err := s.eng.Schedules(cmd.Context(), flow, limit)
			if err != nil {
				return fmt.Errorf("schedule list: %w", err)
			}
			out := scheduleList{Waiting: waiting, Triggers: s.eng.Triggers(), Ladder: ladderState{Queue: s.conn.Ladder() + broker.DueSuffix}}
			if out.Triggers == nil {
				out.Triggers = []engine.TriggerInfo{}
			}
			if flow != "" {
				kept := out.Triggers[:0]
				for _, t := range out.Triggers {
					if t.Flow == flow {
						kept = append(kept, t)
					}
				}
				out.Triggers = kept
			}
			if st, err := s.conn.Transport().Inspect(cmd.Context(), out.Ladder.Queue); err != nil {
				out.Ladder.BacklogError = err.Error()
			} else {
				out.Ladder.Backlog = st.Messages
			}
			for _, w := range waiting {
				if w.Late > 0 {
					out.Ladder.Late++
				}
			}
			if output == outputJSON {
				return writeJSON(cmd.OutOrStdout(), out)
			}
			return printSchedule(cmd, out)
		},
	}
	bf.add(cmd)
	addOutputFlag(cmd, &output)
	cmd.Flags().StringVar(&flow, "flow", "", "only this flow")
	cmd.Flags().IntVar(&limit, "limit", 100, "list this many waits, those due soonest")
	return cmd
}

func printSchedule(cmd *cobra.Command, out scheduleList) error {
	w := cmd.OutOrStdout()
	if len(out.Waiting) == 0 {
		fmt.Fprintln(w, "nothing waits on the ladder")
	} else {
		t := newTable(w)
		t.row("RUN", "FLOW", "KIND", "STEP", "DUE", "LATE")
		for _, s := range out.Waiting {
			late := "-"
			if s.Late > 0 {
				late = s.Late.Round(time.Second).String()
			}
			t.row(s.RunID, s.Flow, s.Kind, s.Step, s.DueAt.Local().Format(time.DateTime), late)
		}
		if err := t.flush(); err != nil {
			return err
		}
	}
	if len(out.Triggers) > 0 {
		fmt.Fprintln(w)
		t := newTable(w)
		t.row("CRON", "FLOW", "NEXT", "MISSED TICKS")
		for _, tr := range out.Triggers {
			t.row(tr.Spec, tr.Flow, tr.Next.Local().Format(time.DateTime), tr.CatchUp)
		}
		if err := t.flush(); err != nil {
			return err
		}
	}
	state := "moving"
	switch {
	case out.Ladder.BacklogError != "":
		state = "backlog unknown: " + out.Ladder.BacklogError
	case out.Ladder.Backlog > 0 && out.Ladder.Late > 0:
		state = "STUCK? messages are due and waits are late: is a worker running?"
	case out.Ladder.Late > 0:
		state = "late: waits past their due time"
	}
	_, err := fmt.Fprintf(w, "\nladder %s: %s due and not yet moved on, %s late: %s\n",
		out.Ladder.Queue, count(out.Ladder.Backlog, "message"), count(out.Ladder.Late, "wait"), state)
	return err
}

func (a *app) scheduleCancelCommand() *cobra.Command {
	var (
		bf     brokerFlags
		output outputFormat
	)
	cmd := &cobra.Command{
		Use:   "cancel <run-id>",
		Short: "Cancel what a run waits for: a delayed start, a delay, or the hold of a failed run",
		Long: "Cancel what a run waits for on the ladder: when its message comes due, the worker drops it\n" +
			"(acknowledged, recorded in the run's timeline) instead of running the step, and the run's\n" +
			"status becomes cancelled. Cancelling the hold of a failed run (HoldForReplay) compensates it\n" +
			"now, as compensate does: the wait for a replay ends, and what the run did is undone. A run\n" +
			"that waits for nothing (already delivered) is refused. Needs the workers' database.\n\n" + runIDHelp,
		Args: cobra.ExactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) (err error) {
			if len(a.flows) == 0 {
				return fmt.Errorf("schedule cancel: %w", ErrNoFlows)
			}
			s, err := a.openSession(cmd, sessionConfig{broker: bf})
			if err != nil {
				return err
			}
			defer s.close(cmd.Context(), &err)
			if !s.shared() {
				return fmt.Errorf("schedule cancel: %w", errScheduleNeedsDatabase)
			}
			id, err := a.resolveRunID(cmd.Context(), s.eng.Journal(), args[0])
			if err != nil {
				return fmt.Errorf("schedule cancel: %w", err)
			}
			c, err := s.eng.Cancel(cmd.Context(), id)
			if err != nil {
				return fmt.Errorf("schedule cancel: %w", err)
			}
			if output == outputJSON {
				return writeJSON(cmd.OutOrStdout(), c)
			}
			if c.Compensating {
				_, err = fmt.Fprintf(cmd.OutOrStdout(), "run %s of %s: its hold for a replay (due %s) is cancelled: it is being compensated now\n",
					c.RunID, c.Flow, c.DueAt.Local().Format(time.DateTime))
				return err
			}
			_, err = fmt.Fprintf(cmd.OutOrStdout(), "run %s of %s cancelled: its %s due %s will not happen\n",
				c.RunID, c.Flow, c.Kind, c.DueAt.Local().Format(time.DateTime))
			return err
		},
	}
	bf.add(cmd)
	addOutputFlag(cmd, &output)
	return cmd
}
