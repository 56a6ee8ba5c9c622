// Package cli is the acemq-flow command line as a library: a user's own
// worker binary calls [Main] with its flows (or builds on [NewRoot]) and
// gets every operator command for them:
//
//	func main() { cli.Main(orders.PlaceOrder, billing.Invoice) }
//
// The connection and global flags have an environment fallback, ACEMQ_
// followed by the flag's name in upper case with dashes as underscores
// (--url is ACEMQ_URL): --url, --database-url, --ladder, --log-level,
// --log-format, the
// --broker-* TLS files and topology apply's --management-url, and
// dashboard's --token (ACEMQ_DASHBOARD_TOKEN); a flag given on the command
// line wins. Every other flag (--limit,
// --run-id, --status, --output, ...) is per call and read from the
// command line only, so that an exported variable never changes every
// command with a flag of that name. Data goes to standard output (one
// JSON document with --output json), logs and errors to standard error, and
// a failed command exits with status 1 (130 when Ctrl-C interrupted it). A command that needs a broker
// refuses to run without --url (ErrNoBroker): on an in-process broker of
// its own, what it published would be gone when it exits. --url memory://
// asks for that in-process broker; demo and dev run on one unasked.
// Without --database-url the run journal and the idempotency store are in
// memory: runs list and runs show refuse, and the other commands that
// read runs recorded by other processes say that they cannot see them.
package cli

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"os"
	"os/signal"
	"path/filepath"
	"slices"
	"strings"
	"syscall"

	"github.com/spf13/cobra"
	"github.com/spf13/pflag"
	"go.opentelemetry.io/otel/metric"

	"github.com/acemq/acemq-flow/broker"
	"github.com/acemq/acemq-flow/dsl"
)

// Version is the version `version` prints (acemq-flow's, or that of a
// binary of one's own), set when building with
//
//	-ldflags "-X github.com/acemq/acemq-flow/cmd/acemq-flow/cli.Version=v1.2.3"
var Version = "dev"

// EmbeddedURL is the in-process broker (the loopback, which needs nothing
// installed): what demo and dev run on, and what --url memory:// asks a
// command to run on. It lives in the process, and what is published to it
// is gone when the process exits.
const EmbeddedURL = "memory://"

// ErrNoBroker: the command needs a broker and no --url was given. It does
// not fall back to the in-process broker, where a run it started, or a
// message it moved, would be lost when it exits.
var ErrNoBroker = errors.New("no broker: set --url / ACEMQ_URL to the RabbitMQ the workers use " +
	"(amqp://user:password@host:5672/vhost), or --url " + EmbeddedURL + " for a broker inside this one process, " +
	"gone when it exits")

// envPrefix starts the name of every flag's environment fallback.
const envPrefix = "ACEMQ_"

// envFlags are the flags that can also be set from the environment (see
// envName): the connection (the broker, TLS to it, its scheduler ladder,
// its management API, the database) and the log level, which mean the
// same to every command.
// Every other flag is per call and comes from the command line only: a
// variable named after one (ACEMQ_RUN_ID, ACEMQ_LIMIT) would change every
// command with a flag of that name. A flag of one command may have a
// fallback of its own, or none although it is named like one of these,
// through envAnnotation.
var envFlags = []string{"url", "database-url", "ladder", "log-level", "log-format",
	"broker-ca-file", "broker-cert-file", "broker-key-file", "broker-server-name", "management-url"}

// lookupEnv reads one environment variable; os.LookupEnv outside tests.
type lookupEnv func(key string) (string, bool)

// Main runs the command line with the process's arguments and environment
// and the given flows (what worker works, start starts, replay replays),
// cancelling the command's context on SIGINT or SIGTERM so that a running
// command (a worker) can drain, and exits with status 1 if the command
// fails. The commands call themselves by the binary's name (os.Args[0]
// without its directory) in their help, their errors and the commands
// they suggest, so that a binary of one's own does not say acemq-flow. A
// flow that was not built is reported by the commands that use flows, not
// by the others.
func Main(flows ...*dsl.FlowDef) {
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	code := run(ctx, binaryName(), os.LookupEnv, flows, os.Args[1:], streams{in: os.Stdin, out: os.Stdout, err: os.Stderr})
	stop()
	os.Exit(code)
}

// NewRoot builds the command tree for flows, named after the binary as
// Main names it and reading flag fallbacks from the process environment.
// Execute it with ExecuteContext. NewRootNamed names it otherwise.
func NewRoot(flows ...*dsl.FlowDef) *cobra.Command { return NewRootNamed(binaryName(), flows...) }

