// Command flowbin is acemq-flow built with the chaos flows (package
// chaosflow), as a user's own main is: cli.Main gives it every operator
// command, and the chaos driver runs its `worker` as separate processes.
// The flows are named after CHAOS_PREFIX (default "chaos"), and their
// effects go to ACEMQ_DATABASE_URL, the database the workers journal in.
// CHAOS_FLOW_VERSION, when set, adds the deploy flow at that version
// (chaosflow.DeployFlow: 1, 2 or 2-unrenamed), so that one binary is both
// sides of the rolling deploy of scenario 10.
package main

import (
	"fmt"
	"os"

	"github.com/acemq/acemq-flow/cmd/acemq-flow/cli"
	"github.com/acemq/acemq-flow/internal/chaos/chaosflow"
)

func main() {
	prefix := os.Getenv("CHAOS_PREFIX")
	if prefix == "" {
		prefix = "chaos"
	}
	fx, err := chaosflow.NewEffects(os.Getenv("ACEMQ_DATABASE_URL"), chaosflow.WorkerName())
	if err != nil {
		fmt.Fprintln(os.Stderr, "chaos flows:", err)
		os.Exit(1)
	}
	flows := chaosflow.Flows(prefix, fx)
	if v := os.Getenv("CHAOS_FLOW_VERSION"); v != "" {
		deploy, err := chaosflow.DeployFlow(prefix, fx, v)
		if err != nil {
			fmt.Fprintln(os.Stderr, "chaos flows: CHAOS_FLOW_VERSION:", err)
			os.Exit(1)
		}
		flows = append(flows, deploy)
	}
	cli.Main(flows...)
}
