// Command acemq-flow is the acemq-flow command line: the operator commands
// of package cli, with the flows of package workflows.
package main

import (
	"github.com/acemq/acemq-flow/cmd/acemq-flow/cli"
	"github.com/acemq/acemq-flow/workflows"
)

func main() { cli.Main(workflows.Flows()...) }
