package cli

import (
	"errors"
	"fmt"

	"github.com/spf13/cobra"
)

// errSignalNeedsDatabase: signal needs the journal the workers share,
// where the run's wait is kept.
var errSignalNeedsDatabase = errors.New("a signal needs the workers' database (--database-url): the run's wait is kept in its journal")

func (a *app) signalCommand() *cobra.Command {
	var (
		bf      brokerFlags
		output  outputFormat
		payload string
		by      actionFlags
	)
	cmd := &cobra.Command{
		Use:   "signal <run-id> <name> --payload '<json>'",
		Short: "Send a run the signal its WaitFor waits for",
		Long: "Send run <run-id> the signal <name> with the JSON payload (--payload -: read it from stdin):\n" +
			"the signal of the flow's dsl.WaitFor of that name. A run waiting there goes on with it; a run\n" +
			"that has not reached the wait yet finds it there when it does (\"kept\"). Sending the same\n" +
			"signal again with the same payload does nothing more. Refused, exit 1: an unknown run, a run\n" +
			"that is over, a flow without that wait, a payload of the wrong type, a second signal with\n" +
			"another payload, a wait that timed out. Needs the workers' database.\n\n" + runIDHelp,
		Args: cobra.ExactArgs(2),
		RunE: func(cmd *cobra.Command, args []string) (err error) {
			if len(a.flows) == 0 {
				return fmt.Errorf("signal: %w", ErrNoFlows)
			}
			body, err := readPayload(payload, cmd.InOrStdin())
			if err != nil {
				return fmt.Errorf("signal: %w", err)
			}
			s, err := a.openSession(cmd, sessionConfig{broker: bf})
			if err != nil {
				return err
			}
			defer s.close(cmd.Context(), &err)
			if !s.shared() {
				return fmt.Errorf("signal: %w", errSignalNeedsDatabase)
			}
			id, err := a.resolveRunID(cmd.Context(), s.eng.Journal(), args[0])
			if err != nil {
				return fmt.Errorf("signal: %w", err)
			}
			sent, err := s.eng.SignalWith(cmd.Context(), id, args[1], body, by.action())
			if err != nil {
				return err
			}
			if output == outputJSON {
				return writeJSON(cmd.OutOrStdout(), sent)
			}
			what := "kept: the run takes it when it reaches its wait"
			if sent.Resumed {
				what = "the run goes on"
			}
			_, err = fmt.Fprintf(cmd.OutOrStdout(), "run %s of %s: signal %s sent, %s\n", sent.RunID, sent.Flow, sent.Signal, what)
			return err
		},
	}
	bf.add(cmd)
	addOutputFlag(cmd, &output)
	cmd.Flags().StringVar(&payload, "payload", "", "the signal's payload as JSON, or - to read it from stdin")
	by.add(cmd, "why the signal is sent, kept in the run's timeline")
	return cmd
}
