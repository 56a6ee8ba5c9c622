package cli

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"regexp"
	"runtime"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/acemq/acemq-flow/broker"
	"github.com/acemq/acemq-flow/dsl"
)

// testName is what the command line calls itself in the tests: the
// acemq-flow binary's name.
const testName = "acemq-flow"

// result is what one run of the command line left behind.
type result struct {
	stdout, stderr string
	code           int
}

// execute runs the command line with args and only the given environment,
// without flows and with nothing on stdin.
func execute(t *testing.T, env map[string]string, args ...string) result {
	t.Helper()
	return executeWith(t, invocation{env: env}, args...)
}

// invocation is what a command line is run with besides its arguments.
type invocation struct {
	env   map[string]string
	flows []*dsl.FlowDef
	stdin string
}

// lookup reads inv's environment only.
func (inv invocation) lookup(key string) (string, bool) {
	v, ok := inv.env[key]
	return v, ok
}

// executeWith runs the command line in this process with args and inv.
func executeWith(t *testing.T, inv invocation, args ...string) result {
	t.Helper()
	var stdout, stderr bytes.Buffer
	code := run(t.Context(), testName, inv.lookup, inv.flows, args, streams{in: strings.NewReader(inv.stdin), out: &stdout, err: &stderr})
	return result{stdout: stdout.String(), stderr: stderr.String(), code: code}
}

// ladderTTLs are the contract's rungs by queue suffix, in milliseconds;
// the control queue has none.
var ladderTTLs = map[string]int64{".1h": 3600000, ".10m": 600000, ".1m": 60000, ".10s": 10000, ".1s": 1000}

func TestVersion(t *testing.T) {
	t.Parallel()
	r := execute(t, nil, "version")
	require.Zero(t, r.code, r.stderr)
	require.Equal(t, fmt.Sprintf("acemq-flow dev (%s, %s/%s)\n", runtime.Version(), runtime.GOOS, runtime.GOARCH), r.stdout)
	require.Empty(t, r.stderr)
}

func TestVersionJSON(t *testing.T) {
	t.Parallel()
	r := execute(t, nil, "version", "--output", "json")
	require.Zero(t, r.code, r.stderr)
	var v versionInfo
	require.NoError(t, json.Unmarshal([]byte(r.stdout), &v))
	require.Equal(t, versionInfo{Version: "dev", Go: runtime.Version(), OS: runtime.GOOS, Arch: runtime.GOARCH}, v)
}

func TestTopologyPrintShowsTheLadder(t *testing.T) {
	t.Parallel()
	r := execute(t, nil, "topology", "print")
	require.Zero(t, r.code, r.stderr)
	require.Equal(t, broker.LadderTopology(broker.DefaultLadder).String()+"\n", r.stdout)

	var queues []string
	for line := range strings.Lines(r.stdout) {
		if strings.HasPrefix(line, "queue ") {
			queues = append(queues, line)
		}
	}
	require.Len(t, queues, 6)
	for suffix, ttl := range ladderTTLs {
		require.Regexp(t, fmt.Sprintf(`(?m)^queue %s durable \{.*x-message-ttl=%d[,}]`, regexp.QuoteMeta(broker.DefaultLadder+suffix), ttl), r.stdout)
	}
	require.Regexp(t, `(?m)^queue acemq\.schedule\.due durable \{x-queue-type=quorum\}$`, r.stdout)
	require.Contains(t, r.stdout, "exchange acemq.schedule direct durable")
}

func TestTopologyPrintJSON(t *testing.T) {
	t.Parallel()
	r := execute(t, nil, "topology", "print", "-o", "json")
	require.Zero(t, r.code, r.stderr)
	var v struct {
		Exchanges []struct {
			Name, Kind string
			Durable    bool
		}
		Queues []struct {
			Name      string
			Durable   bool
			Arguments map[string]any
		}
		Bindings []struct {
			Exchange, Queue string
			RoutingKey      string `json:"routing_key"`
		}
	}
	require.NoError(t, json.Unmarshal([]byte(r.stdout), &v))
	require.Len(t, v.Exchanges, 1)
	require.Equal(t, "acemq.schedule", v.Exchanges[0].Name)
	require.Equal(t, "direct", v.Exchanges[0].Kind)
	require.Len(t, v.Queues, 6)
	ttls := map[string]any{}
	for _, q := range v.Queues {
		require.True(t, q.Durable, q.Name)
		require.Equal(t, "quorum", q.Arguments["x-queue-type"], q.Name)
		ttls[q.Name] = q.Arguments["x-message-ttl"]
	}
	for suffix, ttl := range ladderTTLs {
		require.EqualValues(t, ttl, ttls["acemq.schedule"+suffix], suffix)
	}
	require.Nil(t, ttls["acemq.schedule.due"])
	require.Len(t, v.Bindings, 6)
	for _, b := range v.Bindings {
		require.Equal(t, "acemq.schedule", b.Exchange)
		require.Equal(t, b.Queue, b.RoutingKey)
	}
}

