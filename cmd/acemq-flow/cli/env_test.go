package cli

import (
	"regexp"
	"strings"
	"testing"

	"github.com/spf13/cobra"
	"github.com/stretchr/testify/require"

	"github.com/acemq/acemq-flow/broker"
	"github.com/acemq/acemq-flow/internal/testenv"
)

// envFallbacks are the flags that may be set from the environment: the
// connection (broker, TLS to it, its ladder, the database) and the
// settings of every command (log level), and the dashboard's token, a
// secret better kept off the command line. Every other flag is per call.
var envFallbacks = map[string]string{
	"url": "ACEMQ_URL", "database-url": "ACEMQ_DATABASE_URL", "ladder": "ACEMQ_LADDER", "log-level": "ACEMQ_LOG_LEVEL", "log-format": "ACEMQ_LOG_FORMAT",
	"broker-ca-file": "ACEMQ_BROKER_CA_FILE", "broker-cert-file": "ACEMQ_BROKER_CERT_FILE",
	"broker-key-file": "ACEMQ_BROKER_KEY_FILE", "broker-server-name": "ACEMQ_BROKER_SERVER_NAME",
	"management-url": "ACEMQ_MANAGEMENT_URL", "token": "ACEMQ_DASHBOARD_TOKEN",
}

// envExceptions are flags of one command that share a name with one of
// envFallbacks and are per call: the demo's ladder is its own, deleted
// when it ends.
var envExceptions = map[string]bool{"demo --ladder": true}

// noDatabaseThere is a database URL nothing answers on: the connection is
// refused at once.
const noDatabaseThere = "postgres://acemq@127.0.0.1:1/test"

var (
	helpFlagLine = regexp.MustCompile(`^\s+(?:-\w, )?--([\w-]+)`)
	helpEnv      = regexp.MustCompile(`\[\$(ACEMQ_\w+)\]`)
)

// TestOnlyConnectionAndGlobalFlagsHaveEnvironmentFallbacks reads every
// command's help, where each flag names its environment fallback: the
// connection and global flags have theirs, no other flag has one.
func TestOnlyConnectionAndGlobalFlagsHaveEnvironmentFallbacks(t *testing.T) {
	t.Parallel()
	var paths [][]string
	var walk func(c *cobra.Command, path []string)
	walk = func(c *cobra.Command, path []string) {
		paths = append(paths, path)
		for _, sub := range c.Commands() {
			if sub.Name() != "help" && sub.Name() != "completion" {
				walk(sub, append(append([]string(nil), path...), sub.Name()))
			}
		}
	}
	walk(newRoot(testName, nil, nil), nil)
	require.Greater(t, len(paths), 15)
	seen := map[string]bool{}
	for _, path := range paths {
		r := execute(t, nil, append(path, "--help")...)
		require.Zero(t, r.code, "%v: %s", path, r.stderr)
		for line := range strings.Lines(r.stdout) {
			m := helpFlagLine.FindStringSubmatch(line)
			if m == nil || m[1] == "help" {
				continue
			}
			flag := strings.Join(append(path, "--"+m[1]), " ")
			var got string
			if e := helpEnv.FindStringSubmatch(line); e != nil {
				got = e[1]
			}
			want := envFallbacks[m[1]]
			if envExceptions[flag] {
				want = ""
			}
			require.Equal(t, want, got, "%s: environment fallback", flag)
			if got != "" {
				seen[m[1]] = true
			}
		}
	}
	root := execute(t, nil, "--help")
	for flag, env := range envFallbacks {
		require.True(t, seen[flag], "--%s has its fallback somewhere", flag)
		require.Contains(t, root.stdout, env, "the root's help names every variable")
	}
	require.Contains(t, root.stdout, "Every other\nflag (--limit, --run-id, --status, --output, ...) is read from the command line only.")
}

