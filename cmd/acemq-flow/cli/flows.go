package cli

import (
	"context"
	"fmt"
	"strconv"
	"strings"

	"github.com/spf13/cobra"

	"github.com/acemq/acemq-flow/broker"
	"github.com/acemq/acemq-flow/engine"
)

func (a *app) flowsCommand() *cobra.Command {
	cmd := &cobra.Command{
		Use:   "flows",
		Short: "List the flows of this binary, or show what one becomes",
	}
	cmd.AddCommand(a.flowsListCommand(), a.flowsShowCommand(), a.flowsCheckCommand(), a.flowsDeleteDrainedCommand())
	return cmd
}

func (a *app) flowsListCommand() *cobra.Command {
	var output outputFormat
	cmd := &cobra.Command{
		Use:   "list",
		Short: "List the flows: name, version, form, steps and input type",
		Args:  cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			infos, err := a.describeFlows(cmd.Context(), func(e *engine.Engine) ([]engine.FlowInfo, error) { return e.Flows(), nil })
			if err != nil {
				return err
			}
			if output == outputJSON {
				return writeJSON(cmd.OutOrStdout(), infos)
			}
			if len(infos) == 0 {
				fmt.Fprintln(cmd.ErrOrStderr(), "no flows: this binary was built without any (cli.Main(flows...))")
				return nil
			}
			t := newTable(cmd.OutOrStdout())
			t.row("NAME", "VERSION", "FORM", "STEPS", "INPUT")
			for _, fi := range infos {
				names := make([]string, len(fi.Steps))
				for i, s := range fi.Steps {
					names[i] = s.Name
				}
				t.row(fi.Name, fi.Version, fi.Form, strings.Join(names, ", "), fi.Input)
			}
			return t.flush()
		},
	}
	addOutputFlag(cmd, &output)
	return cmd
}

func (a *app) flowsShowCommand() *cobra.Command {
	var output outputFormat
	cmd := &cobra.Command{
		Use:   "show <flow>",
		Short: "Show a flow's steps (queue, retry, timeout, when, delay, compensation, ordering, concurrency) and its example payload",
		Args:  cobra.ExactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			infos, err := a.describeFlows(cmd.Context(), func(e *engine.Engine) ([]engine.FlowInfo, error) {
				fi, err := e.Flow(args[0])
				return []engine.FlowInfo{fi}, err
			})
			if err != nil {
				return err
			}
			if output == outputJSON {
				return writeJSON(cmd.OutOrStdout(), infos[0])
			}
			return writeFlow(cmd, a.name, infos[0])
		},
	}
	addOutputFlag(cmd, &output)
	return cmd
}

// describeFlows registers the app's flows with an engine on a private
// in-process broker (describing a flow needs no broker, but an engine
// needs a connection, and this one says nothing on stderr) and asks it.
func (a *app) describeFlows(ctx context.Context, ask func(*engine.Engine) ([]engine.FlowInfo, error)) (_ []engine.FlowInfo, err error) {
	conn, err := broker.Open(ctx, EmbeddedURL)
	if err != nil {
		return nil, err
	}
	defer closeConn(ctx, conn, &err)
	eng, err := engine.New(engine.Config{Conn: conn})
	if err != nil {
		return nil, err
	}
	defer func() {
		if cerr := eng.Close(context.WithoutCancel(ctx)); cerr != nil && err == nil {
			err = cerr
		}
	}()
	if err := eng.Register(a.flows...); err != nil {
		return nil, fmt.Errorf("register flows: %w", err)
	}
	infos, err := ask(eng)
	if err != nil {
		return nil, err
	}
	if infos == nil {
		infos = []engine.FlowInfo{}
	}
	return infos, nil
}

// writeFlow shows one flow for a person: the flow, its graph (the route,
// a fork's branches under it), then each step with the settings it has,
// in the graph's order, then the example payload and the command of the
// binary program that starts a run with it.
func writeFlow(cmd *cobra.Command, program string, fi engine.FlowInfo) error {
	out := cmd.OutOrStdout()
	t := newTable(out)
	t.row("flow", fi.Name)
	t.row("version", fi.Version)
	t.row("form", fi.Form)
	t.row("exchange", fi.Exchange)
	t.row("input", fi.Input)
	if fi.HoldForReplay != "" {
		t.row("hold for replay", fi.HoldForReplay)
	}
	t.row("compensate queue", fi.CompensateQueue)
	if err := t.flush(); err != nil {
		return err
	}
	heading := "\nroute:"
	if fi.Form == "routing slip" {
		heading = "\nsteps (each run's itinerary picks its route from them):"
	}
	if _, err := fmt.Fprintln(out, heading); err != nil {
		return err
	}
	for _, l := range flowGraph(fi, graphWidth-2) {
		if _, err := fmt.Fprintln(out, "  "+l); err != nil {
			return err
		}
	}
	t = newTable(out)
	for _, p := range flowPlaces(fi) {
		s := p.step
		t.row("")
		if s.External {
			t.row(p.title(), s.Name+" (served by another service)")
		} else {
			t.row(p.title(), s.Name)
		}
		field := func(name, value string) {
			if value != "" {
				t.row("  "+name, value)
			}
		}
		if s.Fork != nil {
			field("fork", forkSummary(s.Fork)+"; its queue takes the branches back and runs the join")
		}
		field("queue", s.Queue)
		field("when", s.When)
		field("delay", s.Delay)
		field("delay until", s.DelayUntil)
		field("retry", s.Retry)
		field("timeout", s.Timeout)
		field("compensation", s.Compensation)
		field("compensation retry", s.CompensationRetry)
		field("ordered by", s.OrderedBy)
		if s.ConcurrencyKey != "" {
			field("at most", fmt.Sprintf("%d at once per %s", s.ConcurrencyLimit, s.ConcurrencyKey))
		}
		if s.RateLimit != "" {
			per := ""
			if s.RateKey != "" {
				per = " per " + s.RateKey
			}
			field("rate", s.RateLimit+per)
		}
		if s.Concurrency > 0 {
			field("concurrency", strconv.Itoa(s.Concurrency))
		}
		if s.Prefetch > 0 {
			field("prefetch", strconv.Itoa(s.Prefetch))
		}
		if s.Input != "" {
			field("takes", s.Input+" -> "+s.Output)
		}
	}
	if err := t.flush(); err != nil {
		return err
	}
	if len(fi.ExamplePayload) == 0 {
		return nil
	}
	_, err := fmt.Fprintf(cmd.OutOrStdout(), "\nexample payload:\n  %s\nstart a run with it:\n  %s start %s --payload %s\n",
		fi.ExamplePayload, program, fi.Name, shellQuote(string(fi.ExamplePayload)))
	return err
}
