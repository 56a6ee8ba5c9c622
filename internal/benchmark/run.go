package benchmark

import (
	"context"
	"fmt"
	"runtime"
	"slices"
	"strings"
	"time"

	amqp "github.com/rabbitmq/amqp091-go"

	"github.com/acemq/acemq-flow/broker"
)

// Scenarios are the scenarios Run knows, in the order it measures them.
var Scenarios = []string{"core", "flow", "ladder", "outbox", "request", "fanout", "limits"}

// scenario is one of Scenarios: its measurement, and how many steps it
// reports through Config.Progress under cfg.
type scenario struct {
	run   func(context.Context, Config) ([]Result, error)
	steps func(Config) int
}

var scenarios = map[string]scenario{
	"core":    {Core, func(c Config) int { return 2 + 2*boolInt(c.rabbit()) }},
	"flow":    {Flow, func(c Config) int { return 1 + 2*boolInt(c.rabbit()) + 2*boolInt(c.DB != nil) }},
	"ladder":  {Ladder, func(Config) int { return 2 }},
	"outbox":  {Outbox, func(Config) int { return 2 }},
	"request": {Request, func(c Config) int { return 1 + boolInt(c.rabbit()) }},
	"fanout":  {Fanout, func(Config) int { return 2 }},
	"limits":  {Limits, func(Config) int { return 4 }},
}

func boolInt(b bool) int {
	if b {
		return 1
	}
	return 0
}

// ParseOnly reads a comma-separated list of scenarios ("core,flow"); ""
// is every one of Scenarios. Unknown names are an error naming the known
// ones.
func ParseOnly(s string) ([]string, error) {
	if strings.TrimSpace(s) == "" {
		return slices.Clone(Scenarios), nil
	}
	var out []string
	for _, name := range strings.Split(s, ",") {
		name = strings.TrimSpace(name)
		if _, ok := scenarios[name]; !ok {
			return nil, fmt.Errorf("unknown scenario %q, want some of %s", name, strings.Join(Scenarios, ","))
		}
		if !slices.Contains(out, name) {
			out = append(out, name)
		}
	}
	// In the order of Scenarios, whatever the order asked.
	slices.SortFunc(out, func(a, b string) int { return slices.Index(Scenarios, a) - slices.Index(Scenarios, b) })
	return out, nil
}

// Run measures the scenarios named in only (nil = all of Scenarios), one
// after the other, and reports every figure. Without cfg.DB the outbox
// fanout and limits scenarios are skipped (and said so in the report) unless only names them,
// which is then an error matching ErrNoDatabase. The first scenario that
// fails ends the run with its error, after it deleted what it declared.
func Run(ctx context.Context, cfg Config, only []string) (*Report, error) {
	cfg, err := cfg.withDefaults()
	if err != nil {
		return nil, err
	}
	explicit := only != nil
	if !explicit {
		only = Scenarios
	}
	rep := &Report{N: cfg.N, CPUs: runtime.GOMAXPROCS(0), NumCPU: runtime.NumCPU(), GoVersion: runtime.Version(),
		Prefix: Prefix(cfg.ID), Database: cfg.DatabaseName, Started: time.Now(), Results: []Result{}}
	if cfg.DB == nil {
		rep.Database = ""
	}
	if rep.Broker, err = describeBroker(ctx, cfg); err != nil {
		return nil, err
	}
	var run []string
	for _, name := range only {
		if _, ok := scenarios[name]; !ok {
			return nil, fmt.Errorf("unknown scenario %q, want some of %s", name, strings.Join(Scenarios, ","))
		}
		if (name == "outbox" || name == "fanout" || name == "limits") && cfg.DB == nil {
			if explicit {
				return nil, fmt.Errorf("%s: %w: it needs PostgreSQL", name, ErrNoDatabase)
			}
			rep.Skipped = append(rep.Skipped, name+": needs a database")
			continue
		}
		run = append(run, name)
	}
	if cfg.DB == nil && slices.Contains(run, "flow") {
		rep.Skipped = append(rep.Skipped, "flow on PostgreSQL: needs a database")
	}
	if !cfg.rabbit() {
		rep.Skipped = append(rep.Skipped, "the amqp091-go baselines: need RabbitMQ")
	}
	total := 0
	for _, name := range run {
		total += scenarios[name].steps(cfg)
	}
	progress, done := cfg.Progress, -1
	if progress != nil {
		cfg.Progress = func(s Step) {
			done++
			progress(Step{Name: s.Name, Done: done, Total: total})
		}
	}
	for _, name := range run {
		res, err := scenarios[name].run(ctx, cfg)
		if err != nil {
			return nil, fmt.Errorf("%s: %w", name, err)
		}
		rep.Results = append(rep.Results, res...)
	}
	if progress != nil {
		progress(Step{Name: "done", Done: total, Total: total})
	}
	rep.Seconds = time.Since(rep.Started).Seconds()
	return rep, nil
}

// describeBroker names the broker for the report: RabbitMQ's product and
// version as it announces them, and its URL without the password; or the
// embedded broker.
func describeBroker(ctx context.Context, cfg Config) (string, error) {
	conn, err := broker.Config{Logger: cfg.Logger}.Open(ctx, cfg.URL)
	if err != nil {
		return "", fmt.Errorf("connect to the broker: %w", err)
	}
	name := conn.Name()
	if err := conn.Close(context.WithoutCancel(ctx)); err != nil {
		return "", fmt.Errorf("close the connection: %w", err)
	}
	if !cfg.rabbit() {
		return "the embedded in-process broker", nil
	}
	ac, err := amqp.Dial(cfg.URL)
	if err != nil {
		return "", fmt.Errorf("amqp091-go: connect: %w", err)
	}
	defer ac.Close()
	product, _ := ac.Properties["product"].(string)
	version, _ := ac.Properties["version"].(string)
	if product == "" {
		product = "AMQP broker"
	}
	return strings.TrimSpace(product+" "+version) + " at " + name, nil
}