// NewRootNamed is NewRoot with the name the commands call themselves by
// in their help and messages (root.Use is that name; setting Use after
// building changes the usage lines only). An empty name is acemq-flow.
func NewRootNamed(name string, flows ...*dsl.FlowDef) *cobra.Command {
	return newRoot(name, os.LookupEnv, flows)
}

// defaultName is what the command line calls itself when it has no name
// of its own: the acemq-flow binary's.
const defaultName = "acemq-flow"

// binaryName is the name the process was started by, without its
// directory (and without .exe); defaultName when there is none.
func binaryName() string {
	if len(os.Args) == 0 {
		return defaultName
	}
	name := strings.TrimSuffix(filepath.Base(os.Args[0]), ".exe")
	if name == "" || name == "." || name == string(filepath.Separator) {
		return defaultName
	}
	return name
}

// streams are a command's standard input, output and error.
type streams struct {
	in       io.Reader
	out, err io.Writer
}

// run executes the command tree, called name, with args and returns the
// exit status.
func run(ctx context.Context, name string, env lookupEnv, flows []*dsl.FlowDef, args []string, s streams) int {
	root := newRoot(name, env, flows)
	root.SetArgs(args)
	root.SetIn(s.in)
	root.SetOut(s.out)
	root.SetErr(s.err)
	if err := root.ExecuteContext(ctx); err != nil {
		fmt.Fprintf(s.err, "%s: %v\n", root.Name(), err)
		return exitStatus(err)
	}
	return 0
}

