package main

import (
	"bytes"
	"testing"

	"github.com/stretchr/testify/require"
)

func TestFlowBasic(t *testing.T) {
	t.Parallel()
	var out bytes.Buffer
	require.NoError(t, run(t.Context(), &out))
	require.Equal(t, `starting a run of signup
normalize: email ada@example.com
create-account: acct-ada
welcome: "Welcome, Ada! Your account is acct-ada." to ada@example.com
the journal says: the run of signup is completed, at step welcome
`, out.String())
}
