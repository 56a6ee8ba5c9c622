package cli

import (
	"github.com/spf13/cobra"

	"github.com/acemq/acemq-flow/workflows"
)

func (a *app) demoCommand() *cobra.Command {
	var (
		url, ladder string
		cfg         workflows.DemoConfig
	)
	cmd := &cobra.Command{
		Use:   "demo",
		Short: "Place a few orders and show what becomes of them: retries through the ladder, and a dead letter",
		Long: "Place four orders on a queue and print what happens to each: two are handled at once,\n" +
			"one fails twice and is handled on its third attempt (each retry travels the scheduler\n" +
			"ladder), and one can never be placed and ends in the queue's .dlq, which the demo then\n" +
			"reads back. The demo deletes its queues when it is done.",
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) (err error) {
			conn, err := a.open(cmd, url, ladder)
			if err != nil {
				return err
			}
			defer closeConn(cmd.Context(), conn, &err)
			return cfg.Run(cmd.Context(), conn, cmd.OutOrStdout())
		},
	}
	addURLFlag(cmd, &url)
	addLadderFlag(cmd.Flags(), &ladder)
	cmd.Flags().StringVar(&cfg.Queue, "queue", workflows.DefaultDemoQueue, "the orders queue; the demo deletes it, with its .dlq and .parked, before and after it runs")
	cmd.Flags().DurationVar(&cfg.Timeout, "timeout", workflows.DefaultDemoTimeout, "how long the demo may take")
	return cmd
}