// app is what the commands share: the binary's name, the environment,
// the flows and the global flags.
type app struct {
	// name is what the commands call themselves in help and messages.
	name  string
	env   lookupEnv
	flows []*dsl.FlowDef
	// logLevel is --log-level; logLevelSet says it was given (on the
	// command line or in the environment), so that a worker, which logs at
	// info by default, does not override a choice.
	logLevel    slog.Level
	logLevelSet bool
	// logFormat is --log-format: text (slog's key=value lines) or json
	// (one JSON object a line).
	logFormat logFormat
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

func newRoot(name string, env lookupEnv, flows []*dsl.FlowDef) *cobra.Command {
	if name == "" {
		name = defaultName
	}
	a := &app{name: name, env: env, flows: flows, logLevel: slog.LevelWarn}
	root := &cobra.Command{
		Use:   name,
		Short: "A workflow engine for Go services on RabbitMQ",
		Long: name + " runs pipelines and sagas on RabbitMQ, on the AceMQ wire contract.\n\n" +
			"The connection and global flags can also be set from the environment: --url (ACEMQ_URL),\n" +
			"--database-url (ACEMQ_DATABASE_URL), --ladder (ACEMQ_LADDER), --log-level (ACEMQ_LOG_LEVEL),\n" +
			"--log-format (ACEMQ_LOG_FORMAT),\n" +
			"--broker-ca-file, --broker-cert-file, --broker-key-file and --broker-server-name\n" +
			"(ACEMQ_BROKER_CA_FILE, ACEMQ_BROKER_CERT_FILE, ACEMQ_BROKER_KEY_FILE, ACEMQ_BROKER_SERVER_NAME),\n" +
			"topology apply's --management-url (ACEMQ_MANAGEMENT_URL) and dashboard's --token\n" +
			"(ACEMQ_DASHBOARD_TOKEN); a flag on the command line wins. Every other\n" +
			"flag (--limit, --run-id, --status, --output, ...) is read from the command line only.",
		SilenceUsage:      true,
		SilenceErrors:     true,
		PersistentPreRunE: func(cmd *cobra.Command, _ []string) error { return a.applyEnv(cmd) },
	}
	root.PersistentFlags().Var(levelFlag{level: &a.logLevel, set: &a.logLevelSet}, "log-level", "least severe log level written to stderr: debug, info, warn or error (worker: info unless given)")
	root.PersistentFlags().Var(&a.logFormat, "log-format", "how log lines written to stderr look: text (key=value) or json (one JSON object a line)")
	root.PersistentFlags().StringVar(&a.databaseURL, "database-url", "", "PostgreSQL URL for the run journal and the idempotency store, shared by every worker (default: in this process's memory)")
	a.brokerTLS.add(root.PersistentFlags())
	root.AddCommand(a.versionCommand(), a.topologyCommand(), a.demoCommand(),
		a.migrateCommand(), a.workerCommand(), a.flowsCommand(), a.startCommand(), a.runsCommand(),
		a.replayCommand(), a.compensateCommand(), a.scheduleCommand(), a.signalCommand(), a.cancelCommand(), a.dashboardCommand(), a.devCommand(), a.topCommand(), a.benchCommand())
	documentEnv(root)
	a.registerCompletions(root)
	return root
}

// envName is the environment fallback of a flag of envFlags.
func envName(flag string) string {
	return envPrefix + strings.ToUpper(strings.ReplaceAll(flag, "-", "_"))
}

// envAnnotation, on a flag, names its environment fallback, overriding
// envFlags: dashboard's --token is ACEMQ_DASHBOARD_TOKEN (a secret is
// better kept off the command line, and ACEMQ_TOKEN would not say whose
// token it is); "" is none, for a per-call flag named like one of
// envFlags (demo's --ladder, its own).
const envAnnotation = "acemq-env"

// setFlagEnv gives the flag name of fs the environment fallback env (""
// for none), overriding envFlags.
func setFlagEnv(fs *pflag.FlagSet, name, env string) {
	fs.Lookup(name).Annotations = map[string][]string{envAnnotation: {env}}
}

// flagEnv is the environment fallback of f, "" when it has none.
func flagEnv(f *pflag.Flag) string {
	if names := f.Annotations[envAnnotation]; len(names) > 0 {
		return names[0]
	}
	if slices.Contains(envFlags, f.Name) {
		return envName(f.Name)
	}
	return ""
}

// applyEnv sets every flag of cmd that has an environment fallback and
// was not given on the command line from that variable, if it is set.
func (a *app) applyEnv(cmd *cobra.Command) error {
	var errs []error
	cmd.Flags().VisitAll(func(f *pflag.Flag) {
		if f.Changed || flagEnv(f) == "" {
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

// documentEnv appends each flag's environment fallback, if it has one, to
// its help text.
func documentEnv(root *cobra.Command) {
	seen := map[*pflag.Flag]bool{}
	var walk func(c *cobra.Command)
	walk = func(c *cobra.Command) {
		for _, fs := range []*pflag.FlagSet{c.PersistentFlags(), c.LocalNonPersistentFlags()} {
			fs.VisitAll(func(f *pflag.Flag) {
				if seen[f] || flagEnv(f) == "" {
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

// logger writes the library's logs to the command's stderr, as text or
// JSON lines (--log-format).
func (a *app) logger(cmd *cobra.Command) *slog.Logger {
	opts := &slog.HandlerOptions{Level: a.logLevel}
	if a.logFormat == logJSON {
		return slog.New(slog.NewJSONHandler(cmd.ErrOrStderr(), opts))
	}
	return slog.New(slog.NewTextHandler(cmd.ErrOrStderr(), opts))
}

// open connects to url. It refuses an empty url with ErrNoBroker, naming
// the command.
func (a *app) open(cmd *cobra.Command, url, ladder string) (*broker.Conn, error) {
	return a.openWith(cmd, url, broker.Config{Ladder: ladder})
}

// openWith is open with more of the connection's config.
func (a *app) openWith(cmd *cobra.Command, url string, cfg broker.Config) (*broker.Conn, error) {
	if url == "" {
		return nil, fmt.Errorf("%s: %w", commandName(cmd), ErrNoBroker)
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

// commandName is cmd's path without the binary's name: "topology apply".
func commandName(cmd *cobra.Command) string {
	return strings.TrimPrefix(cmd.CommandPath(), cmd.Root().Name()+" ")
}

// urlUsage is the help of --url.
const urlUsage = "broker URL: amqp://user:password@host:5672/vhost for RabbitMQ (a cluster's nodes: amqp://user:password@host1:5672,host2:5672/vhost; TLS: amqps://), " +
	"or " + EmbeddedURL + " for a broker inside this one process, which no other process reaches and whose messages are gone when it exits (for trying a command, and for tests)"

// addURLFlag registers --url, which the command requires, on cmd.
func addURLFlag(cmd *cobra.Command, url *string) {
	cmd.Flags().StringVar(url, "url", "", urlUsage+" (required)")
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

// logFormat is the value of --log-format; the zero value is text.
type logFormat string

// The formats --log-format takes.
const (
	logText logFormat = ""
	logJSON logFormat = "json"
)

func (f *logFormat) String() string {
	if *f == logText {
		return "text"
	}
	return string(*f)
}

func (f *logFormat) Set(s string) error {
	switch strings.ToLower(s) {
	case "text":
		*f = logText
	case "json":
		*f = logJSON
	default:
		return fmt.Errorf("unknown log format %q, want text or json", s)
	}
	return nil
}

func (f *logFormat) Type() string { return "format" }
