package main

import (
	"bytes"
	"regexp"
	"strconv"
	"testing"

	"github.com/stretchr/testify/require"
)

func TestFlowDelay(t *testing.T) {
	t.Parallel()
	var out bytes.Buffer
	require.NoError(t, run(t.Context(), &out))
	require.Regexp(t, `^starting a run of reminder, with a delay of 2s before remind
accept: a reminder for Linus
the journal says: the run is waiting before remind, due at \d\d:\d\d:\d\d\.\d\d\d
remind: "stand-up in five minutes" to Linus, (\d+\.\d)s after accept
the journal says: the run is completed
$`, out.String())
	after, err := strconv.ParseFloat(regexp.MustCompile(`Linus, (\d+\.\d)s after`).FindStringSubmatch(out.String())[1], 64)
	require.NoError(t, err)
	require.GreaterOrEqual(t, after, 2.0, "never early")
}
