package observe_test

import (
	"encoding/json"
	"os"
	"regexp"
	"slices"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"
)

// dashboardFile is the Grafana dashboard shipped in docs/.
const dashboardFile = "../../docs/grafana/acemq-flow.json"

// TestGrafanaDashboardUsesServedMetrics: every metric the dashboard's
// queries and variables name is one a worker serves after a flow ran, and
// every label a query selects on or groups by is one those metrics carry
// (or one Prometheus adds to the target); the step failures are shown by
// error type.
func TestGrafanaDashboardUsesServedMetrics(t *testing.T) {
	t.Parallel()
	raw, err := os.ReadFile(dashboardFile)
	require.NoError(t, err)
	var dash struct {
		Title      string           `json:"title"`
		UID        string           `json:"uid"`
		Panels     []map[string]any `json:"panels"`
		Templating struct {
			List []map[string]any `json:"list"`
		} `json:"templating"`
	}
	require.NoError(t, json.Unmarshal(raw, &dash))
	require.Equal(t, "acemq-flow", dash.UID)

	var exprs []string
	var walk func(v any)
	walk = func(v any) {
		switch v := v.(type) {
		case map[string]any:
			for k, x := range v {
				if s, ok := x.(string); ok && (k == "expr" || k == "definition") {
					exprs = append(exprs, s)
					continue
				}
				walk(x)
			}
		case []any:
			for _, x := range v {
				walk(x)
			}
		}
	}
	for _, p := range dash.Panels {
		walk(p)
	}
	for _, v := range dash.Templating.List {
		walk(v)
	}
	require.GreaterOrEqual(t, len(exprs), 15, "the dashboard's queries")

	s := runFlow(t)
	served := servedLabels(s.body)
	used := map[string]bool{}
	for _, e := range exprs {
		names, selected, grouped := promqlNames(e)
		require.NotEmpty(t, names, "no metric in %q", e)
		labels := map[string]bool{}
		for _, n := range names {
			used[n] = true
			have, ok := served[n]
			require.True(t, ok, "the dashboard's query %q uses %s, which the worker does not serve", e, n)
			for l := range have {
				labels[l] = true
			}
			for _, l := range selected[n] {
				require.True(t, have[l], "query %q selects %s on label %q, which it does not carry", e, n, l)
			}
		}
		for _, l := range grouped {
			require.True(t, labels[l] || l == "le" || targetLabels[l], "query %q groups by %q, which none of its metrics carries", e, l)
		}
	}
	for _, n := range []string{
		"acemq_pipeline_run_total", "acemq_flow_runs_started_total", "acemq_flow_step_duration_seconds_bucket",
		"acemq_flow_steps_active", "acemq_queue_depth", "acemq_schedule_delivered_total", "acemq_schedule_backlog",
		"messaging_client_operation_duration_seconds_bucket", "acemq_worker_ready",
	} {
		require.True(t, used[n], "the dashboard shows %s", n)
	}
	require.True(t, slices.ContainsFunc(exprs, func(e string) bool { return strings.Contains(e, "error_type") }),
		"the dashboard shows step failures by error type")
}

// servedLabels reads the exposition: every sample name, with the labels
// its samples carry.
func servedLabels(body string) map[string]map[string]bool {
	out := map[string]map[string]bool{}
	label := regexp.MustCompile(`([a-zA-Z_][a-zA-Z0-9_]*)="`)
	for line := range strings.Lines(body) {
		if strings.HasPrefix(line, "#") || strings.TrimSpace(line) == "" {
			continue
		}
		name, rest, _ := strings.Cut(line, "{")
		name, _, _ = strings.Cut(name, " ")
		if out[name] == nil {
			out[name] = map[string]bool{}
		}
		if i := strings.LastIndex(rest, "}"); i >= 0 {
			for _, m := range label.FindAllStringSubmatch(rest[:i], -1) {
				out[name][m[1]] = true
			}
		}
	}
	return out
}

var (
	reString   = regexp.MustCompile(`"(?:[^"\\]|\\.)*"`)
	reVar      = regexp.MustCompile(`\$\{?[a-zA-Z_][a-zA-Z0-9_]*\}?`)
	reSelector = regexp.MustCompile(`([a-zA-Z_:][a-zA-Z0-9_:]*)\s*\{([^}]*)\}`)
	reMatcher  = regexp.MustCompile(`([a-zA-Z_][a-zA-Z0-9_]*)\s*(?:=~|!~|!=|=)`)
	reGrouping = regexp.MustCompile(`\b(?:by|without|on|ignoring)\s*\(([^)]*)\)`)
	reRange    = regexp.MustCompile(`\[[^\]]*\]`)
	reIdent    = regexp.MustCompile(`[a-zA-Z_:][a-zA-Z0-9_:]*(\s*\()?`)
	reLabelVal = regexp.MustCompile(`label_values\(\s*([a-zA-Z_:][a-zA-Z0-9_:]*)\s*,\s*([a-zA-Z_][a-zA-Z0-9_]*)\s*\)`)
)

// promqlKeywords are PromQL words that are not metric names.
var promqlKeywords = []string{"by", "without", "on", "ignoring", "group_left", "group_right", "bool", "and", "or", "unless", "offset"}

// promqlNames finds the metric names a PromQL expression (or a Grafana
// label_values(metric, label) variable) reads, the labels each selector
// matches on, and the labels it groups by. Enough PromQL for a dashboard,
// not a parser.
func promqlNames(expr string) (names []string, selected map[string][]string, grouped []string) {
	selected = map[string][]string{}
	expr = reLabelVal.ReplaceAllString(expr, "$1{$2=\"\"}")
	expr = reString.ReplaceAllString(expr, `""`)
	expr = reVar.ReplaceAllString(expr, "")
	for _, m := range reSelector.FindAllStringSubmatch(expr, -1) {
		for _, l := range reMatcher.FindAllStringSubmatch(m[2], -1) {
			selected[m[1]] = append(selected[m[1]], l[1])
		}
	}
	for _, m := range reGrouping.FindAllStringSubmatch(expr, -1) {
		for l := range strings.SplitSeq(m[1], ",") {
			if l = strings.TrimSpace(l); l != "" {
				grouped = append(grouped, l)
			}
		}
	}
	expr = reGrouping.ReplaceAllString(expr, "")
	expr = regexp.MustCompile(`\{[^}]*\}`).ReplaceAllString(expr, "")
	expr = reRange.ReplaceAllString(expr, "")
	for _, m := range reIdent.FindAllStringSubmatch(expr, -1) {
		id := m[0]
		if m[1] != "" || slices.Contains(promqlKeywords, id) {
			continue // a function call or a keyword
		}
		if !slices.Contains(names, id) {
			names = append(names, id)
		}
	}
	return names, selected, grouped
}
