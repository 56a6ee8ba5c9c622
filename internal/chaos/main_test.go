package main

import (
	"io"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"
)

var required = []string{"-bin", "b", "-ctl", "c", "-amqp-url", "amqp://x", "-database-url", "postgres://x"}

// -short picks the scenarios of the short form; -scenarios narrows it.
func TestShortForm(t *testing.T) {
	t.Parallel()
	cfg, err := parseFlags(append([]string{"-short"}, required...), io.Discard)
	require.NoError(t, err)
	require.Equal(t, []int{1, 4, 7, 9, 10}, cfg.scenarios)
	cfg, err = parseFlags(append([]string{"-short", "-scenarios", "7"}, required...), io.Discard)
	require.NoError(t, err)
	require.Equal(t, []int{7}, cfg.scenarios)
	_, err = parseFlags(append([]string{"-short", "-runs", "10"}, required...), io.Discard)
	require.ErrorContains(t, err, "-short and -runs")
	cfg, err = parseFlags(required, io.Discard)
	require.NoError(t, err)
	require.Len(t, cfg.scenarios, len(scenarios))
}

// The joins column is a count for a flow with forks and "-" for one
// without.
func TestReportJoins(t *testing.T) {
	t.Parallel()
	var b strings.Builder
	require.NoError(t, report(&b, "text", []row{
		{Scenario: 1, Name: "pipeline", Sent: 3, Completed: 3, OK: true},
		{Scenario: 8, Name: "forks", Sent: 2, Completed: 2, Joins: 4, JoinsTwice: 1},
	}))
	lines := strings.Split(b.String(), "\n")
	require.Contains(t, lines[0], "joins fired twice")
	require.Regexp(t, `^1\. pipeline\s+3\s+3\s+0\s+0\s+-\s+-\s+-\s+-\s+0\s+0s\s+ok$`, lines[1])
	require.Regexp(t, `^8\. forks\s+2\s+2\s+0\s+0\s+1\s+-\s+-\s+-\s+0\s+0s\s+FAILED$`, lines[2])
}

// The lost signals and the most in the limited step are shown for a flow
// with a WaitFor and a limited step, "-" for one without.
func TestReportWaits(t *testing.T) {
	t.Parallel()
	var b strings.Builder
	require.NoError(t, report(&b, "text", []row{
		{Scenario: 1, Name: "pipeline", Sent: 3, Completed: 3, OK: true},
		{Scenario: 9, Name: "waits", Sent: 4, Completed: 3, Signals: 4, LostSignals: 1, Limit: 2, MostInStep: 3},
	}))
	lines := strings.Split(b.String(), "\n")
	require.Contains(t, lines[0], "lost signals")
	require.Contains(t, lines[0], "most in limited step")
	require.Regexp(t, `^1\. pipeline\s+3\s+3\s+0\s+0\s+-\s+-\s+-\s+-\s+0\s+0s\s+ok$`, lines[1])
	require.Regexp(t, `^9\. waits\s+4\s+3\s+0\s+0\s+-\s+1\s+3 \(limit 2\)\s+-\s+0\s+0s\s+FAILED$`, lines[2])
}

// The stranded column is a count for a scenario that deployed another
// version of its flow, "-" for one that did not.
func TestReportStranded(t *testing.T) {
	t.Parallel()
	var b strings.Builder
	require.NoError(t, report(&b, "text", []row{
		{Scenario: 1, Name: "pipeline", Sent: 3, Completed: 3, OK: true},
		{Scenario: 10, Name: "deploy", Sent: 4, Completed: 3, Deployed: true, Stranded: 1},
	}))
	lines := strings.Split(b.String(), "\n")
	require.Contains(t, lines[0], "stranded")
	require.Regexp(t, `^1\. pipeline\s+3\s+3\s+0\s+0\s+-\s+-\s+-\s+-\s+0\s+0s\s+ok$`, lines[1])
	require.Regexp(t, `^10\. deploy\s+4\s+3\s+0\s+0\s+-\s+-\s+-\s+1\s+0\s+0s\s+FAILED$`, lines[2])
}

// A row passes on its counts only with every run completed and nothing
// lost, stranded, doubled, fired twice or over its limit.
func TestRowClean(t *testing.T) {
	t.Parallel()
	good := row{Sent: 10, Completed: 10, Signals: 10, Limit: 2, MostInStep: 2}
	require.True(t, good.clean())
	require.True(t, row{Sent: 10, Completed: 10}.clean(), "a flow without waits or limits")
	for name, bad := range map[string]func(*row){
		"nothing sent":      func(r *row) { r.Sent, r.Completed = 0, 0 },
		"one not completed": func(r *row) { r.Completed-- },
		"one lost":          func(r *row) { r.Lost = 1 },
		"one stranded":      func(r *row) { r.Stranded = 1 },
		"an effect doubled": func(r *row) { r.DoubleEffects = 1 },
		"a join twice":      func(r *row) { r.JoinsTwice = 1 },
		"a signal lost":     func(r *row) { r.LostSignals = 1 },
		"over the limit":    func(r *row) { r.MostInStep = 3 },
	} {
		r := good
		bad(&r)
		require.False(t, r.clean(), name)
	}
}
