// Package cli is the acemq-flow command line as a library: a user's own
// worker binary calls [Main] (or builds on [NewRoot]) and gets every
// operator command.
//
// Every flag has an environment fallback, ACEMQ_ followed by the flag's
// name in upper case with dashes as underscores (--url is ACEMQ_URL); a
// flag given on the command line wins. Data goes to standard output, logs
// and errors to standard error, and a failed command exits with status 1.
// Without --url the commands that need a broker run on the embedded
// in-process one and say so.
package cli

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"os"
	"os/signal"
	"strings"
	"syscall"

	"github.com/spf13/cobra"
	"github.com/spf13/pflag"

	"github.com/acemq/acemq-flow/broker"
)

// Version is the acemq-flow version, set when building with
//
//	-ldflags "-X github.com/acemq/acemq-flow/cmd/acemq-flow/cli.Version=v1.2.3"
var Version = "dev"

// EmbeddedURL is the broker used when no --url is given: the in-process
// loopback, which needs nothing installed.
const EmbeddedURL = "memory://"

// envPrefix starts the environment fallback of every flag.
const envPrefix = "ACEMQ_"

// lookupEnv reads one environment variable; os.LookupEnv outside tests.
type lookupEnv func(key string) (string, bool)

// Main runs the command line with the process's arguments and environment,
// cancelling the command's context on SIGINT or SIGTERM so that a running
// command can finish cleanly, and exits with status 1 if the command fails.
func Main() {
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	code := run(ctx, os.LookupEnv, os.Args[1:], os.Stdout, os.Stderr)
	stop()
	os.Exit(code)
}

// NewRoot builds the acemq-flow command tree, reading flag fallbacks from
// the process environment. Execute it with ExecuteContext.
func NewRoot() *cobra.Command { return newRoot(os.LookupEnv) }

// run executes the command tree with args and returns the exit status.
func run(ctx context.Context, env lookupEnv, args []string, stdout, stderr io.Writer) int {
	root := newRoot(env)
	root.SetArgs(args)
	root.SetOut(stdout)
	root.SetErr(stderr)
	if err := root.ExecuteContext(ctx); err != nil {
		fmt.Fprintf(stderr, "acemq-flow: %v\n", err)
		return 1
	}
	return 0
}

// app is what the commands share: the environment and the global flags.
type app struct {
	env      lookupEnv
	logLevel slog.Level
}

func newRoot(env lookupEnv) *cobra.Command {
	a := &app{env: env, logLevel: slog.LevelWarn}
	root := &cobra.Command{
		Use:   "acemq-flow",
		Short: "A workflow engine for Go services on RabbitMQ",
		Long: "acemq-flow runs pipelines and sagas on RabbitMQ, on the AceMQ wire contract.\n\n" +
			"Every flag can also be set from the environment: ACEMQ_ followed by the flag's name\n" +
			"in upper case, dashes as underscores (--url is ACEMQ_URL).",
		SilenceUsage:      true,
		SilenceErrors:     true,
		PersistentPreRunE: func(cmd *cobra.Command, _ []string) error { return a.applyEnv(cmd) },
	}
	root.PersistentFlags().Var(levelFlag{&a.logLevel}, "log-level", "least severe log level written to stderr: debug, info, warn or error")
	root.AddCommand(a.versionCommand(), a.topologyCommand(), a.demoCommand())
	documentEnv(root)
	return root
}

// envName is the environment fallback of a flag.
func envName(flag string) string {
	return envPrefix + strings.ToUpper(strings.ReplaceAll(flag, "-", "_"))
}

// applyEnv sets every flag of cmd not given on the command line from its
// environment fallback, if that is set.
func (a *app) applyEnv(cmd *cobra.Command) error {
	var errs []error
	cmd.Flags().VisitAll(func(f *pflag.Flag) {
		if f.Changed || f.Name == "help" {
			return
		}
		v, ok := a.env(envName(f.Name))
		if !ok {
			return
		}
		if err := f.Value.Set(v); err != nil {
			errs = append(errs, fmt.Errorf("%s=%q: %w", envName(f.Name), v, err))
		}
	})
	return errors.Join(errs...)
}