// TestPerCallFlagsIgnoreTheEnvironment: a variable named after a per-call
// flag changes nothing (an exported ACEMQ_RUN_ID made every start the same
// run); the connection and global ones still apply.
func TestPerCallFlagsIgnoreTheEnvironment(t *testing.T) {
	t.Parallel()
	inv := invocation{flows: unitFlows("unit"), env: map[string]string{"ACEMQ_RUN_ID": "the-same-run", "ACEMQ_OUTPUT": "json",
		"ACEMQ_IN": "1h", "ACEMQ_PAYLOAD": "{nonsense"}}
	url := "memory://" + testenv.Name(t, "broker")
	var ids []string
	for range 2 {
		r := executeWith(t, inv, "start", "unit.orders", "--payload", `{"id":"o-1","amount":1}`, "--url", url)
		require.Zero(t, r.code, r.stderr)
		require.Regexp(t, `^[0-9a-f-]{36}\n$`, r.stdout, "a new run id, as text: ACEMQ_RUN_ID and ACEMQ_OUTPUT are not read")
		require.NotContains(t, r.stderr, "waits until", "ACEMQ_IN is not read")
		ids = append(ids, r.stdout)
	}
	require.NotEqual(t, ids[0], ids[1], "two starts are two runs")

	for _, c := range []struct {
		name string
		env  map[string]string
		args []string
		// not is what the variable, were it read, would have made the
		// command say.
		not string
	}{
		{"ACEMQ_OUTPUT", map[string]string{"ACEMQ_OUTPUT": "json"}, []string{"topology", "print"}, `"exchanges"`},
		{"ACEMQ_LIMIT", map[string]string{"ACEMQ_LIMIT": "0"}, []string{"runs", "list"}, "--limit 0"},
		{"ACEMQ_STATUS", map[string]string{"ACEMQ_STATUS": "lost"}, []string{"runs", "list"}, "invalid run status"},
		{"ACEMQ_SINCE", map[string]string{"ACEMQ_SINCE": "yesterday"}, []string{"runs", "list"}, "yesterday"},
		{"ACEMQ_STATUS for replay", map[string]string{"ACEMQ_STATUS": "failed", "ACEMQ_URL": url}, []string{"replay"}, "choosing failed runs"},
		// Nothing answers on port 1: the worker stops there, unless the
		// variable stopped it before.
		{"ACEMQ_CLAIM_TIMEOUT", map[string]string{"ACEMQ_CLAIM_TIMEOUT": "-1s"}, []string{"worker", "--database-url", noDatabaseThere}, "--claim-timeout"},
		{"ACEMQ_METRICS_ADDR", map[string]string{"ACEMQ_METRICS_ADDR": "256.0.0.1:1"}, []string{"worker", "--database-url", noDatabaseThere}, "--metrics-addr"},
	} {
		r := executeWith(t, invocation{flows: inv.flows, env: c.env}, c.args...)
		require.NotContains(t, r.stdout+r.stderr, c.not, c.name)
		if c.args[0] == "worker" {
			require.Contains(t, r.stderr, "connect to postgres://acemq@127.0.0.1:1/test", c.name)
		}
	}

	for _, c := range []struct {
		env  map[string]string
		args []string
		want string
	}{
		{map[string]string{"ACEMQ_LOG_LEVEL": "loud"}, []string{"version"}, `ACEMQ_LOG_LEVEL="loud": unknown log level "loud"`},
		{map[string]string{"ACEMQ_URL": "ftp://example/"}, []string{"topology", "apply"}, "invalid broker URL"},
		{map[string]string{"ACEMQ_DATABASE_URL": noDatabaseThere}, []string{"migrate"}, "connect to postgres://acemq@127.0.0.1:1/test"},
		{map[string]string{"ACEMQ_BROKER_CA_FILE": "/etc/ca.pem", "ACEMQ_URL": "amqp://127.0.0.1:1/"}, []string{"topology", "apply"}, "--broker-ca-file (ACEMQ_BROKER_CA_FILE) asks for TLS"},
	} {
		r := executeWith(t, invocation{env: c.env}, c.args...)
		require.Equal(t, 1, r.code, "%v", c.env)
		require.Contains(t, r.stderr, c.want)
	}
	r := executeWith(t, invocation{env: map[string]string{"ACEMQ_LADDER": "from-env"}}, "topology", "print")
	require.Zero(t, r.code, r.stderr)
	require.Equal(t, broker.LadderTopology("from-env").String()+"\n", r.stdout)
}
