package cli

import (
	"bytes"
	"context"
	"errors"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/spf13/cobra"
	"github.com/spf13/pflag"
	"github.com/stretchr/testify/require"

	"github.com/acemq/acemq-flow/dsl"
	"github.com/acemq/acemq-flow/internal/testenv"
)

// TestABinaryOfOnesOwnUsesItsOwnName: a user's cli.Main binary, here
// testflows installed as orders-worker, calls itself by its own name in
// its help, its errors and the commands it suggests, never acemq-flow.
func TestABinaryOfOnesOwnUsesItsOwnName(t *testing.T) {
	t.Parallel()
	bin := filepath.Join(t.TempDir(), "orders-worker")
	require.NoError(t, os.Symlink(testBinary(t), bin))
	runBin := func(args ...string) result {
		ctx, cancel := context.WithTimeout(t.Context(), commandTimeout)
		defer cancel()
		cmd := exec.CommandContext(ctx, bin, args...)
		cmd.Env = append(cleanEnviron(), "CLITEST_FLOW_PREFIX=mine")
		var stdout, stderr bytes.Buffer
		cmd.Stdout, cmd.Stderr = &stdout, &stderr
		err := cmd.Run()
		r := result{stdout: stdout.String(), stderr: stderr.String()}
		var ee *exec.ExitError
		if errors.As(err, &ee) {
			r.code = ee.ExitCode()
		} else {
			require.NoError(t, err)
		}
		return r
	}
	r := runBin("flows", "show", "mine.orders")
	require.Zero(t, r.code, r.stderr)
	require.Contains(t, r.stdout, "start a run with it:\n  orders-worker start mine.orders --payload '{\"id\":\"o-1\",\"amount\":42}'\n")

	r = runBin("flows", "show", "nope")
	require.Equal(t, 1, r.code)
	require.True(t, strings.HasPrefix(r.stderr, "orders-worker: unknown flow"), r.stderr)

	r = runBin("--help")
	require.Zero(t, r.code, r.stderr)
	require.Contains(t, r.stdout, "orders-worker runs pipelines and sagas on RabbitMQ")
	require.Contains(t, r.stdout, "Usage:\n  orders-worker [command]")
	for _, help := range [][]string{{"--help"}, {"dev", "--help"}, {"demo", "--help"}, {"dashboard", "--help"}, {"runs", "show", "--help"}} {
		r = runBin(help...)
		require.Zero(t, r.code, r.stderr)
		require.NotContains(t, r.stdout, "acemq-flow", "%v", help)
	}
}

// TestNamedMessages: what the commands say on their own (notes, hints)
// names the binary they were run as.
func TestNamedMessages(t *testing.T) {
	t.Parallel()
	ctx, cancel := context.WithCancel(t.Context())
	defer cancel()
	var stderr syncBuffer
	done := make(chan int, 1)
	go func() {
		done <- run(ctx, "orders-worker", invocation{}.lookup, unitFlows("unit"),
			[]string{"dashboard", "--addr", "127.0.0.1:0", "--url", "memory://" + testenv.Name(t, "broker")},
			streams{in: strings.NewReader(""), out: &bytes.Buffer{}, err: &stderr})
	}()
	require.Eventually(t, func() bool { return strings.Contains(stderr.String(), "in a browser") }, 10*time.Second, 10*time.Millisecond)
	cancel()
	require.Zero(t, <-done, stderr.String())
	require.Contains(t, stderr.String(), "or try `orders-worker dev`")
	require.NotContains(t, stderr.String(), "acemq-flow")

	// A database without the tables: the hint names the binary.
	var out, errOut bytes.Buffer
	code := run(t.Context(), "orders-worker", invocation{}.lookup, nil, []string{"runs", "list", "--database-url", testSchema(t)},
		streams{in: strings.NewReader(""), out: &out, err: &errOut})
	require.Equal(t, 1, code)
	require.Contains(t, errOut.String(), "(run `orders-worker migrate` to create the tables)")
	require.True(t, strings.HasPrefix(errOut.String(), "orders-worker: runs list:"), errOut.String())
}

// TestNoFlagUsageHasBackquotes: pflag takes a word in backquotes in a
// flag's usage for the name of its value (`dev --help` showed
// "--metrics-addr acemq-flow top"), so no usage has any.
func TestNoFlagUsageHasBackquotes(t *testing.T) {
	t.Parallel()
	var walk func(c *cobra.Command)
	walk = func(c *cobra.Command) {
		c.LocalFlags().VisitAll(func(f *pflag.Flag) {
			require.NotContains(t, f.Usage, "`", "%s --%s", c.CommandPath(), f.Name)
		})
		for _, sub := range c.Commands() {
			walk(sub)
		}
	}
	walk(newRoot(testName, nil, nil))
	r := execute(t, nil, "dev", "--help")
	require.Zero(t, r.code, r.stderr)
	require.Regexp(t, `(?m)^\s+--metrics-addr string\s+also serve`, r.stdout)
}

// TestWorkerWithATransactionalStepNeedsADatabase: a worker of a flow with
// a Transactional step and no database says which flag gives it one, not
// what a library user would do (give the engine a
// persistence.SQLIdempotencyStore).
func TestWorkerWithATransactionalStepNeedsADatabase(t *testing.T) {
	t.Parallel()
	name := testenv.Name(t, "flow")
	flows := []*dsl.FlowDef{dsl.Flow(name, dsl.Step("validate", keep), dsl.Step("charge", keep).Transactional())}
	r := executeWith(t, invocation{flows: flows}, "worker", "--url", "memory://"+testenv.Name(t, "broker"))
	require.Equal(t, 1, r.code)
	require.Contains(t, r.stderr, `worker: flow "`+name+`" step "charge" is Transactional: its effects commit in one PostgreSQL transaction `+
		`with the record that it ran, and without a database there is none: set --database-url / ACEMQ_DATABASE_URL`)
	require.NotContains(t, r.stderr, "persistence.SQLIdempotencyStore")
}
