// Command chaos runs the chaos scenarios of docs/chaos.md against the
// RabbitMQ node and PostgreSQL cluster that scripts/chaos.sh starts for
// it, with every worker a separate `worker` process of the chaos flow
// binary (internal/chaos/flowbin), and prints one row per scenario: runs
// sent, completed and lost, the broker's duplicate deliveries, joins fired
// twice, lost signals, the most runs of one key seen in a limited step,
// runs stranded by a deploy of another version of the flow, double effects (a step's side effect applied twice) and the time it
// took.
//
//	scripts/chaos.sh -scenarios 1,4 -runs 2000
//
// A scenario passes when every run it sent completed (as its journal
// says), none was lost or stranded, no join fired twice, no effect was applied twice,
// every run went on with the signal it was sent and no limited step ever
// held more runs of a key than its limit; the command exits
// with status 1 when one does not, after printing, for the runs that went
// wrong, what the journal, the effects table and the queues say about them.
package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"os/signal"
	"slices"
	"strconv"
	"strings"
	"syscall"
	"time"
)

// config is the command's flags.
type config struct {
	scenarios []int
	// runs overrides every scenario's own size (0: their own); short runs
	// the scenarios of the short form (what CI runs) at their short size.
	runs  int
	short bool
	// bin is the chaos flow binary; ctl is scripts/chaos.sh, whose ctl
	// actions inject the faults.
	bin, ctl string
	// logs is where the workers' and the driver's logs go.
	logs string
	// amqpURL is the chaos RabbitMQ node; databaseURL is the chaos
	// cluster's maintenance database, where each scenario creates its own.
	amqpURL, databaseURL string
	// suite is the scenarios' list: "chaos" (scripts/chaos.sh) or
	// "cluster" (scripts/cluster.sh). tlsAMQPURL is the cluster's nodes
	// over amqps, for the cluster scenarios that run over TLS; wrongCA a
	// CA that signed none of its certificates.
	suite               string
	tlsAMQPURL, wrongCA string
	output              string
	// expireDeadClaims expires a killed worker's idempotency claims at
	// once rather than waiting out their lease.
	expireDeadClaims bool
	// stall gives up waiting for a scenario's runs after this long without
	// progress.
	stall time.Duration
}

func main() {
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	code := run(ctx, os.Args[1:], os.Stdout, os.Stderr)
	stop()
	os.Exit(code)
}

func run(ctx context.Context, args []string, stdout, stderr io.Writer) int {
	cfg, err := parseFlags(args, stderr)
	if err != nil {
		if errors.Is(err, flag.ErrHelp) {
			return 0
		}
		fmt.Fprintln(stderr, "chaos:", err)
		return 2
	}
	var rows []row
	for _, n := range cfg.scenarios {
		rows = append(rows, runScenario(ctx, cfg, suites[cfg.suite][n-1], stderr))
		if ctx.Err() != nil {
			fmt.Fprintln(stderr, "chaos: interrupted")
			break
		}
	}
	if err := report(stdout, cfg.output, rows); err != nil {
		fmt.Fprintln(stderr, "chaos:", err)
		return 1
	}
	for _, r := range rows {
		if !r.OK {
			return 1
		}
	}
	if ctx.Err() != nil {
		return 1
	}
	return 0
}

