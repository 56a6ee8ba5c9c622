package cli

import (
	"errors"
	"fmt"
	"os"
	"os/user"
	"strings"

	"github.com/spf13/cobra"

	"github.com/acemq/acemq-flow/engine"
)

// errCancelNeedsDatabase: cancel needs the journal the workers share,
// where they learn of the cancellation.
var errCancelNeedsDatabase = errors.New("cancel needs the workers' database (--database-url): they learn of a cancellation from its journal")

func (a *app) cancelCommand() *cobra.Command {
	var (
		bf     brokerFlags
		output outputFormat
		by     actionFlags
	)
	cmd := &cobra.Command{
		Use:   "cancel <run-id> [--reason ...]",
		Short: "Cancel a run that has not ended: stop it and compensate what it did",
		Long: "Cancel a run that has not ended, wherever it is: no further step of it starts, a step in\n" +
			"flight sees its context cancelled (and finishes or is abandoned as its retry policy says),\n" +
			"every completed step with a Compensate is compensated, newest first, and the run ends\n" +
			"cancelled, its timeline saying who asked (the OS user) and why (--reason). A run waiting on\n" +
			"the ladder or for a signal, a run on branches, and its child runs (cancelled too) included.\n" +
			"An unknown run, or one that is over, is refused (exit 1). Needs the workers' database.\n" +
			"(schedule cancel cancels only what a run waits for on the ladder.)\n\n" + runIDHelp,
		Args: cobra.ExactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) (err error) {
			if len(a.flows) == 0 {
				return fmt.Errorf("cancel: %w", ErrNoFlows)
			}
			s, err := a.openSession(cmd, sessionConfig{broker: bf})
			if err != nil {
				return err
			}
			defer s.close(cmd.Context(), &err)
			if !s.shared() {
				return fmt.Errorf("cancel: %w", errCancelNeedsDatabase)
			}
			id, err := a.resolveRunID(cmd.Context(), s.eng.Journal(), args[0])
			if err != nil {
				return fmt.Errorf("cancel: %w", err)
			}
			c, err := s.eng.CancelRun(cmd.Context(), id, engine.CancelRequest{Reason: by.reason, Actor: by.who()})
			if err != nil {
				return err
			}
			if output == outputJSON {
				return writeJSON(cmd.OutOrStdout(), c)
			}
			line := fmt.Sprintf("run %s of %s cancelled at step %s: what it did is being compensated", c.RunID, c.Flow, c.Step)
			if len(c.Children) > 0 {
				line += fmt.Sprintf("; its child runs too: %s", strings.Join(c.Children, ", "))
			}
			_, err = fmt.Fprintln(cmd.OutOrStdout(), line)
			return err
		},
	}
	bf.add(cmd)
	addOutputFlag(cmd, &output)
	by.add(cmd, "why the run is cancelled, kept in its timeline")
	return cmd
}

// actionFlags are --actor and --reason of a command that acts on a run
// (replay, compensate, cancel, signal, start): who asks and why, kept in
// the run's timeline.
type actionFlags struct{ actor, reason string }

// add adds the flags to cmd, --reason saying reason.
func (f *actionFlags) add(cmd *cobra.Command, reason string) {
	cmd.Flags().StringVar(&f.reason, "reason", "", reason)
	cmd.Flags().StringVar(&f.actor, "actor", "", "who asks, kept in the run's timeline (default: the OS user)")
}

// who is the actor: --actor, else the OS user.
func (f actionFlags) who() string {
	if a := strings.TrimSpace(f.actor); a != "" {
		return a
	}
	return osUser()
}

// action is the engine.Action of the flags.
func (f actionFlags) action() engine.Action {
	return engine.Action{Actor: f.who(), Reason: strings.TrimSpace(f.reason)}
}

// osUser is who runs the command, for the record of what it did: the OS
// user's name ("" when it cannot be told).
func osUser() string {
	if u, err := user.Current(); err == nil && u.Username != "" {
		return u.Username
	}
	return os.Getenv("USER")
}
