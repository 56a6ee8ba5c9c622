package cli

import (
	"bytes"
	"context"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
)

// TestCommandsThatNeedABrokerRefuseWithoutOne: without --url or ACEMQ_URL
// a command that publishes or reads the broker fails, naming both, rather
// than run on a broker of its own that is gone when it exits (a start
// that printed a run id nobody would ever run); with --url memory:// it
// runs on that in-process broker, as asked. Only demo and dev run on one
// unasked; topology print and the commands that read the database need
// no broker.
func TestCommandsThatNeedABrokerRefuseWithoutOne(t *testing.T) {
	t.Parallel()
	flows := unitFlows("unit")
	for _, args := range [][]string{
		{"start", "unit.orders", "--payload", `{"id":"o-1","amount":1}`},
		{"start", "unit.orders", "--payload", `{"id":"o-1","amount":1}`, "--in", "1h"},
		{"replay", "r-1"},
		{"replay", "--status", "failed", "--flow", "unit.doomed"},
		{"compensate", "r-1"},
		{"schedule", "list"},
		{"schedule", "cancel", "r-1"},
		{"worker"},
		{"topology", "apply"},
		{"bench", "--n", "10", "--only", "core"},
	} {
		t.Run(strings.Join(args[:min(2, len(args))], " "), func(t *testing.T) {
			t.Parallel()
			// A command that ran on a broker of its own might not end (a
			// worker): the deadline makes that a failure, not a hang.
			ctx, cancel := context.WithTimeout(t.Context(), 20*time.Second)
			defer cancel()
			var stdout, stderr bytes.Buffer
			code := run(ctx, testName, invocation{}.lookup, flows, args, streams{in: strings.NewReader(""), out: &stdout, err: &stderr})
			require.Equal(t, 1, code, "%v: %s", args, stderr.String())
			require.Empty(t, stdout.String())
			require.Contains(t, stderr.String(), ": no broker: set --url / ACEMQ_URL to the RabbitMQ the workers use", "%v", args)
			require.Contains(t, stderr.String(), "or --url memory://", "%v", args)
			require.NotContains(t, stderr.String(), "using the embedded in-process broker", "%v", args)
		})
	}

	// Asked for, the in-process broker is used: the run lives as long as
	// this one command.
	r := executeWith(t, invocation{flows: flows}, "start", "unit.orders", "--payload", `{"id":"o-1","amount":1}`, "--url", "memory://")
	require.Zero(t, r.code, r.stderr)
	require.Regexp(t, `^[0-9a-f-]{36}\n$`, r.stdout)
	r = execute(t, nil, "topology", "apply", "--url", "memory://")
	require.Zero(t, r.code, r.stderr)
	r = execute(t, nil, "topology", "print")
	require.Zero(t, r.code, r.stderr)

	// The help says what memory:// is.
	r = execute(t, nil, "start", "--help")
	require.Zero(t, r.code, r.stderr)
	require.Contains(t, r.stdout, "memory:// for a broker inside this one process")
}

// TestRunsNeedADatabase: without a database the run journal is in the
// memory of the process that ran the runs, which runs list and runs show
// cannot see: they fail saying so, rather than answer "no runs".
func TestRunsNeedADatabase(t *testing.T) {
	t.Parallel()
	for _, args := range [][]string{{"runs", "list"}, {"runs", "list", "-o", "json"}, {"runs", "show", "run-42"}} {
		r := execute(t, nil, args...)
		require.Equal(t, 1, r.code, "%v", args)
		require.Empty(t, r.stdout, "%v", args)
		require.Contains(t, r.stderr, strings.Join(args[:2], " ")+": no database: set --database-url / ACEMQ_DATABASE_URL to a PostgreSQL URL", "%v", args)
		require.Contains(t, r.stderr, "runs are journaled only in the memory of the process that ran them", "%v", args)
	}
	// Bad flags are refused before that.
	r := execute(t, nil, "runs", "list", "--status", "failed,lost")
	require.Equal(t, 1, r.code)
	require.Contains(t, r.stderr, `invalid run status "lost": want one of running, waiting`)
	require.NotContains(t, r.stderr, "no database", "refused before looking anywhere")
}

// TestDashboardWithoutABrokerOnlyReads: a dashboard of a binary with
// flows but without --url reads the journal and hides replay and
// compensate, saying why, instead of sending messages into a broker of
// its own that no worker reads.
func TestDashboardWithoutABrokerOnlyReads(t *testing.T) {
	t.Parallel()
	d := background(t, invocation{flows: unitFlows("unit")}, "dashboard", "--addr", "127.0.0.1:0")
	base := d.waitFor(`dashboard: open (http://\S+)/ in a browser`)[1]
	require.Contains(t, d.stderr.String(), noBrokerDashboard)
	require.NotContains(t, d.stderr.String(), "using the embedded in-process broker")
	status, _ := httpGet(t, base+"/")
	require.Equal(t, 200, status)
	require.Zero(t, d.stop(), d.stderr.String())
}
