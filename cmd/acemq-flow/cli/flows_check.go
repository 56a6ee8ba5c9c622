package cli

import (
	"fmt"
	"strconv"
	"strings"

	"github.com/spf13/cobra"

	"github.com/acemq/acemq-flow/engine"
)

func (a *app) flowsCheckCommand() *cobra.Command {
	var (
		bf     brokerFlags
		output outputFormat
	)
	cmd := &cobra.Command{
		Use:   "check [flow...]",
		Short: "Before a deploy: would this binary's flows leave runs where nothing takes them?",
		Long: "Compare each flow of this binary (or the named ones) with the versions of it that workers\n" +
			"served before (the journal remembers them) and with what is at the steps this version does not\n" +
			"have: runs the journal says are there, messages in their queues and in their compensations'\n" +
			"queues. Exit 0 when nothing would be stranded; 1 when something would, as a worker of this\n" +
			"binary would then refuse to start. Needs the broker and, for the versions and the runs, the\n" +
			"workers' database.",
		RunE: func(cmd *cobra.Command, args []string) (err error) {
			s, names, err := a.versionSession(cmd, "flows check", bf, args)
			if err != nil {
				return err
			}
			defer s.close(cmd.Context(), &err)
			checks := make([]engine.FlowCheck, 0, len(names))
			for _, name := range names {
				c, err := s.eng.Check(cmd.Context(), name)
				if err != nil {
					return err
				}
				checks = append(checks, c)
			}
			if output == outputJSON {
				err = writeJSON(cmd.OutOrStdout(), checks)
			} else {
				err = writeChecks(cmd, checks)
			}
			if err != nil {
				return err
			}
			var stranding []engine.FlowCheck
			for _, c := range checks {
				if c.Strands() {
					stranding = append(stranding, c)
				}
			}
			if len(stranding) > 0 {
				return &engine.StrandError{Checks: stranding}
			}
			return nil
		},
	}
	bf.add(cmd)
	addOutputFlag(cmd, &output)
	return cmd
}

// writeChecks shows, per flow, its version against the last one before
// it, then a row per step it does not have that anything is at.
func writeChecks(cmd *cobra.Command, checks []engine.FlowCheck) error {
	t := newTable(cmd.OutOrStdout())
	t.row("FLOW", "VERSION", "BEFORE", "ADDED", "REMOVED", "RESULT")
	for _, c := range checks {
		result := "nothing stranded"
		if c.Strands() {
			result = "would strand runs (below)"
		}
		t.row(c.Flow, c.Version, orDash(c.Before), orDash(strings.Join(c.Added, ", ")), orDash(strings.Join(c.Removed, ", ")), result)
	}
	if err := t.flush(); err != nil {
		return err
	}
	var rows [][]string
	for _, c := range checks {
		for _, s := range c.Strays {
			if s.Holds() || s.DeadLettered > 0 || s.Fate != engine.FateNothing {
				rows = append(rows, []string{c.Flow, s.Step, orDash(strings.Join(s.Versions, ", ")), strconv.Itoa(s.Runs),
					strconv.Itoa(s.Messages), strconv.Itoa(s.Compensations), strconv.Itoa(s.DeadLettered), s.Fate})
			}
		}
	}
	if len(rows) == 0 {
		return nil
	}
	if _, err := fmt.Fprintln(cmd.OutOrStdout(), "\nsteps this binary does not have, and what becomes of what is at them:"); err != nil {
		return err
	}
	t = newTable(cmd.OutOrStdout())
	t.row("FLOW", "STEP", "IN VERSIONS", "RUNS", "MESSAGES", "COMPENSATIONS", "DEAD-LETTERED", "FATE")
	for _, r := range rows {
		t.row(r...)
	}
	if err := t.flush(); err != nil {
		return err
	}
	for _, c := range checks {
		if c.Strands() {
			_, err := fmt.Fprintln(cmd.OutOrStdout(), "\nto resolve what is stranded: run the version that has the step until its queues are empty, "+
				"then deploy this one; or say in the flow what became of the step: dsl.Renamed(old, new), "+
				"dsl.Removed(old, dsl.To(step)) or dsl.Removed(old)")
			return err
		}
	}
	return nil
}

func (a *app) flowsDeleteDrainedCommand() *cobra.Command {
	var (
		bf     brokerFlags
		output outputFormat
	)
	cmd := &cobra.Command{
		Use:   "delete-drained [flow...]",
		Short: "After a deploy: delete the queues of steps the flows no longer have, once they are empty",
		Long: "Delete the queues of each step this binary's flows (or the named ones) no longer have, as\n" +
			"`flows check` lists them: the step's queue and its compensation's, with their dead-letter\n" +
			"and parked queues. A step's queues are left, with the reason, while any of them holds a\n" +
			"message (failed runs in its dead-letter queue included), while something consumes one (a\n" +
			"worker of an older version), or while the flow still says dsl.Renamed or dsl.Removed for it.\n" +
			"The queues are unbound before they are looked at a last time and deleted, so that nothing\n" +
			"can arrive in between.",
		RunE: func(cmd *cobra.Command, args []string) (err error) {
			s, names, err := a.versionSession(cmd, "flows delete-drained", bf, args)
			if err != nil {
				return err
			}
			defer s.close(cmd.Context(), &err)
			type flowDrained struct {
				Flow  string               `json:"flow"`
				Steps []engine.DrainedStep `json:"steps"`
			}
			out := make([]flowDrained, 0, len(names))
			for _, name := range names {
				steps, err := s.eng.DeleteDrained(cmd.Context(), name)
				if err != nil {
					return err
				}
				out = append(out, flowDrained{Flow: name, Steps: steps})
			}
			if output == outputJSON {
				return writeJSON(cmd.OutOrStdout(), out)
			}
			t := newTable(cmd.OutOrStdout())
			t.row("FLOW", "STEP", "QUEUES", "RESULT")
			for _, f := range out {
				for _, d := range f.Steps {
					result := "deleted"
					if !d.Deleted {
						result = "left: " + d.Left
					}
					t.row(f.Flow, d.Step, strings.Join(d.Queues, ", "), result)
				}
			}
			return t.flush()
		},
	}
	bf.add(cmd)
	addOutputFlag(cmd, &output)
	return cmd
}

// versionSession opens the session of a command that compares this
// binary's flows with what older versions left (flows check, flows
// delete-drained), and names the flows to look at: args, or every flow.
func (a *app) versionSession(cmd *cobra.Command, what string, bf brokerFlags, args []string) (*session, []string, error) {
	if len(a.flows) == 0 {
		return nil, nil, fmt.Errorf("%s: %w", what, ErrNoFlows)
	}
	s, err := a.openSession(cmd, sessionConfig{broker: bf,
		noDatabase: "acemq-flow: no --database-url: only this process's journal is looked at, which knows no versions before this one"})
	if err != nil {
		return nil, nil, err
	}
	names := args
	if len(names) == 0 {
		for _, fi := range s.eng.Flows() {
			names = append(names, fi.Name)
		}
	}
	return s, names, nil
}
