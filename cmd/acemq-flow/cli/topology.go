package cli

import (
	"encoding/json"
	"fmt"
	"io"
	"strings"

	"github.com/spf13/cobra"

	"github.com/acemq/acemq-flow/broker"
	"github.com/acemq/acemq-flow/broker/rabbitmq"
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
		output        outputFormat
		url           string
		managementURL string
	)
	cmd := &cobra.Command{
		Use:   "apply",
		Short: "Declare the scheduler ladder on the broker, set the delivery-limit policy, and print what was declared",
		Long: "Declare the scheduler ladder's exchange, queues and bindings on the broker, as a\n" +
			"deployment that applies topology up front does. Declaring it again is harmless;\n" +
			"declaring it over queues that exist with other arguments fails.\n\n" +
			"On RabbitMQ it also sets the policy " + broker.DeliveryLimitPolicyName + " in the URL's virtual host, which gives\n" +
			"every consumer queue (not its .dlq and .parked, nor the ladder's queues) a delivery\n" +
			"limit of " + fmt.Sprint(broker.DeliveryLimit) + ", through the management API (the AMQP node's host, port 15672, or\n" +
			"https on 15671 for amqps://, unless --management-url says otherwise). Where the API\n" +
			"does not answer or refuses, it says so and prints the rabbitmqctl command that sets it.",
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) (err error) {
			rabbit := strings.HasPrefix(url, "amqp://") || strings.HasPrefix(url, "amqps://")
			if managementURL != "" && !rabbit {
				return fmt.Errorf("--management-url (%s) names RabbitMQ's management API, but the broker is not RabbitMQ: set --url to amqp:// or amqps://", envName("management-url"))
			}
			var rc rabbitmq.Config
			if rabbit {
				// Refuses a bad --management-url before anything is declared.
				if err := a.brokerTLS.apply(url, &rc); err != nil {
					return fmt.Errorf("connect: %w", err)
				}
				if _, err := rc.Management(url, rabbitmq.ManagementConfig{URL: managementURL}); err != nil {
					return fmt.Errorf("--management-url: %w", err)
				}
			}
			conn, err := a.open(cmd, url, *ladder)
			if err != nil {
				return err
			}
			defer closeConn(cmd.Context(), conn, &err)
			if err := conn.DeclareLadder(cmd.Context()); err != nil {
				return fmt.Errorf("topology apply: %w", err)
			}
			fmt.Fprintf(cmd.ErrOrStderr(), "declared scheduler ladder %s on %s\n", conn.Ladder(), conn.Name())
			view := topologyView(broker.LadderTopology(conn.Ladder()))
			if rabbit {
				mgmt, err := rc.Management(url, rabbitmq.ManagementConfig{URL: managementURL, Node: conn.Node()})
				if err != nil {
					return fmt.Errorf("--management-url: %w", err)
				}
				view.DeliveryLimitPolicy = setDeliveryLimitPolicy(cmd, mgmt, conn.Ladder())
			}
			if output == outputJSON {
				return writeJSON(cmd.OutOrStdout(), view)
			}
			_, err = fmt.Fprintln(cmd.OutOrStdout(), broker.LadderTopology(conn.Ladder()).String())
			return err
		},
	}
	addURLFlag(cmd, &url)
	cmd.Flags().StringVar(&managementURL, "management-url", "", "RabbitMQ management API to set the delivery-limit policy through, such as http://rabbit-1:15672/ (its user and password win over --url's) (default: the AMQP node's host, port 15672, https on 15671 for amqps://)")
	addOutputFlag(cmd, &output)
	return cmd
}

// policyJSON is what topology apply did about the delivery-limit policy.
type policyJSON struct {
	Name       string         `json:"name"`
	VHost      string         `json:"vhost"`
	Pattern    string         `json:"pattern"`
	ApplyTo    string         `json:"apply_to"`
	Priority   int            `json:"priority"`
	Definition map[string]any `json:"definition"`
	// Set says the management API took it.
	Set bool `json:"set"`
	// ManagementURL is the API it was sent to, without credentials.
	ManagementURL string `json:"management_url"`
	// Error is why it was not set.
	Error string `json:"error,omitempty"`
	// Command is the rabbitmqctl command that sets it.
	Command string `json:"command"`
}

// setDeliveryLimitPolicy sets broker.DeliveryLimitPolicy through mgmt and
// says on stderr whether it did. It never fails the command: the ladder is
// declared either way, and a broker without the management plugin gets
// the rabbitmqctl command to run instead.
func setDeliveryLimitPolicy(cmd *cobra.Command, mgmt *rabbitmq.Management, ladder string) *policyJSON {
	p := broker.DeliveryLimitPolicy(ladder)
	v := &policyJSON{Name: p.Name, VHost: mgmt.VHost(), Pattern: p.Pattern, ApplyTo: p.ApplyTo, Priority: p.Priority,
		Definition: p.Definition, ManagementURL: mgmt.URL(), Command: rabbitmqctlSetPolicy(mgmt.VHost(), p)}
	w := cmd.ErrOrStderr()
	if err := mgmt.SetPolicy(cmd.Context(), p); err != nil {
		v.Error = err.Error()
		fmt.Fprintf(w, "the delivery-limit policy was NOT set: %v\nset it with:\n  %s\n", err, v.Command)
		return v
	}
	v.Set = true
	fmt.Fprintf(w, "set policy %s in vhost %s through %s: %s on every consumer queue (pattern %s)\n",
		p.Name, v.VHost, v.ManagementURL, definitionJSON(p.Definition), p.Pattern)
	return v
}

// rabbitmqctlSetPolicy is the rabbitmqctl command that sets p in vhost,
// quoted to be pasted into a shell.
func rabbitmqctlSetPolicy(vhost string, p rabbitmq.Policy) string {
	return strings.Join([]string{"rabbitmqctl", "set_policy", "-p", shellQuote(vhost), "--apply-to", p.ApplyTo,
		"--priority", fmt.Sprint(p.Priority), shellQuote(p.Name), shellQuote(p.Pattern), shellQuote(definitionJSON(p.Definition))}, " ")
}

// definitionJSON is a policy's definition as RabbitMQ reads it.
func definitionJSON(d map[string]any) string {
	// A definition of JSON values, as every policy here is, marshals.
	b, _ := json.Marshal(d)
	return string(b)
}

// writeTopology renders t as text (one declaration a line) or JSON.
func writeTopology(w io.Writer, t broker.Topology, output outputFormat) error {
	if output == outputJSON {
		return writeJSON(w, topologyView(t))
	}
	_, err := fmt.Fprintln(w, t.String())
	return err
}

// topologyJSON is the JSON form of a topology, and of what topology apply
// did about the delivery-limit policy (on RabbitMQ only).
type topologyJSON struct {
	Exchanges           []exchangeJSON `json:"exchanges"`
	Queues              []queueJSON    `json:"queues"`
	Bindings            []bindingJSON  `json:"bindings"`
	DeliveryLimitPolicy *policyJSON    `json:"delivery_limit_policy,omitempty"`
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
