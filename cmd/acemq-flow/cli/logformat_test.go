package cli

import (
	"encoding/json"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"
)

// TestLogFormatJSON: --log-format json (or ACEMQ_LOG_FORMAT=json) writes
// every log line as one JSON object with time, level and msg; the demo's
// step given up carries its run id, flow and step.
func TestLogFormatJSON(t *testing.T) {
	t.Parallel()
	r := execute(t, map[string]string{"ACEMQ_LOG_FORMAT": "json"}, "demo", "--log-level", "debug")
	require.Zero(t, r.code, r.stderr)
	var lines []map[string]any
	for l := range strings.Lines(r.stderr) {
		if !strings.HasPrefix(l, "{") {
			require.Equal(t, "using the embedded in-process broker (set ACEMQ_URL to use RabbitMQ)\n", l,
				"only the demo's own notice is not a log line")
			continue
		}
		var line map[string]any
		require.NoError(t, json.Unmarshal([]byte(l), &line), l)
		for _, k := range []string{"time", "level", "msg"} {
			require.Contains(t, line, k, l)
		}
		lines = append(lines, line)
	}
	var gaveUp map[string]any
	for _, l := range lines {
		if l["msg"] == "step given up" {
			gaveUp = l
		}
	}
	require.NotNil(t, gaveUp, "the demo gives a run up:\n%s", r.stderr)
	require.Equal(t, "WARN", gaveUp["level"])
	require.Equal(t, "acemq-demo.place-order", gaveUp["flow"])
	require.NotEmpty(t, gaveUp["step"])
	require.NotEmpty(t, gaveUp["run_id"])

	r = execute(t, nil, "--log-format", "xml", "version")
	require.Equal(t, 1, r.code)
	require.Contains(t, r.stderr, `unknown log format "xml", want text or json`)
	r = execute(t, nil, "--log-format", "text", "version")
	require.Zero(t, r.code, r.stderr)
}
