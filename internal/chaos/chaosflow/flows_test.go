package chaosflow_test

import (
	"testing"

	"github.com/stretchr/testify/require"

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
