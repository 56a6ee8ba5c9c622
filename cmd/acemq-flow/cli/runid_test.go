package cli

import (
	"strings"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/acemq/acemq-flow/internal/testenv"
)

// TestShortenedRunIDs: every command that takes a run id takes a
// beginning of it that no other run's id shares (dev prints the first
// eight characters), and says which runs an ambiguous one begins.
func TestShortenedRunIDs(t *testing.T) {
	t.Parallel()
	dbURL := testSchema(t)
	env := map[string]string{"ACEMQ_DATABASE_URL": dbURL, "ACEMQ_URL": "memory://" + testenv.Name(t, "broker")}
	r := execute(t, env, "migrate")
	require.Zero(t, r.code, r.stderr)
	flows := unitFlows(testenv.Name(t, "flow"))
	flow := flows[1].Name()
	p := testenv.Name(t, "run")
	for _, id := range []string{p + "-a1x", p + "-a2x", p + "-b7x"} {
		seedFailedRunID(t, dbURL, id, flow, "card declined")
	}
	inv := invocation{flows: flows, env: env}
	for _, c := range []struct {
		name string
		args []string
		// out is in stdout on success; err in stderr on failure ("" =
		// the command succeeds).
		out, err string
	}{
		{"runs show, a prefix of one run", []string{"runs", "show", p + "-b"}, p + "-b7x", ""},
		{"runs show, a full id", []string{"runs", "show", p + "-a1x", "-o", "json"}, `"run_id": "` + p + `-a1x"`, ""},
		{"runs show, ambiguous", []string{"runs", "show", p + "-a"},
			"", `runs show: ambiguous run id: "` + p + `-a" begins the ids of 2 runs: ` + p + "-a1x, " + p + "-a2x (give more of the id)"},
		{"runs show, nothing", []string{"runs", "show", p + "-c"}, "", `runs show: run not found: "` + p + `-c"`},
		// The journal says where its message is; the seeded run has none.
		{"replay", []string{"replay", p + "-b"}, "", "replay: the run's message was not found: run " + p + "-b7x"},
		{"replay, ambiguous", []string{"replay", p + "-a"}, "", `replay: ambiguous run id: "` + p + `-a" begins the ids of 2 runs`},
		{"compensate", []string{"compensate", p + "-b"}, "", "compensate: the run's message was not found: run " + p + "-b7x"},
		{"compensate, ambiguous", []string{"compensate", p + "-a"}, "", `compensate: ambiguous run id: "` + p + `-a"`},
		{"schedule cancel", []string{"schedule", "cancel", p + "-b"}, "", "schedule cancel: run cannot be cancelled: run " + p + "-b7x of " + flow + " is failed"},
		{"schedule cancel, ambiguous", []string{"schedule", "cancel", p + "-a"}, "", `schedule cancel: ambiguous run id: "` + p + `-a"`},
	} {
		t.Run(c.name, func(t *testing.T) {
			r := executeWith(t, inv, c.args...)
			if c.err == "" {
				require.Zero(t, r.code, r.stderr)
				require.Contains(t, r.stdout, c.out)
				return
			}
			require.Equal(t, 1, r.code, r.stdout)
			require.Empty(t, strings.TrimSpace(r.stdout))
			require.Contains(t, r.stderr, c.err)
		})
	}
}
