package cli

import (
	"context"
	"slices"
	"strings"
	"time"

	"github.com/spf13/cobra"
	"github.com/spf13/pflag"

	"github.com/acemq/acemq-flow/engine/enginepg"
	"github.com/acemq/acemq-flow/engine/journal"
)

// Dynamic shell completion (the completion command's scripts ask the
// binary through cobra's hidden __complete command):
//
//   - a <flow> or [flow...] argument and --flow: the names of the binary's
//     flows;
//   - a <run-id> argument: the ids of the run journal's runs that begin
//     with what is typed, at most maxCompletedRuns of them, when a
//     database is configured (--database-url or ACEMQ_DATABASE_URL),
//     looked up within completionTimeout; none without one;
//   - --status: the run statuses, one more after each comma;
//   - --output (-o): text and json.
const (
	maxCompletedRuns  = 50
	completionTimeout = 2 * time.Second
)

// registerCompletions gives every command of root's tree its argument's
// and its flags' completions.
func (a *app) registerCompletions(root *cobra.Command) {
	var walk func(c *cobra.Command)
	walk = func(c *cobra.Command) {
		if c.ValidArgsFunction == nil {
			switch firstArg(c.Use) {
			case "<flow>", "[flow...]", "<flow>...":
				c.ValidArgsFunction = a.completeFlowArgs(strings.HasSuffix(firstArg(c.Use), "...]"))
			case "<run-id>", "[run-id]", "[<run-id>]":
				c.ValidArgsFunction = a.completeRunIDArg
			}
		}
		c.LocalNonPersistentFlags().VisitAll(func(f *pflag.Flag) {
			var fn cobra.CompletionFunc
			switch f.Name {
			case "flow":
				fn = func(*cobra.Command, []string, string) ([]string, cobra.ShellCompDirective) {
					return a.flowNames(), cobra.ShellCompDirectiveNoFileComp
				}
			case "status":
				fn = completeStatuses
			case "output":
				fn = cobra.FixedCompletions([]string{string(outputText), string(outputJSON)}, cobra.ShellCompDirectiveNoFileComp)
			default:
				return
			}
			// A flag registered twice keeps its first completion.
			_ = c.RegisterFlagCompletionFunc(f.Name, fn)
		})
		for _, sub := range c.Commands() {
			walk(sub)
		}
	}
	walk(root)
}

// firstArg is the first argument a command's Use names ("" for none).
func firstArg(use string) string {
	fields := strings.Fields(use)
	if len(fields) < 2 {
		return ""
	}
	return fields[1]
}

// flowNames are the names of the binary's flows that were built, sorted.
func (a *app) flowNames() []string {
	var names []string
	for _, f := range a.flows {
		if f != nil && f.Err() == nil {
			names = append(names, f.Name())
		}
	}
	slices.Sort(names)
	return slices.Compact(names)
}

// completeFlowArgs completes a flow argument: the first only, or, when
// many, every one not given already.
func (a *app) completeFlowArgs(many bool) cobra.CompletionFunc {
	return func(_ *cobra.Command, args []string, _ string) ([]string, cobra.ShellCompDirective) {
		if len(args) > 0 && !many {
			return nil, cobra.ShellCompDirectiveNoFileComp
		}
		names := slices.DeleteFunc(a.flowNames(), func(n string) bool { return slices.Contains(args, n) })
		return names, cobra.ShellCompDirectiveNoFileComp
	}
}

// completeStatuses completes --status, a comma-separated list: the
// statuses not listed yet, after what is typed before the last comma.
func completeStatuses(_ *cobra.Command, _ []string, toComplete string) ([]string, cobra.ShellCompDirective) {
	given, last := "", toComplete
	if i := strings.LastIndex(toComplete, ","); i >= 0 {
		given, last = toComplete[:i+1], toComplete[i+1:]
	}
	listed := strings.Split(given, ",")
	var out []string
	for _, st := range journal.Statuses() {
		s := string(st)
		if strings.HasPrefix(s, last) && !slices.Contains(listed, s) {
			out = append(out, given+s)
		}
	}
	return out, cobra.ShellCompDirectiveNoFileComp | cobra.ShellCompDirectiveNoSpace
}

// completeRunIDArg completes a command's first argument, a run id, from
// the run journal: the ids beginning with what is typed, newest matches
// as the journal orders them, at most maxCompletedRuns. Without a
// database, or when it does not answer in time, there is nothing to
// offer.
func (a *app) completeRunIDArg(cmd *cobra.Command, args []string, toComplete string) ([]string, cobra.ShellCompDirective) {
	if len(args) > 0 {
		return nil, cobra.ShellCompDirectiveNoFileComp
	}
	// Completion runs no PersistentPreRunE: read the environment here.
	if err := a.applyEnv(cmd); err != nil || a.databaseURL == "" {
		return nil, cobra.ShellCompDirectiveNoFileComp
	}
	ctx := cmd.Context()
	if ctx == nil {
		ctx = context.Background()
	}
	ctx, cancel := context.WithTimeout(ctx, completionTimeout)
	defer cancel()
	s, err := enginepg.Open(ctx, a.databaseURL, enginepg.Config{Migrations: enginepg.SkipMigrations})
	if err != nil {
		return nil, cobra.ShellCompDirectiveNoFileComp
	}
	defer s.Close()
	runs, err := s.Journal().RunsByIDPrefix(ctx, toComplete, maxCompletedRuns)
	if err != nil {
		return nil, cobra.ShellCompDirectiveNoFileComp
	}
	ids := make([]string, 0, len(runs))
	for _, r := range runs {
		ids = append(ids, r.ID+"\t"+r.Flow+" "+string(r.Status))
	}
	return ids, cobra.ShellCompDirectiveNoFileComp
}
