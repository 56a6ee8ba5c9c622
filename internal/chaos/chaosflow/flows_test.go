package chaosflow_test

import (
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/acemq/acemq-flow/dsl"
	"github.com/acemq/acemq-flow/internal/chaos/chaosflow"
)

// Every chaos flow builds: a flow the DSL refuses would fail its scenario
// only once the rig is up.
func TestFlowsBuild(t *testing.T) {
	t.Parallel()
	flows := chaosflow.Flows("chaos", nil)
	require.Len(t, flows, 4)
	for _, f := range flows {
		require.NoError(t, f.Err(), f.Name())
	}
}

// The deploy flow's versions have the routes scenario 10 counts on: the
// second renames b (only DeployV2 says so) and inserts a step before it.
func TestDeployFlowVersions(t *testing.T) {
	t.Parallel()
	names := func(f *dsl.FlowDef) []string {
		var out []string
		for _, s := range f.Steps() {
			out = append(out, s.Name)
		}
		return out
	}
	for version, want := range map[string]struct {
		steps      []string
		migrations []dsl.Migration
	}{
		chaosflow.DeployV1:          {chaosflow.DeploySteps, nil},
		chaosflow.DeployV2:          {chaosflow.DeployStepsV2, []dsl.Migration{{Old: chaosflow.DeployRenamedFrom, New: chaosflow.DeployRenamedTo}}},
		chaosflow.DeployV2Unrenamed: {chaosflow.DeployStepsV2, nil},
	} {
		f, err := chaosflow.DeployFlow("chaos", nil, version)
		require.NoError(t, err, version)
		require.NoError(t, f.Err(), version)
		require.Equal(t, "chaos."+chaosflow.Deploy, f.Name())
		require.Equal(t, want.steps, names(f), version)
		require.Equal(t, want.migrations, f.Migrations(), version)
	}
	_, err := chaosflow.DeployFlow("chaos", nil, "3")
	require.ErrorIs(t, err, chaosflow.ErrUnknownVersion)
}
