// Package cli is the acemq-flow command line as a library: a user's own
// worker binary calls [Main] with its flows (or builds on [NewRoot]) and
// gets every operator command for them:
//
//	func main() { cli.Main(orders.PlaceOrder, billing.Invoice) }
//
// Every flag has an environment fallback, ACEMQ_ followed by the flag's
// name in upper case with dashes as underscores (--url is ACEMQ_URL); a
// flag given on the command line wins. Data goes to standard output (one
// JSON document with --output json), logs and errors to standard error, and
// a failed command exits with status 1. Without --url the commands that
// need a broker run on the embedded in-process one and say so; without
// --database-url the run journal and the idempotency store are in memory,
// and the commands that read runs recorded by other processes say that
// they cannot see them.
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
	"go.opentelemetry.io/otel/metric"

	"github.com/acemq/acemq-flow/broker"
	"github.com/acemq/acemq-flow/dsl"
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

// Main runs the command line with the process's arguments and environment
// and the given flows (what worker works, start starts, replay replays),
// cancelling the command's context on SIGINT or SIGTERM so that a running
// command (a worker) can drain, and exits with status 1 if the command
// fails. A flow that was not built is reported by the commands that use
// flows, not by the others.
func Main(flows ...*dsl.FlowDef) {
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	code := run(ctx, os.LookupEnv, flows, os.Args[1:], streams{in: os.Stdin, out: os.Stdout, err: os.Stderr})
	stop()
	os.Exit(code)
}

// NewRoot builds the acemq-flow command tree for flows, reading flag
// fallbacks from the process environment. Execute it with ExecuteContext.
func NewRoot(flows ...*dsl.FlowDef) *cobra.Command { return newRoot(os.LookupEnv, flows) }

// streams are a command's standard input, output and error.
type streams struct {
	in       io.Reader
	out, err io.Writer
}

// run executes the command tree with args and returns the exit status.
func run(ctx context.Context, env lookupEnv, flows []*dsl.FlowDef, args []string, s streams) int {
	root := newRoot(env, flows)
	root.SetArgs(args)
	root.SetIn(s.in)
	root.SetOut(s.out)
	root.SetErr(s.err)
	if err := root.ExecuteContext(ctx); err != nil {
		fmt.Fprintf(s.err, "acemq-flow: %v\n", err)
		return exitStatus(err)
	}
	return 0
}

// app is what the commands share: the environment, the flows and the
// global flags.
type app struct {
	env   lookupEnv
	flows []*dsl.FlowDef
	// logLevel is --log-level; logLevelSet says it was given (on the
	// command line or in the environment), so that a worker, which logs at
	// info by default, does not override a choice.
	logLevel    slog.Level
	logLevelSet bool
	// databaseURL is --database-url: PostgreSQL for the run journal and the
	// idempotency store ("" = in memory).
	databaseURL string
	// brokerTLS is TLS to an amqps:// broker (--broker-ca-file, ...).
	brokerTLS brokerTLS
	// meterProvider receives the metrics of the connections the command
	// opens, and so of their engines (nil = the otel globals): set by a
	// command that serves /metrics.
	meterProvider metric.MeterProvider
}

func newRoot(env lookupEnv, flows []*dsl.FlowDef) *cobra.Command {
	a := &app{env: env, flows: flows, logLevel: slog.LevelWarn}
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
	root.PersistentFlags().Var(levelFlag{level: &a.logLevel, set: &a.logLevelSet}, "log-level", "least severe log level written to stderr: debug, info, warn or error (worker: info unless given)")
	root.PersistentFlags().StringVar(&a.databaseURL, "database-url", "", "PostgreSQL URL for the run journal and the idempotency store, shared by every worker (default: in this process's memory)")
	a.brokerTLS.add(root.PersistentFlags())
	root.AddCommand(a.versionCommand(), a.topologyCommand(), a.demoCommand(),
		a.migrateCommand(), a.workerCommand(), a.flowsCommand(), a.startCommand(), a.runsCommand(),
		a.replayCommand(), a.compensateCommand(), a.scheduleCommand(), a.dashboardCommand(), a.devCommand(), a.topCommand(), a.benchCommand())
	documentEnv(root)
	return root
}

// envName is the environment fallback of a flag.
func envName(flag string) string {
	return envPrefix + strings.ToUpper(strings.ReplaceAll(flag, "-", "_"))
}

// envAnnotation, on a flag, names its environment fallback when that is
// not envName of the flag's name: dashboard's --token is
// ACEMQ_DASHBOARD_TOKEN, since ACEMQ_TOKEN would not say whose token it is.
const envAnnotation = "acemq-env"

// flagEnv is the environment fallback of f.
func flagEnv(f *pflag.Flag) string {
	if names := f.Annotations[envAnnotation]; len(names) > 0 {
		return names[0]
	}
	return envName(f.Name)
}

// applyEnv sets every flag of cmd not given on the command line from its
// environment fallback, if that is set.
func (a *app) applyEnv(cmd *cobra.Command) error {
	var errs []error
	cmd.Flags().VisitAll(func(f *pflag.Flag) {
		if f.Changed || f.Name == "help" {
			return
		}
		v, ok := a.env(flagEnv(f))
		if !ok {
			return
		}
		if err := f.Value.Set(v); err != nil {
			errs = append(errs, fmt.Errorf("%s=%q: %w", flagEnv(f), v, err))
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
				f.Usage += " [$" + flagEnv(f) + "]"
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
	return a.openWith(cmd, url, broker.Config{Ladder: ladder})
}

// openWith is open with more of the connection's config.
func (a *app) openWith(cmd *cobra.Command, url string, cfg broker.Config) (*broker.Conn, error) {
	if url == "" {
		url = EmbeddedURL
		fmt.Fprintln(cmd.ErrOrStderr(), "using the embedded in-process broker (set ACEMQ_URL to use RabbitMQ)")
	}
	cfg.Logger = a.logger(cmd)
	if err := a.brokerTLS.apply(url, &cfg.RabbitMQ); err != nil {
		return nil, fmt.Errorf("connect: %w", err)
	}
	if cfg.MeterProvider == nil {
		cfg.MeterProvider = a.meterProvider
	}
	conn, err := cfg.Open(cmd.Context(), url)
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
	cmd.Flags().StringVar(url, "url", "", "broker URL: amqp://user:password@host:5672/vhost for RabbitMQ (a cluster's nodes: amqp://user:password@host1:5672,host2:5672/vhost; TLS: amqps://), "+EmbeddedURL+" for the embedded broker (default: the embedded broker)")
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

// levelFlag is the value of --log-level; set records that it was given.
type levelFlag struct {
	level *slog.Level
	set   *bool
}

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
	*l.set = true
	return nil
}

func (l levelFlag) Type() string { return "level" }