// documentEnv appends each flag's environment fallback to its help text.
func documentEnv(root *cobra.Command) {
	seen := map[*pflag.Flag]bool{}
	var walk func(c *cobra.Command)
	walk = func(c *cobra.Command) {
		for _, fs := range []*pflag.FlagSet{c.PersistentFlags(), c.LocalNonPersistentFlags()} {
			fs.VisitAll(func(f *pflag.Flag) {
				if seen[f] || f.Name == "help" {
					return
				}
				seen[f] = true
				f.Usage += " [$" + envName(f.Name) + "]"
			})
		}
		for _, sub := range c.Commands() {
			walk(sub)
		}
	}
	walk(root)
}

// logger writes the library's logs to the command's stderr.
func (a *app) logger(cmd *cobra.Command) *slog.Logger {
	return slog.New(slog.NewTextHandler(cmd.ErrOrStderr(), &slog.HandlerOptions{Level: a.logLevel}))
}

// open connects to url, or to the embedded broker when url is empty,
// saying so on stderr.
func (a *app) open(cmd *cobra.Command, url, ladder string) (*broker.Conn, error) {
	if url == "" {
		url = EmbeddedURL
		fmt.Fprintln(cmd.ErrOrStderr(), "using the embedded in-process broker (set ACEMQ_URL to use RabbitMQ)")
	}
	conn, err := broker.Config{Logger: a.logger(cmd), Ladder: ladder}.Open(cmd.Context(), url)
	if err != nil {
		return nil, fmt.Errorf("connect: %w", err)
	}
	return conn, nil
}

// closeConn closes conn, even after the command's context was cancelled,
// and adds a failure to *err.
func closeConn(ctx context.Context, conn *broker.Conn, err *error) {
	if cerr := conn.Close(context.WithoutCancel(ctx)); cerr != nil {
		*err = errors.Join(*err, fmt.Errorf("close connection to %s: %w", conn.Name(), cerr))
	}
}

// addURLFlag registers --url on cmd.
func addURLFlag(cmd *cobra.Command, url *string) {
	cmd.Flags().StringVar(url, "url", "", "broker URL: amqp://user:password@host:5672/vhost for RabbitMQ, "+EmbeddedURL+" for the embedded broker (default: the embedded broker)")
}

// addLadderFlag registers --ladder on fs.
func addLadderFlag(fs *pflag.FlagSet, ladder *string) {
	fs.StringVar(ladder, "ladder", broker.DefaultLadder, "name of the scheduler ladder: its exchange and the prefix of its queues")
}

// outputFormat is the value of --output.
type outputFormat string

// Output formats.
const (
	outputText outputFormat = "text"
	outputJSON outputFormat = "json"
)

func (o *outputFormat) String() string { return string(*o) }

func (o *outputFormat) Set(s string) error {
	switch f := outputFormat(s); f {
	case outputText, outputJSON:
		*o = f
		return nil
	default:
		return fmt.Errorf("unknown output format %q, want text or json", s)
	}
}

func (o *outputFormat) Type() string { return "text|json" }

// addOutputFlag registers --output on cmd, defaulting to text.
func addOutputFlag(cmd *cobra.Command, o *outputFormat) {
	*o = outputText
	cmd.Flags().VarP(o, "output", "o", "output format: text or json")
}

// levelFlag is the value of --log-level.
type levelFlag struct{ level *slog.Level }

func (l levelFlag) String() string {
	if l.level == nil {
		return ""
	}
	return strings.ToLower(l.level.String())
}

func (l levelFlag) Set(s string) error {
	if err := l.level.UnmarshalText([]byte(s)); err != nil {
		return fmt.Errorf("unknown log level %q, want debug, info, warn or error", s)
	}
	return nil
}

func (l levelFlag) Type() string { return "level" }
