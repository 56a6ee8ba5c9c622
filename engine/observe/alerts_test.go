package observe_test

import (
	"os"
	"os/exec"
	"regexp"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/acemq/acemq-flow/internal/testenv"
)

// alertsFile is the Prometheus alert rules shipped in docs/.
const alertsFile = "../../docs/prometheus/alerts.yml"

// reAlertExpr is a rule's one-line expr.
var reAlertExpr = regexp.MustCompile(`(?m)^\s+expr:\s*(.+)$`)

// targetLabels are the labels Prometheus adds to every series it scrapes,
// which a worker does not serve itself.
var targetLabels = map[string]bool{"instance": true, "job": true}

// TestAlertRulesUseServedMetrics: every metric an alert rule reads is one a
// worker serves after a flow ran, and every label a rule selects on or
// groups by is one those metrics carry (or one Prometheus adds to the
// target); the rules cover runs failing, unresolved runs, dead-letter
// queues growing, the ladder late and workers not ready.
func TestAlertRulesUseServedMetrics(t *testing.T) {
	t.Parallel()
	raw, err := os.ReadFile(alertsFile)
	require.NoError(t, err)
	var exprs []string
	for _, m := range reAlertExpr.FindAllStringSubmatch(string(raw), -1) {
		exprs = append(exprs, m[1])
	}
	require.Len(t, exprs, len(regexp.MustCompile(`(?m)^\s+- alert:`).FindAllIndex(raw, -1)), "one single-line expr per rule")
	for _, name := range []string{"AcemqRunsFailing", "AcemqUnresolvedRuns", "AcemqDeadLetterQueueGrowing", "AcemqLadderLate", "AcemqWorkerNotReady"} {
		require.Contains(t, string(raw), "- alert: "+name+"\n")
	}

	served := servedLabels(runFlow(t).body)
	for _, e := range exprs {
		names, selected, grouped := promqlNames(e)
		require.NotEmpty(t, names, "no metric in %q", e)
		labels := map[string]bool{}
		for _, n := range names {
			have, ok := served[n]
			require.True(t, ok, "the rule %q uses %s, which the worker does not serve", e, n)
			for l := range have {
				labels[l] = true
			}
			for _, l := range selected[n] {
				require.True(t, have[l], "rule %q selects %s on label %q, which it does not carry", e, n, l)
			}
		}
		for _, l := range grouped {
			require.True(t, labels[l] || l == "le" || targetLabels[l], "rule %q groups by %q, which none of its metrics carries", e, l)
		}
	}
}

// TestAlertRulesPassPromtool: `promtool check rules` accepts the rules. It
// is skipped where promtool is not installed (Debian's prometheus package
// has it; .ci/run installs it), and fails there under
// ACEMQ_REQUIRE_SERVICES=1.
func TestAlertRulesPassPromtool(t *testing.T) {
	t.Parallel()
	promtool, err := exec.LookPath("promtool")
	if err != nil {
		if testenv.Required() {
			t.Fatalf("promtool not found (apt-get install prometheus), and ACEMQ_REQUIRE_SERVICES=1: %v", err)
		}
		t.Skipf("promtool not found (apt-get install prometheus): %v", err)
	}
	out, err := exec.CommandContext(t.Context(), promtool, "check", "rules", alertsFile).CombinedOutput()
	require.NoError(t, err, "promtool check rules %s:\n%s", alertsFile, out)
	require.Contains(t, string(out), "SUCCESS")
}
