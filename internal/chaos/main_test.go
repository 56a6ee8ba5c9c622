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
	require.Equal(t, []int{1, 4, 7}, cfg.scenarios)
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
	require.Regexp(t, `^1\. pipeline\s+3\s+3\s+0\s+0\s+-\s+0\s+0s\s+ok$`, lines[1])
	require.Regexp(t, `^8\. forks\s+2\s+2\s+0\s+0\s+1\s+0\s+0s\s+FAILED$`, lines[2])
}