func TestTopologyPrintLadderFromFlagAndEnvironment(t *testing.T) {
	t.Parallel()
	r := execute(t, nil, "topology", "print", "--ladder", "mine")
	require.Zero(t, r.code, r.stderr)
	require.Equal(t, broker.LadderTopology("mine").String()+"\n", r.stdout)

	env := map[string]string{"ACEMQ_LADDER": "from-env"}
	r = execute(t, env, "topology", "print", "--output", "json")
	require.Zero(t, r.code, r.stderr)
	require.Contains(t, r.stdout, `"name": "from-env.1h"`)

	r = execute(t, env, "topology", "print", "--ladder", "flag-wins")
	require.Zero(t, r.code, r.stderr)
	require.Equal(t, broker.LadderTopology("flag-wins").String()+"\n", r.stdout)
}

func TestUnknownOutputIsAnError(t *testing.T) {
	t.Parallel()
	r := execute(t, nil, "topology", "print", "--output", "xml")
	require.Equal(t, 1, r.code)
	require.Empty(t, r.stdout)
	require.Contains(t, r.stderr, `unknown output format "xml", want text or json`)

	r = execute(t, map[string]string{"ACEMQ_LOG_LEVEL": "loud"}, "version")
	require.Equal(t, 1, r.code)
	require.Empty(t, r.stdout)
	require.Contains(t, r.stderr, `ACEMQ_LOG_LEVEL="loud": unknown log level "loud"`, "a bad variable names itself")
}

func TestUnknownCommandAndBadLogLevel(t *testing.T) {
	t.Parallel()
	r := execute(t, nil, "frobnicate")
	require.Equal(t, 1, r.code)
	require.Contains(t, r.stderr, `unknown command "frobnicate"`)

	r = execute(t, nil, "--log-level", "loud", "version")
	require.Equal(t, 1, r.code)
	require.Contains(t, r.stderr, `unknown log level "loud"`)
}

func TestHelpNamesTheEnvironmentFallbacks(t *testing.T) {
	t.Parallel()
	r := execute(t, nil, "topology", "apply", "--help")
	require.Zero(t, r.code, r.stderr)
	for _, env := range []string{"$ACEMQ_URL", "$ACEMQ_LADDER", "$ACEMQ_LOG_LEVEL"} {
		require.Contains(t, r.stdout, env)
	}
	require.NotContains(t, r.stdout, "$ACEMQ_OUTPUT", "--output is per call")
}

func TestTopologyApplyOnTheEmbeddedBroker(t *testing.T) {
	t.Parallel()
	r := execute(t, nil, "topology", "apply", "--url", "memory://")
	require.Zero(t, r.code, r.stderr)
	require.Contains(t, r.stderr, "declared scheduler ladder acemq.schedule on memory://")
	require.Equal(t, broker.LadderTopology(broker.DefaultLadder).String()+"\n", r.stdout)

	r = execute(t, nil, "topology", "apply", "--url", "memory://", "--ladder", "explicit")
	require.Zero(t, r.code, r.stderr)
	require.NotContains(t, r.stderr, "embedded")
	require.Equal(t, broker.LadderTopology("explicit").String()+"\n", r.stdout)
}

// deleteLadder removes a test's own scheduler ladder from the broker.
func deleteLadder(t *testing.T, url, name string) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	conn, err := broker.Open(ctx, url)
	require.NoError(t, err)
	defer func() { require.NoError(t, conn.Close(ctx)) }()
	topo := broker.LadderTopology(name)
	for _, q := range topo.Queues {
		_, err := conn.Transport().DeleteQueue(ctx, q.Name)
		require.NoError(t, err)
	}
	for _, e := range topo.Exchanges {
		require.NoError(t, conn.Transport().DeleteExchange(ctx, e.Name))
	}
}

func TestBadURLsAreErrorsWithoutThePassword(t *testing.T) {
	t.Parallel()
	r := execute(t, nil, "topology", "apply", "--url", "ftp://example/")
	require.Equal(t, 1, r.code)
	require.Empty(t, r.stdout)
	require.Contains(t, r.stderr, "invalid broker URL")

	// Nothing listens on port 1: the dial fails at once.
	r = execute(t, map[string]string{"ACEMQ_URL": "amqp://user:s3cret-pw@127.0.0.1:1/"}, "topology", "apply")
	require.Equal(t, 1, r.code)
	require.Empty(t, r.stdout)
	require.Contains(t, r.stderr, "acemq-flow: connect:")
	require.NotContains(t, r.stderr, "s3cret-pw")
}
