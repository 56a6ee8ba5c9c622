package cli

import (
	"fmt"
	"io"

	"github.com/spf13/cobra"

	"github.com/acemq/acemq-flow/broker"
)

func (a *app) topologyCommand() *cobra.Command {
	var ladder string
	cmd := &cobra.Command{
		Use:   "topology",
		Short: "Print or declare the library's own topology (the scheduler ladder)",
	}
	addLadderFlag(cmd.PersistentFlags(), &ladder)
	cmd.AddCommand(a.topologyPrintCommand(&ladder), a.topologyApplyCommand(&ladder))
	return cmd
}

func (a *app) topologyPrintCommand(ladder *string) *cobra.Command {
	var output outputFormat
	cmd := &cobra.Command{
		Use:   "print",
		Short: "Print the scheduler ladder's exchange, queues and bindings",
		Args:  cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			return writeTopology(cmd.OutOrStdout(), broker.LadderTopology(*ladder), output)
		},
	}
	addOutputFlag(cmd, &output)
	return cmd
}

func (a *app) topologyApplyCommand(ladder *string) *cobra.Command {
	var (
		output outputFormat
		url    string
	)
	cmd := &cobra.Command{
		Use:   "apply",
		Short: "Declare the scheduler ladder on the broker and print what was declared",
		Long: "Declare the scheduler ladder's exchange, queues and bindings on the broker, as a\n" +
			"deployment that applies topology up front does. Declaring it again is harmless;\n" +
			"declaring it over queues that exist with other arguments fails.",
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) (err error) {
			conn, err := a.open(cmd, url, *ladder)
			if err != nil {
				return err
			}
			defer closeConn(cmd.Context(), conn, &err)
			if err := conn.DeclareLadder(cmd.Context()); err != nil {
				return fmt.Errorf("topology apply: %w", err)
			}
			fmt.Fprintf(cmd.ErrOrStderr(), "declared scheduler ladder %s on %s\n", conn.Ladder(), conn.Name())
			return writeTopology(cmd.OutOrStdout(), broker.LadderTopology(conn.Ladder()), output)
		},
	}
	addURLFlag(cmd, &url)
	addOutputFlag(cmd, &output)
	return cmd
}

// writeTopology renders t as text (one declaration a line) or JSON.
func writeTopology(w io.Writer, t broker.Topology, output outputFormat) error {
	if output == outputJSON {
		return writeJSON(w, topologyView(t))
	}
	_, err := fmt.Fprintln(w, t.String())
	return err
}

// topologyJSON is the JSON form of a topology.
type topologyJSON struct {
	Exchanges []exchangeJSON `json:"exchanges"`
	Queues    []queueJSON    `json:"queues"`
	Bindings  []bindingJSON  `json:"bindings"`
}

type exchangeJSON struct {
	Name       string       `json:"name"`
	Kind       string       `json:"kind"`
	Durable    bool         `json:"durable"`
	AutoDelete bool         `json:"auto_delete"`
	Internal   bool         `json:"internal"`
	Arguments  broker.Table `json:"arguments,omitempty"`
}

type queueJSON struct {
	Name       string       `json:"name"`
	Durable    bool         `json:"durable"`
	Exclusive  bool         `json:"exclusive"`
	AutoDelete bool         `json:"auto_delete"`
	Arguments  broker.Table `json:"arguments,omitempty"`
}

type bindingJSON struct {
	Exchange   string       `json:"exchange"`
	Queue      string       `json:"queue"`
	RoutingKey string       `json:"routing_key"`
	Arguments  broker.Table `json:"arguments,omitempty"`
}

func topologyView(t broker.Topology) topologyJSON {
	v := topologyJSON{
		Exchanges: make([]exchangeJSON, 0, len(t.Exchanges)),
		Queues:    make([]queueJSON, 0, len(t.Queues)),
		Bindings:  make([]bindingJSON, 0, len(t.Bindings)),
	}
	for _, e := range t.Exchanges {
		v.Exchanges = append(v.Exchanges, exchangeJSON{Name: e.Name, Kind: e.Kind, Durable: e.Durable,
			AutoDelete: e.AutoDelete, Internal: e.Internal, Arguments: e.Args})
	}
	for _, q := range t.Queues {
		v.Queues = append(v.Queues, queueJSON{Name: q.Name, Durable: q.Durable, Exclusive: q.Exclusive,
			AutoDelete: q.AutoDelete, Arguments: q.Args})
	}
	for _, b := range t.Bindings {
		v.Bindings = append(v.Bindings, bindingJSON{Exchange: b.Exchange, Queue: b.Queue, RoutingKey: b.Key, Arguments: b.Args})
	}
	return v
}