func parseFlags(args []string, stderr io.Writer) (config, error) {
	fs := flag.NewFlagSet("chaos", flag.ContinueOnError)
	fs.SetOutput(stderr)
	var cfg config
	list := fs.String("scenarios", "", "scenarios to run, comma-separated (see docs/chaos.md; default: every scenario of the suite)")
	fs.StringVar(&cfg.suite, "suite", "chaos", "the scenarios: chaos (docs/chaos.md) or cluster (docs/operations.md)")
	fs.StringVar(&cfg.tlsAMQPURL, "tls-amqp-url", "", "cluster suite: the cluster's nodes over amqps://, with the client's TLS settings in the query")
	fs.StringVar(&cfg.wrongCA, "wrong-ca", "", "cluster suite: a CA file that signed none of the cluster's certificates")
	fs.IntVar(&cfg.runs, "runs", 0, "runs per scenario (0: each scenario's own size)")
	fs.BoolVar(&cfg.short, "short", false, "the short form, what CI runs: scenarios 1 and 4 at 2,000 runs, 7 at 5, 9 and 10 at 500 (with -scenarios, those at their short size)")
	fs.StringVar(&cfg.bin, "bin", "", "the chaos flow binary (go build ./internal/chaos/flowbin)")
	fs.StringVar(&cfg.ctl, "ctl", "", "scripts/chaos.sh, whose ctl actions stop and start the services")
	fs.StringVar(&cfg.logs, "logs", os.TempDir(), "directory for the workers' and the driver's logs")
	fs.StringVar(&cfg.amqpURL, "amqp-url", "", "the chaos RabbitMQ node")
	fs.StringVar(&cfg.databaseURL, "database-url", "", "the chaos PostgreSQL cluster's maintenance database (each scenario creates its own)")
	fs.StringVar(&cfg.output, "o", "text", "output: text or json")
	fs.BoolVar(&cfg.expireDeadClaims, "expire-dead-claims", true,
		"expire a killed worker's idempotency claims at once instead of waiting out their 5-minute lease")
	fs.DurationVar(&cfg.stall, "stall", 2*time.Minute, "give a scenario up after this long without progress")
	if err := fs.Parse(args); err != nil {
		return cfg, err
	}
	if fs.NArg() > 0 {
		return cfg, fmt.Errorf("unexpected arguments %q", fs.Args())
	}
	scenarios, ok := suites[cfg.suite]
	if !ok {
		return cfg, fmt.Errorf("-suite %q: want chaos or cluster", cfg.suite)
	}
	if *list == "" {
		for _, sc := range scenarios {
			if !cfg.short || sc.short > 0 {
				*list += fmt.Sprintf(",%d", sc.n)
			}
		}
		if *list == "" {
			return cfg, fmt.Errorf("-short: the %s suite has no short form", cfg.suite)
		}
		*list = (*list)[1:]
	}
	for f := range strings.SplitSeq(*list, ",") {
		n, err := strconv.Atoi(strings.TrimSpace(f))
		if err != nil || n < 1 || n > len(scenarios) {
			return cfg, fmt.Errorf("-scenarios: %q is not a scenario of the %s suite (1 to %d)", f, cfg.suite, len(scenarios))
		}
		if !slices.Contains(cfg.scenarios, n) {
			cfg.scenarios = append(cfg.scenarios, n)
		}
	}
	switch {
	case cfg.runs < 0:
		return cfg, fmt.Errorf("-runs %d: want 0 or more", cfg.runs)
	case cfg.short && cfg.runs > 0:
		return cfg, errors.New("-short and -runs: choose one (-short sets each scenario's size)")
	case cfg.bin == "" || cfg.ctl == "" || cfg.amqpURL == "" || cfg.databaseURL == "":
		return cfg, errors.New("-bin, -ctl, -amqp-url and -database-url are required (scripts/chaos.sh sets them)")
	case cfg.suite == "cluster" && (cfg.tlsAMQPURL == "" || cfg.wrongCA == ""):
		return cfg, errors.New("-tls-amqp-url and -wrong-ca are required by the cluster suite (scripts/cluster.sh sets them)")
	case cfg.output != "text" && cfg.output != "json":
		return cfg, fmt.Errorf("-o %q: want text or json", cfg.output)
	}
	if !cfg.expireDeadClaims && cfg.stall < 6*time.Minute {
		// A killed worker's claims hold its steps for their whole lease.
		cfg.stall = 6 * time.Minute
	}
	return cfg, nil
}
