package cli

import (
	"fmt"
	"log/slog"

	"github.com/spf13/cobra"

	"github.com/acemq/acemq-flow/workflows"
)

func (a *app) demoCommand() *cobra.Command {
	var cfg workflows.DemoConfig
	cmd := &cobra.Command{
		Use:   "demo",
		Short: "Run four orders through the place-order flow and print each run's timeline",
		Long: "Run four orders through the place-order flow, on its stand-in services, with a worker in\n" +
			"this process, and print each run's timeline as the run journal recorded it: one\n" +
			"completes; one is retried through the scheduler ladder and completes; one is given up\n" +
			"after its card was charged and, instead of waiting ten minutes held for a replay, is\n" +
			"compensated at once, as `" + a.name + " compensate <run-id>` would do (the refund shows in\n" +
			"its timeline); one waits on the ladder until its ship_at, then completes. It takes a few\n" +
			"seconds.\n\n" +
			"The flow runs as " + workflows.DefaultDemoFlow + ", so that the demo never touches the queues of a\n" +
			"worker running place-order, on a scheduler ladder of the demo's own, and its journal is in\n" +
			"memory whatever --database-url says. The demo deletes the flow's queues and exchange, and\n" +
			"its ladder, when it ends.",
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			if !a.logLevelSet {
				// Its runs fail and are compensated on purpose: their
				// timelines say so, not WARN lines about each.
				a.logLevel = slog.LevelError
			}
			if cfg.URL == "" {
				fmt.Fprintln(cmd.ErrOrStderr(), "using the embedded in-process broker (set ACEMQ_URL to use RabbitMQ)")
			}
			cfg.Logger = a.logger(cmd)
			return cfg.Run(cmd.Context(), cmd.OutOrStdout())
		},
	}
	cmd.Flags().StringVar(&cfg.URL, "url", "", urlUsage+" (default: "+EmbeddedURL+")")
	cmd.Flags().StringVar(&cfg.Ladder, "ladder", workflows.DefaultDemoLadder,
		"the demo's own scheduler ladder, which it deletes when it ends: never one that workers use (it refuses acemq.schedule, and any other ladder that exists already but its default)")
	// Its own, so not ACEMQ_LADDER: the workers' ladder is what that names.
	setFlagEnv(cmd.Flags(), "ladder", "")
	cmd.Flags().DurationVar(&cfg.Timeout, "timeout", workflows.DefaultDemoTimeout, "how long the demo may take")
	return cmd
}
