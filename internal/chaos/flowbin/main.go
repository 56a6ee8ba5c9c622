// Command flowbin is acemq-flow built with the chaos flows (package
// chaosflow), as a user's own main is: cli.Main gives it every operator
// command, and the chaos driver runs its `worker` as separate processes.
// The flows are named after CHAOS_PREFIX (default "chaos"), and their
// effects go to ACEMQ_DATABASE_URL, the database the workers journal in.
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
	cli.Main(chaosflow.Flows(prefix, fx)...)
}
