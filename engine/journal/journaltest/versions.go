package journaltest

import (
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/acemq/acemq-flow/engine/journal"
)

// VersionJournal is a journal that keeps flow versions.
type VersionJournal interface {
	journal.Journal
	journal.VersionStore
}

// OpenVersions returns an empty VersionJournal for one test.
type OpenVersions func(t *testing.T) VersionJournal

// Versions runs the version suite against the journals open returns:
// versions recorded once each with when they were first and last seen,
// flows apart, runs in flight counted by step, and refusals.
func Versions(t *testing.T, open OpenVersions) {
	tests := map[string]func(*testing.T, VersionJournal){
		"versions recorded":        versionsRecorded,
		"runs in flight by step":   inFlightByStep,
		"invalid versions refused": versionsRefused,
	}
	for name, test := range tests {
		t.Run(name, func(t *testing.T) {
			t.Parallel()
			test(t, open(t))
		})
	}
}

func versionsRecorded(t *testing.T, j VersionJournal) {
	ctx := ctxOf(t)
	vs, err := j.Versions(ctx, "f")
	require.NoError(t, err)
	require.Empty(t, vs)
	v1 := journal.FlowVersion{Flow: "f", Version: "v1", Steps: []string{"a", "b"}}
	v2 := journal.FlowVersion{Flow: "f", Version: "v2", Steps: []string{"a", "c", "b"}}
	require.NoError(t, j.RecordVersion(ctx, v1, at(0)))
	require.NoError(t, j.RecordVersion(ctx, v2, at(10)))
	require.NoError(t, j.RecordVersion(ctx, journal.FlowVersion{Flow: "f", Version: "v1", Steps: []string{"ignored"}}, at(20)))
	require.NoError(t, j.RecordVersion(ctx, journal.FlowVersion{Flow: "g", Version: "v1", Steps: []string{"x"}}, at(30)))
	vs, err = j.Versions(ctx, "f")
	require.NoError(t, err)
	require.Len(t, vs, 2)
	require.Equal(t, "v1", vs[0].Version, "the first seen first")
	require.Equal(t, []string{"a", "b"}, vs[0].Steps, "a version's steps are those it was first recorded with")
	require.True(t, vs[0].FirstSeen.Equal(at(0)), "%v", vs[0].FirstSeen)
	require.True(t, vs[0].LastSeen.Equal(at(20)), "%v", vs[0].LastSeen)
	require.Equal(t, "v2", vs[1].Version)
	require.Equal(t, []string{"a", "c", "b"}, vs[1].Steps, "in their order")
	require.True(t, vs[1].FirstSeen.Equal(at(10)) && vs[1].LastSeen.Equal(at(10)))
	for _, v := range vs {
		require.Equal(t, "f", v.Flow)
	}
	g, err := j.Versions(ctx, "g")
	require.NoError(t, err)
	require.Len(t, g, 1)
	require.Equal(t, []string{"x"}, g[0].Steps)
	none, err := j.Versions(ctx, "h")
	require.NoError(t, err)
	require.Empty(t, none)
}

func inFlightByStep(t *testing.T, j VersionJournal) {
	ctx := ctxOf(t)
	got, err := j.InFlight(ctx, "f")
	require.NoError(t, err)
	require.Empty(t, got)
	record(t, j, start("r1", "f", 0, `{}`), start("r2", "f", 0, `{}`), start("r3", "f", 0, `{}`),
		start("r4", "f", 0, `{}`), start("r5", "g", 0, `{}`))
	record(t, j, step("r2", "f", "validate", 0, 1, 1, "completed", journal.Running, "charge"),
		step("r3", "f", "validate", 0, 1, 1, "waiting", journal.Waiting, "validate"),
		step("r4", "f", "validate", 0, 1, 1, "completed", journal.Completed, ""))
	got, err = j.InFlight(ctx, "f")
	require.NoError(t, err)
	require.Equal(t, map[string]int{"validate": 2, "charge": 1}, got, "running and waiting runs, by the step they are at; not r4, completed")
	got, err = j.InFlight(ctx, "g")
	require.NoError(t, err)
	require.Equal(t, map[string]int{"validate": 1}, got)
}

func versionsRefused(t *testing.T, j VersionJournal) {
	ctx := ctxOf(t)
	for name, v := range map[string]journal.FlowVersion{
		"no flow":       {Version: "v1"},
		"no version":    {Flow: "f"},
		"an empty step": {Flow: "f", Version: "v1", Steps: []string{"a", ""}},
		"a NUL":         {Flow: "f\x00", Version: "v1"},
	} {
		require.ErrorIs(t, j.RecordVersion(ctx, v, time.Now()), journal.ErrInvalidVersion, name)
	}
	vs, err := j.Versions(ctx, "f")
	require.NoError(t, err)
	require.Empty(t, vs, "nothing refused was kept")
}
