package main

import (
	"bytes"
	"testing"

	"github.com/stretchr/testify/require"
)

func TestFlowCompensation(t *testing.T) {
	t.Parallel()
	var out bytes.Buffer
	require.NoError(t, run(t.Context(), &out))
	require.Equal(t, `starting a run of book-trip
book-flight: booked FL-204
book-hotel: booked HT-88
charge-card: declined
  undo book-hotel: cancelled HT-88 (the trip still holds flight FL-204)
  undo book-flight: cancelled FL-204
the journal says: the run of book-trip is compensated (why: fatal: card declined)
`, out.String())
}
