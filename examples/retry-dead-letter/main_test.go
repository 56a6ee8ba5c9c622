package main

import (
	"testing"

	"github.com/stretchr/testify/require"
)

// TestRetryDeadLetter runs the example on the embedded broker, so that it cannot
// rot unnoticed; what it prints is for a person to read.
func TestRetryDeadLetter(t *testing.T) {
	t.Setenv("ACEMQ_URL", "")
	require.NoError(t, run(t.Context()))
}
